"""The B-tree page walk of an LMDB data file (:func:`walk_data_file`), read with ``pread``.

Why. LMDB trusts its pages: a branch page zeroed on disk (a lost write, a bad copy) is found only
when a cursor steps onto it, and then ``mdb_cursor_next`` fails its ``IS_LEAF(mp)`` assertion
and LMDB calls ``abort()``: the process dies of ``SIGABRT``, whatever the assert callback does.
The check before mapping (:mod:`txstore.engine.lmdb_files`) reads only the meta pages; this
walk reads every page the newest snapshot reaches and raises
:class:`~txstore.errors.DamagedFileError` (naming the file, the page and what is wrong) before
LMDB is let near a bad one. It never maps the file, so a short file cannot ``SIGBUS`` it.

What it walks, from the meta page LMDB would use (the valid one with the larger ``mm_txnid``;
page 0 on a tie): the main database, the free-page database, every named database whose record
(``F_SUBDATA``) is a leaf node of the main database, and the first page of every overflow run
(``F_BIGDATA``). What it checks, on each page (layouts in :mod:`txstore.engine.lmdb_files`;
``mdb.c`` of LMDB 0.9 as bundled by py-lmdb):

* the page is inside the file and inside ``mm_last_pg``; its header's ``mp_pgno`` is its own
  number; its ``mp_flags`` is exactly ``P_BRANCH``, ``P_LEAF`` or (first page of a run)
  ``P_OVERFLOW`` (LMDB clears ``P_DIRTY`` before it writes a page);
* ``PAGEHDRSZ <= mp_lower <= mp_upper <= psize``, at least one node, every node offset in
  ``[mp_upper, psize)``, every node (header, key, inline data) inside the page, keys at most
  ``MDB_MAXKEYSIZE`` (511) bytes, leaf node flags one of none, ``F_BIGDATA``, or ``F_SUBDATA``
  (the main database only, with 48 bytes of ``MDB_db``);
* branch pages above ``md_depth``, leaves exactly at it; each child page and overflow run
  below ``mm_last_pg + 1``; an overflow run's ``mp_pages`` equal to ``OVPAGES(size)``;
* per database: branch, leaf and overflow pages counted equal ``md_branch_pages``,
  ``md_leaf_pages``, ``md_overflow_pages``, leaf nodes equal ``md_entries`` (exact: txstore
  never creates ``MDB_DUPSORT`` databases, and a record flagged so is refused); an empty
  database (``md_root`` = ``P_INVALID``) has depth 0 and no pages;
* the whole file: "each non-metapage up to ``mm_last_pg`` is reachable exactly once in the
  snapshot: either used by a database or listed in a freeDB record" (``mdb.c``): a page reached
  twice, or neither used nor free, is damage.

Not walked: files in LMDB 1.0's format (py-lmdb 3's ``lib_version=1``; txstore creates the 0.9
format), whose node layout differs beyond the page header; the pre-map check still covers them.
Not checked: key order within a page and the bytes of keys and values (LMDB has no checksums;
a flipped byte inside a value is read back as it is; the store's decoders and
``txstore check --deep`` look at those).

A writer in another process may commit meanwhile and reuse pages the walk has not read yet; so
a verdict of damage is confirmed by a second walk after the newest meta was read again, and
raised only if the same transaction gives the same verdict.

Cost: one ``pread`` per branch or leaf page and one 16-byte ``pread`` per overflow run, plus
a Python loop over the nodes of every page; see docs/engine.md ("The page walk") for the rates.
"""

from __future__ import annotations

import os
import struct
import time
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from txstore.engine.lmdb_files import P_INVALID, check_data_file
from txstore.errors import DamagedFileError

__all__ = ["PageWalk", "page_kinds", "walk_data_file"]

