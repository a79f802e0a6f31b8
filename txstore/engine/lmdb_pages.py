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
* key order: in every branch and leaf page the keys strictly increase under the database's
  comparator, and lie within the bounds the separators of the branch pages above give them
  (child ``i`` of a branch page: every key at least separator ``i``, for ``i > 0``, and below
  separator ``i + 1``; node 0 of a branch page has no key: ``mdb_node_search`` starts a branch
  page at node 1). The comparators are the two txstore's files use: ``mdb_cmp_memn`` (bytes
  unsigned, a prefix first: a database without key flags; txstore opens none with
  ``integerkey`` or ``reverse_key``) and ``mdb_cmp_long`` (a native ``size_t``: the free-page
  database, keyed by txnid, whose keys must be that size). A database flagged
  ``MDB_REVERSEKEY`` or ``MDB_INTEGERKEY`` has its keys' sizes checked but not their order;
* the whole file: "each non-metapage up to ``mm_last_pg`` is reachable exactly once in the
  snapshot: either used by a database or listed in a freeDB record" (``mdb.c``): a page reached
  twice, or neither used nor free, is damage.

Not walked: files in LMDB 1.0's format (py-lmdb 3's ``lib_version=1``; txstore creates the 0.9
format), whose node layout differs beyond the page header; the pre-map check still covers them.
Not checked: the bytes of values, and keys beyond their order (LMDB has no checksums: a flipped
byte inside a value, or inside a key that still sorts between its neighbours, is read back as
it is; the store's decoders and ``txstore check --deep`` look at those).

The walk itself is C (``csrc/lmdbwalk.c``, in the ``txstore._codecs`` extension): it reads
the pages with ``pread`` on the descriptor opened here, through page-sized buffers it owns,
and keeps a bitmap of ``mm_last_pg + 1`` bits (pages seen), the stack of pages still to visit
(each with its key bounds), the separators of the branch pages above the page being read and
the free list, never the file. It stops at the first fault with a reason code, the
database and page concerned and the numbers to name; this module reads the meta pages, picks
the one to walk and turns the C result into the :class:`~txstore.errors.DamagedFileError`
text (``_MESSAGES``). A failed read (``EIO``) is a :class:`~txstore.errors.StorageError`
carrying its ``errno``.

A writer in another process may commit meanwhile and reuse pages the walk has not read yet; so
a verdict of damage is confirmed by a second walk after the newest meta was read again, and
raised only if the same transaction gives the same verdict.

Cost: one ``pread`` per branch or leaf page and one 16-byte ``pread`` per overflow run (more
for the free-page database's overflowing records), and a C loop over the nodes of every page
(one key comparison a node);
see docs/engine.md ("A damaged B-tree page") for the rates.
"""

from __future__ import annotations

import os
import struct
import time
from typing import Any, Final, NamedTuple

import txstore._codecs as _codecs
from txstore.engine.lmdb_files import check_data_file
from txstore.errors import DamagedFileError, StorageError

__all__ = ["PageWalk", "page_kinds", "walk_data_file"]

_ffi: Any = _codecs.ffi
_lib: Any = _codecs.lib
_MAGIC: Final = 0xBEEFC0DE
_P_META: Final = 0x08
_PGNO: Final = struct.Struct("<Q")  # at 0; the 1.0 format then has mp_txnid
_FLAGS: Final = struct.Struct("<H")  # mp_flags, 6 bytes before the end of the page header
_META_HEAD: Final = struct.Struct("<II")  # mm_magic, mm_version
_LAST: Final = struct.Struct("<QQ")  # mm_last_pg, mm_txnid
_DBS: Final = 96  # the free-page and main databases' MDB_db records, after mm_mapsize
_ATTEMPTS: Final = 5
_CONFIRM_WAIT_S: Final = 0.01
_LAYOUTS: Final = ((16, 0, 1), (24, 24, 3))  # PAGEHDRSZ, PAGEBASE, mm_version: 0.9, 1.0
_KINDS: Final = {1: "root", 2: "branch", 3: "leaf", 4: "overflow", 5: "?"}

#: The text of each reason the C walk reports (csrc/lmdbwalk.h, enum txw_reason), filled from
#: its numbers ``v0``..``v7`` and its context: ``name`` (the database), ``where`` (the branch or
#: leaf page being read), ``what`` (what reached the page named), ``fwhere`` (where a free-page
#: record lies), ``span`` (``..last`` for a run of pages) and ``pick`` (the meta page walked).
_MESSAGES: Final = {
    1: "page {v0} ({what}) is past the end of the file ({v1} complete pages of {v2} bytes)",
    2: "page {v0} ({what}) is past the end of the file",
    3: "{what} names page {v0}{span}, outside pages 2..{v2} (mm_last_pg)",
    4: "page {v0} is reached twice (again by {what})",
    5: "{name} has unknown flags {v0:#x}",
    6: "{name} is flagged MDB_DUPSORT, which txstore never creates",
    7: "{name} has no root page but depth {v0}, {v1} branch, {v2} leaf, {v3} overflow pages "
    "and {v4} entries",
    8: "{name} has root page {v0} but depth {v1}",
    9: "{where} says it is page {v0} (zeroed or misplaced?)",
    10: "{where} is a branch page at depth {v0} of {v1}",
    11: "{where} is a leaf page at depth {v0} of {v1}",
    12: "{where} has flags {v0:#x}, not a branch or leaf page",
    13: "{where} has bounds lower={v0} upper={v1}, not within it",
    14: "{where} holds no nodes",
    15: "{where} has a node at offset {v0}, outside {v1}..{v2}",
    16: "{where} has a node at offset {v0} with a bad key size {v1}",
    17: "{where} has a node at offset {v0} overrunning the page",
    18: "{where} has a node at offset {v0} with flags {v1:#x}",
    19: "{name} holds {v0} branch, {v1} leaf, {v2} overflow pages and {v3} entries, but its "
    "record says {v4}, {v5}, {v6} and {v7}",
    20: "an overflow node of {where} names page {v0}, outside 2..{v1}",
    21: "overflow page {v0} of {where} says page {v1}, flags {v2:#x}, {v3} pages (expected "
    "{v0}, 0x4, at least {v4})",
    22: "overflow pages {v0}..{v1} of {where} are past the end",
    23: "{fwhere} has a free-page record of {v0} bytes",
    24: "{fwhere} has a free-page record of {v0} pages in {v1} bytes",
    25: "the free-page database lists page {v0}, outside 2..{v1}",
    26: "page {v0} is listed free but is also in use or listed twice",
    27: "page {v0} is neither used by a database nor listed free (lost)",
    28: "meta page {pick} names an impossible page size {v0}",
    29: "meta page {pick} names last page {v0}, far past the file's end",
    33: "{where} has keys out of order: the key of node {v0} (offset {v1}) is not above the "
    "key of node {v2}",
    34: "{where} has keys out of order: the key of node {v0} (offset {v1}) is below the key "
    "of node {v3} of page {v2}, the lower bound its parent gives it",
    35: "{where} has keys out of order: the key of node {v0} (offset {v1}) is not below the "
    "key of node {v3} of page {v2}, the upper bound its parent gives it",
}


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


def walk_data_file(path: str | os.PathLike[str]) -> PageWalk:
    """Walk every page the newest snapshot of the LMDB data file ``path`` reaches (see the
    module docstring) and return what was read; raise
    :class:`~txstore.errors.DamagedFileError` naming ``path``, the page and what is wrong. The
    pre-map check (:func:`~txstore.engine.lmdb_files.check_data_file`) runs first. A missing or
    empty file walks nothing. Reads with ``pread`` only; never writes, never maps. A verdict
    of damage is confirmed against a second walk of the same transaction (a live writer may
    reuse pages meanwhile). O(pages used + free-list length); memory O(``mm_last_pg`` bits +
    free-list length), not the file's size."""
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
            return _walk(fd, size, name)._replace(seconds=time.perf_counter() - started)
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
        _walk(fd, os.fstat(fd).st_size, name, kinds)
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


def _walk(
    fd: int, size: int, path: str, kinds: dict[int, tuple[str, str]] | None = None
) -> PageWalk:
    """Pick the meta page LMDB would use and walk its snapshot in C; fill ``kinds`` if given."""
    h, _base, psize, metas = _metas(fd)
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
    if not _FLAGS.unpack_from(meta, h - 6)[0] & _P_META or _PGNO.unpack_from(meta, 0)[0] != pick:
        raise _Damage(f"meta page {pick} is not flagged as meta page {pick}")
    last_pg, txnid = _LAST.unpack_from(meta, h + 120)
    walker = _lib.txw_new(fd, size)
    if walker == _ffi.NULL:
        raise MemoryError("no memory for the page walk")
    try:
        n_kinds = last_pg + 1 if kinds is not None and last_pg < size // 512 + 2**20 else 0
        kind_of = _ffi.new("uint8_t[]", n_kinds) if n_kinds else _ffi.NULL
        db_of = _ffi.new("int32_t[]", n_kinds) if n_kinds else _ffi.NULL
        out = _ffi.new("txw_result *")
        dbs = _ffi.from_buffer(meta[h + 24 : h + 24 + _DBS])
        reason = _lib.txw_walk(walker, psize, last_pg, dbs, _DBS, kind_of, db_of, n_kinds, out)
        if reason:
            _fail(walker, out, pick, path)
        if kinds is not None and n_kinds:
            names: dict[int, str] = {}
            codes = bytes(_ffi.buffer(kind_of, n_kinds))
            for pgno, code in enumerate(codes):
                if code:
                    db = db_of[pgno]
                    if db not in names:
                        names[db] = _db_name(walker, db)
                    kinds[pgno] = (_KINDS[code], names[db])
    finally:
        _lib.txw_free(walker)
    return PageWalk(
        out.pages, out.pages * psize, out.free_pages, out.databases, out.entries, txnid, 0.0
    )


def _db_name(walker: Any, db: int) -> str:
    """How messages name database number ``db`` (0 free pages, 1 main, 2+ named)."""
    if db == 0:
        return "the free-page database"
    if db == 1:
        return "the main database"
    buf = _ffi.new("uint8_t[]", 512)
    n = _lib.txw_db_name(walker, db, buf, 512)
    key = bytes(_ffi.buffer(buf, max(0, min(n, 512)))).decode("utf-8", "backslashreplace")
    return f"database {key!r}"


def _fail(walker: Any, out: Any, pick: int, path: str) -> None:
    """Raise what the C walk's result ``out`` reports: :class:`_Damage` with its text, or the
    error of a failed read or allocation."""
    reason = out.reason
    if reason == _lib.TXW_R_IO:
        raise StorageError(out.error, f"reading {path}: {os.strerror(out.error)}", path)
    if reason == _lib.TXW_R_NOMEM:
        raise MemoryError("no memory for the page walk")
    if reason not in _MESSAGES:
        raise AssertionError(f"the page walk's C code returned reason {reason}")
    name = _db_name(walker, out.db)
    where = f"page {out.where} of {name}"
    via = out.via
    if via == _lib.TXW_VIA_ROOT:
        what = f"the root of {name}"
    elif via == _lib.TXW_VIA_BRANCH:
        what = f"a branch node of {where}"
    elif via == _lib.TXW_VIA_OVERFLOW and reason in (_lib.TXW_R_PAST_END, _lib.TXW_R_SHORT_READ):
        what = f"overflow of {where}"
    elif via == _lib.TXW_VIA_OVERFLOW:
        what = f"overflow page {out.run} (a run of {out.run_pages} pages) of {where}"
    else:
        what = f"of {name}"
    fwhere = f"overflow page {out.run} of {where}" if via == _lib.TXW_VIA_OVERFLOW else where
    v = {f"v{i}": out.v[i] for i in range(8)}
    span = f"..{v['v1']}" if v["v1"] != v["v0"] else ""
    raise _Damage(
        _MESSAGES[reason].format(
            name=name, where=where, what=what, fwhere=fwhere, span=span, pick=pick, **v
        )
    )