_MAGIC: Final = 0xBEEFC0DE
_P_BRANCH: Final = 0x01
_P_LEAF: Final = 0x02
_P_OVERFLOW: Final = 0x04
_P_META: Final = 0x08
_F_BIGDATA: Final = 0x01
_F_SUBDATA: Final = 0x02
_MDB_DUPSORT: Final = 0x04
_DB_FLAGS: Final = 0x02 | 0x04 | 0x08 | 0x10 | 0x20 | 0x40  # REVERSEKEY .. REVERSEDUP
_MAX_KEY: Final = 511
_NODE: Final = struct.Struct("<HHHH")
_PGNO: Final = struct.Struct("<Q")  # at 0; the 1.0 format then has mp_txnid
_HEADER: Final = struct.Struct("<HHHH")  # pad, flags, lower, upper: the last 8 header bytes
_OVERFLOW_HEADER: Final = struct.Struct("<HHI")  # pad, flags, pages
_DB: Final = struct.Struct(
    "<IHHQQQQQ"
)  # md_pad, flags, depth, branch, leaf, overflow, entries, root
_U64: Final = struct.Struct("<Q")
_META_HEAD: Final = struct.Struct("<II")  # mm_magic, mm_version
_LAST: Final = struct.Struct("<QQ")  # mm_last_pg, mm_txnid
_ATTEMPTS: Final = 5
_CONFIRM_WAIT_S: Final = 0.01
_LAYOUTS: Final = ((16, 0, 1), (24, 24, 3))  # PAGEHDRSZ, PAGEBASE, mm_version: 0.9, 1.0


class PageWalk(NamedTuple):
    """What :func:`walk_data_file` read: ``pages`` branch, leaf and overflow pages in use
    (``bytes`` = pages times the page size), ``free_pages`` listed free, ``databases`` (main,
    free and named), ``entries`` leaf records, ``txnid`` of the meta page walked, and
    ``seconds`` spent. An empty or missing file walks nothing (all zero)."""

    pages: int
    bytes: int
    free_pages: int
    databases: int
    entries: int
    txnid: int
    seconds: float


class _Damage(Exception):
    pass


@dataclass
class _Db:
    name: str
    flags: int
    depth: int
    branch: int
    leaf: int
    overflow: int
    entries: int
    root: int

    @classmethod
    def parse(cls, name: str, buf: bytes | memoryview, offset: int) -> _Db:
        _pad, flags, depth, branch, leaf, overflow, entries, root = _DB.unpack_from(buf, offset)
        return cls(name, flags, depth, branch, leaf, overflow, entries, root)


@dataclass
class _Counts:
    branch: int = 0
    leaf: int = 0
    overflow: int = 0
    entries: int = 0


@dataclass
class _Walker:
    fd: int
    header: int
    base: int
    psize: int
    last_pg: int
    file_pages: int
    owner: bytearray = field(default_factory=bytearray)  # 0 unseen, 1 used, 2 free
    named: list[_Db] = field(default_factory=list)
    free: list[int] = field(default_factory=list)
    pages: int = 0
    entries: int = 0
    kinds: dict[int, tuple[str, str]] | None = None

    def read(self, pgno: int, what: str, n: int = 0) -> bytes:
        if pgno >= self.file_pages:
            raise _Damage(
                f"page {pgno} ({what}) is past the end of the file ({self.file_pages} "
                f"complete pages of {self.psize} bytes)"
            )
        data = os.pread(self.fd, n or self.psize, pgno * self.psize)
        if len(data) != (n or self.psize):
            raise _Damage(f"page {pgno} ({what}) is past the end of the file")
        return data

    def claim(self, first: int, count: int, what: str) -> None:
        """Mark pages ``first .. first+count-1`` as used by ``what``."""
        if first < 2 or first + count - 1 > self.last_pg:
            raise _Damage(
                f"{what} names page {first}"
                + (f"..{first + count - 1}" if count > 1 else "")
                + f", outside pages 2..{self.last_pg} (mm_last_pg)"
            )
        owner = self.owner
        for pg in range(first, first + count):
            if owner[pg]:
                raise _Damage(f"page {pg} is reached twice (again by {what})")
            owner[pg] = 1
        self.pages += count

    def walk(self, db: _Db, main: bool, free: bool) -> None:
        name = db.name
        if db.flags & ~_DB_FLAGS:
            raise _Damage(f"{name} has unknown flags {db.flags:#x}")
        if db.flags & _MDB_DUPSORT:
            raise _Damage(f"{name} is flagged MDB_DUPSORT, which txstore never creates")
        got = _Counts()
        if db.root == P_INVALID:
            if db.depth or db.branch or db.leaf or db.overflow or db.entries:
                raise _Damage(
                    f"{name} has no root page but depth {db.depth}, {db.branch} branch, "
                    f"{db.leaf} leaf, {db.overflow} overflow pages and {db.entries} entries"
                )
            return
        if not 1 <= db.depth <= 64:
            raise _Damage(f"{name} has root page {db.root} but depth {db.depth}")
        self.claim(db.root, 1, f"the root of {name}")
        todo = [(db.root, 1)]
        h, base, psize = self.header, self.base, self.psize
        while todo:
            pgno, level = todo.pop()
            page = self.read(pgno, f"of {name}")
            mp_pgno = _PGNO.unpack_from(page, 0)[0]
            _pad, flags, lower, upper = _HEADER.unpack_from(page, h - 8)
            where = f"page {pgno} of {name}"
            if mp_pgno != pgno:
                raise _Damage(f"{where} says it is page {mp_pgno} (zeroed or misplaced?)")
            if self.kinds is not None:
                kind = "root" if pgno == db.root else {1: "branch", 2: "leaf"}.get(flags, "?")
                self.kinds[pgno] = (kind, name)
            if flags == _P_BRANCH:
                if level >= db.depth:
                    raise _Damage(f"{where} is a branch page at depth {level} of {db.depth}")
                got.branch += 1
            elif flags == _P_LEAF:
                if level != db.depth:
                    raise _Damage(f"{where} is a leaf page at depth {level} of {db.depth}")
                got.leaf += 1
            else:
                raise _Damage(f"{where} has flags {flags:#x}, not a branch or leaf page")
            lower += base  # both count from PAGEBASE (0 in the 0.9 format, the header in 1.0)
            upper += base
            if not h <= lower <= upper <= psize or (lower - h) & 1:
                raise _Damage(f"{where} has bounds lower={lower} upper={upper}, not within it")
            n = (lower - h) >> 1
            if n < 1:
                raise _Damage(f"{where} holds no nodes")
            for off in struct.unpack_from(f"<{n}H", page, h):
                at = off + base
                if at < upper or at + 8 > psize:
                    raise _Damage(f"{where} has a node at offset {at}, outside {upper}..{psize}")
                lo, hi, nflags, ksize = _NODE.unpack_from(page, at)
                end = at + 8 + ksize
                if ksize > _MAX_KEY or end > psize:
                    raise _Damage(f"{where} has a node at offset {at} with a bad key size {ksize}")
                if flags == _P_BRANCH:
                    child = lo | hi << 16 | nflags << 32
                    self.claim(child, 1, f"a branch node of {where}")
                    todo.append((child, level + 1))
                    continue
                dsize = lo | hi << 16
                got.entries += 1
                if nflags == 0:
                    if end + dsize > psize:
                        raise _Damage(f"{where} has a node at offset {at} overrunning the page")
                    if free:
                        self.free_record(page, end, dsize, where)
                elif nflags == _F_BIGDATA:
                    if end + 8 > psize:
                        raise _Damage(f"{where} has a node at offset {at} overrunning the page")
                    ov = _U64.unpack_from(page, end)[0]
                    got.overflow += self.overflow(ov, dsize, where, free)
                elif nflags == _F_SUBDATA and main and dsize == _DB.size:
                    if end + dsize > psize:
                        raise _Damage(f"{where} has a node at offset {at} overrunning the page")
                    key = page[at + 8 : end].decode("utf-8", "backslashreplace")
                    self.named.append(_Db.parse(f"database {key!r}", page, end))
                else:
                    raise _Damage(f"{where} has a node at offset {at} with flags {nflags:#x}")
        self.entries += got.entries
        counted = (got.branch, got.leaf, got.overflow, got.entries)
        recorded = (db.branch, db.leaf, db.overflow, db.entries)
        if counted != recorded:
            raise _Damage(
                f"{name} holds {got.branch} branch, {got.leaf} leaf, {got.overflow} overflow "
                f"pages and {got.entries} entries, but its record says {db.branch}, {db.leaf}, "
                f"{db.overflow} and {db.entries}"
            )

    def overflow(self, ov: int, dsize: int, where: str, free: bool) -> int:
        """Check the overflow run at page ``ov`` holding ``dsize`` bytes; its page count. A run
        holds at least ``OVPAGES(dsize)`` pages: LMDB overwrites a dirty run in place with a
        smaller value and keeps its length."""
        need = (self.header - 1 + dsize) // self.psize + 1  # OVPAGES
        if not 2 <= ov <= self.last_pg:
            raise _Damage(f"an overflow node of {where} names page {ov}, outside 2..{self.last_pg}")
        head = self.read(ov, f"overflow of {where}", self.header)
        mp_pgno = _PGNO.unpack_from(head, 0)[0]
        _pad, flags, pages = _OVERFLOW_HEADER.unpack_from(head, self.header - 8)
        n = int(pages)
        if mp_pgno != ov or flags != _P_OVERFLOW or n < need:
            raise _Damage(
                f"overflow page {ov} of {where} says page {mp_pgno}, flags {flags:#x}, "
                f"{n} pages (expected {ov}, {_P_OVERFLOW:#x}, at least {need})"
            )
        self.claim(ov, n, f"overflow page {ov} (a run of {n} pages) of {where}")
        if self.kinds is not None:
            self.kinds[ov] = ("overflow", where.split(" of ", 1)[1])
        if ov + need > self.file_pages:
            raise _Damage(f"overflow pages {ov}..{ov + need - 1} of {where} are past the end")
        if free:
            data = os.pread(self.fd, dsize, ov * self.psize + self.header)
            if len(data) != dsize:
                raise _Damage(f"overflow pages {ov}..{ov + n - 1} of {where} are past the end")
            self.free_record(data, 0, len(data), f"overflow page {ov} of {where}")
        return n

    def free_record(self, buf: bytes, at: int, dsize: int, where: str) -> None:
        """A free-database record: a u64 count, then that many page numbers."""
        if dsize < 8:
            raise _Damage(f"{where} has a free-page record of {dsize} bytes")
        count = _U64.unpack_from(buf, at)[0]
        if (count + 1) * 8 > dsize:
            raise _Damage(f"{where} has a free-page record of {count} pages in {dsize} bytes")
        self.free.extend(struct.unpack_from(f"<{count}Q", buf, at + 8))


def walk_data_file(path: str | os.PathLike[str]) -> PageWalk:
    """Walk every page the newest snapshot of the LMDB data file ``path`` reaches (see the
    module docstring) and return what was read; raise
    :class:`~txstore.errors.DamagedFileError` naming ``path``, the page and what is wrong. The
    pre-map check (:func:`~txstore.engine.lmdb_files.check_data_file`) runs first. A missing or
    empty file walks nothing. Reads with ``pread`` only; never writes, never maps. A verdict
    of damage is confirmed against a second walk of the same transaction (a live writer may
    reuse pages meanwhile). O(pages used + free-list length)."""
    name = os.fspath(path)
    previous: tuple[int, str] | None = None
    for _ in range(_ATTEMPTS):
        if os.path.exists(name):
            check_data_file(name, False)  # an empty file walks nothing
        started = time.perf_counter()
        try:
            fd = os.open(name, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return PageWalk(0, 0, 0, 0, 0, 0, 0.0)
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                return PageWalk(0, 0, 0, 0, 0, 0, 0.0)
            return _walk(fd, size)._replace(seconds=time.perf_counter() - started)
        except _Damage as damage:
            verdict = (_newest_txnid(fd), str(damage))
            if verdict == previous:
                raise DamagedFileError(name, str(damage)) from None
            previous = verdict
        finally:
            os.close(fd)
        time.sleep(_CONFIRM_WAIT_S)
    raise DamagedFileError(name, "it kept changing while its pages were walked")


def page_kinds(path: str | os.PathLike[str]) -> dict[int, tuple[str, str]]:
    """What each page the newest snapshot of the healthy data file ``path`` uses is:
    ``{pgno: (kind, database)}``, kind one of ``root``, ``branch``, ``leaf``, ``overflow`` (the
    first page of a run), database as the walk names it (``the main database``, ``the
    free-page database``, ``database 'name'``). For tests and diagnostics; raises
    :class:`~txstore.errors.DamagedFileError` like :func:`walk_data_file`."""
    name = os.fspath(path)
    fd = os.open(name, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        kinds: dict[int, tuple[str, str]] = {}
        _walk(fd, os.fstat(fd).st_size, kinds)
        return kinds
    except _Damage as damage:
        raise DamagedFileError(name, str(damage)) from None
    finally:
        os.close(fd)


def _metas(fd: int) -> tuple[int, int, int, list[bytes]]:
    """PAGEHDRSZ, PAGEBASE, page size and the two raw meta pages."""
    first = os.pread(fd, 24 + 152, 0)
    for h, base, version in _LAYOUTS:
        if len(first) >= h + 152 and _META_HEAD.unpack_from(first, h) == (_MAGIC, version):
            psize = struct.unpack_from("<I", first, h + 24)[0]
            return h, base, psize, [first, os.pread(fd, h + 152, psize)]
    raise _Damage("meta page 0 is not an LMDB meta page")


def _newest_txnid(fd: int) -> int:
    try:
        h, _base, _psize, metas = _metas(fd)
        return max(int(_LAST.unpack_from(m, h + 120)[1]) for m in metas if len(m) >= h + 152)
    except (_Damage, OSError, ValueError):
        return -1


def _walk(fd: int, size: int, kinds: dict[int, tuple[str, str]] | None = None) -> PageWalk:
    h, base, psize, metas = _metas(fd)
    if h != 16:
        return PageWalk(0, 0, 0, 0, 0, 0, 0.0)  # the LMDB 1.0 format: not walked (see above)
    if len(metas[1]) < h + 152:
        raise _Damage("meta page 1 is past the end of the file")
    pick = (
        1
        if _LAST.unpack_from(metas[1], h + 120)[1] > _LAST.unpack_from(metas[0], h + 120)[1]
        else 0
    )
    meta = metas[pick]
    if not _HEADER.unpack_from(meta, h - 8)[1] & _P_META or _PGNO.unpack_from(meta, 0)[0] != pick:
        raise _Damage(f"meta page {pick} is not flagged as meta page {pick}")
    last_pg, txnid = _LAST.unpack_from(meta, h + 120)
    file_pages = size // psize
    if last_pg > file_pages + 2**20:
        raise _Damage(f"meta page {pick} names last page {last_pg}, far past the file's end")
    walker = _Walker(fd, h, base, psize, last_pg, file_pages, bytearray(last_pg + 1))
    walker.kinds = kinds
    free_db = _Db.parse("the free-page database", meta, h + 24)
    main_db = _Db.parse("the main database", meta, h + 24 + 48)
    walker.walk(free_db, main=False, free=True)
    walker.walk(main_db, main=True, free=False)
    for db in walker.named:
        walker.walk(db, main=False, free=False)
    owner = walker.owner
    for pg in walker.free:
        if not 2 <= pg <= last_pg:
            raise _Damage(f"the free-page database lists page {pg}, outside 2..{last_pg}")
        if owner[pg]:
            raise _Damage(f"page {pg} is listed free but is also in use or listed twice")
        owner[pg] = 2
    lost = owner.find(0, 2)
    if lost >= 0:
        raise _Damage(f"page {lost} is neither used by a database nor listed free (lost)")
    return PageWalk(
        walker.pages,
        walker.pages * psize,
        len(walker.free),
        2 + len(walker.named),
        walker.entries,
        txnid,
        0.0,
    )
