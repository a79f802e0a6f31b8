"""The check of an LMDB data file before it is mapped (:func:`check_data_file`).

LMDB maps ``data.mdb`` and reads its pages through the map. A file shorter than the pages its
meta page says it holds (truncated by a bad copy, a full disk, a crash of a careless tool) is
only found when a read touches a missing page, and then the process dies of ``SIGBUS``: no
exception, no chance to report or repair. So every environment is checked before LMDB opens it
(:func:`~txstore.engine.lmdb_env.acquire_env`, and the reopen of a read-only one), reading
the two meta pages with ``pread`` and comparing the file size with the last page they name;
a bad file raises :class:`~txstore.errors.DamagedFileError`.

The layout, from LMDB's ``mdb.c`` (``MDB_page``, ``MDB_meta``, ``MDB_db``, ``MDB_node``,
``mdb_env_read_header``; 0.9 is branch ``mdb.RE/0.9``, the 1.0 layout branch ``mdb.master3``),
native little-endian, 64-bit page numbers:

* page header (``PAGEHDRSZ``): 16 bytes in the 0.9 format (``pgno`` u64, ``mp_pad`` u16,
  ``mp_flags`` u16, ``mp_lower``/``mp_upper`` u16 each, or ``mp_pages`` u32 on an overflow
  page); 24 in the 1.0 format, which adds an 8-byte ``mp_txnid`` after ``pgno``;
* pages 0 and 1 are meta pages (``P_META`` = 0x08); the meta follows the header:
  ``mm_magic`` u32 (0xBEEFC0DE), ``mm_version`` u32 (``MDB_DATA_VERSION``: 1 for 0.9; 3 is
  what LMDB 1.0.x writes, read back from a file py-lmdb 3.0.0's 1.0 engine created),
  ``mm_address`` (8), ``mm_mapsize`` (8), two ``MDB_db`` of 48 bytes (free pages, main), then
  ``mm_last_pg`` u64 and ``mm_txnid`` u64. The page size is the free database's ``md_pad``
  (the meta's first ``MDB_db`` field). LMDB reads page 0 at offset 0 and page 1 at offset
  ``psize``, and uses the meta with the larger ``mm_txnid``;
* ``MDB_db``: ``md_pad`` u32, ``md_flags`` u16, ``md_depth`` u16, ``md_branch_pages``,
  ``md_leaf_pages``, ``md_overflow_pages``, ``md_entries``, ``md_root`` (u64 each);
* a branch or leaf page holds ``(mp_lower - (PAGEHDRSZ - PAGEBASE)) / 2`` node offsets (u16)
  after its header, each counted from ``PAGEBASE`` (0 in the 0.9 format, ``PAGEHDRSZ`` in
  1.0, which also allows 64 KiB pages against 32 KiB); a node is ``mn_lo``, ``mn_hi``,
  ``mn_flags``, ``mn_ksize`` (u16 each) then the key and the data: a branch node's child
  page is ``mn_lo | mn_hi << 16 | mn_flags << 32``, a leaf node's data size
  ``mn_lo | mn_hi << 16``; ``F_BIGDATA`` (0x01) puts the data on overflow pages, whose
  number is the node's data;
* a free-database record maps a transaction id to an ID list: a u64 count, then that many
  page numbers.

**The file may legitimately be shorter than ``mm_last_pg``.** ``mdb.c`` says so ("Actually
the file may be shorter if the freeDB lists the final pages"): pages a transaction dirtied and
freed again (loose pages) are never written, and ``mdb_env_copyfd1`` caps its copy at the file
size for that reason. Reproduced: 3 of 3,000 random commits left the file one page short of
``mm_last_pg``. So a short file is damaged only if a missing page is *not* free: every page up
to ``mm_last_pg`` is either used by a database or listed in the free database ("Each
non-metapage up to mm_last_pg is reachable exactly once in the snapshot"). Only then is the
free database walked (``pread``, never the map): O(free database), and only for a short file.

Cost on every open: one ``open``, two ``pread`` of 176 bytes and an ``fstat``. A writer in
another process may extend the file meanwhile: the metas are read before the size, and LMDB
writes a transaction's pages before its meta, so the size covers what the metas name; a
verdict of damage is confirmed by a second look (the file did not change meanwhile) before it
is raised.
"""

from __future__ import annotations

import os
import struct
import time
from typing import Final, NamedTuple

from txstore.errors import DamagedFileError

__all__ = ["check_data_file"]

MDB_MAGIC: Final = 0xBEEFC0DE
P_BRANCH: Final = 0x01
P_LEAF: Final = 0x02
P_OVERFLOW: Final = 0x04
P_META: Final = 0x08
F_BIGDATA: Final = 0x01
P_INVALID: Final = 2**64 - 1
META_BYTES: Final = 152
"""``sizeof(MDB_meta)`` on 64-bit: 4 + 4 + 8 + 8 + 2 * 48 + 8 + 8."""
MIN_PAGE: Final = 512
_U16: Final = struct.Struct("<H")
_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")
_NODE: Final = struct.Struct("<HHHH")
_CONFIRM_WAIT_S: Final = 0.01


class _Layout(NamedTuple):
    name: str
    header: int  # PAGEHDRSZ
    base: int  # PAGEBASE: node offsets and mp_lower count from here
    max_page: int  # MAX_PAGESIZE
    versions: frozenset[int]


_LAYOUTS: Final = (
    _Layout("LMDB 0.9", 16, 0, 0x8000, frozenset({1})),
    _Layout("LMDB 1.0", 24, 24, 0x10000, frozenset({3})),
)


class _Meta(NamedTuple):
    layout: _Layout
    psize: int
    free_root: int
    main_root: int
    last_pg: int
    txnid: int


class _Damage(Exception):
    def __init__(self, reason: str, state: tuple[int, ...] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.state = state  # what the file looked like: a second look must see the same


def check_data_file(path: str, readonly: bool) -> None:
    """Raise :class:`~txstore.errors.DamagedFileError` if the LMDB data file ``path`` is not
    safe to map: meta pages unreadable, or the file shorter than the pages its newest meta
    names (unless the missing pages are free). A missing file passes (LMDB creates it), and so
    does an empty one unless ``readonly`` (LMDB initializes an empty file when it may write).
    O(1) reads, plus a walk of the free database when the file is short (see the module
    docstring)."""
    previous: tuple[int, ...] | None = None
    for _ in range(5):
        try:
            _check(path, readonly)
            return
        except OSError:
            return  # missing or unreadable: LMDB creates it, or reports why it cannot
        except _Damage as damage:
            if damage.state == previous:
                raise DamagedFileError(path, damage.reason) from None
            previous = damage.state
        # A writer (or the creator of a new file) may have been changing the file while it
        # was read: look again, and report damage only if the file did not change.
        time.sleep(_CONFIRM_WAIT_S)
    raise DamagedFileError(path, "it kept changing while it was checked")


def _check(path: str, readonly: bool) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            if readonly:
                raise _Damage("the file is empty (0 bytes)", (0,))
            return  # a new environment: LMDB writes its meta pages
        metas = [_read_meta(fd, 0, size)]
        metas.append(_read_meta(fd, metas[0].psize, size, metas[0]))
        meta = max(metas, key=lambda m: m.txnid)  # LMDB uses the newest
        size = os.fstat(fd).st_size  # after the metas: it covers what they name
        state = (size, meta.txnid, meta.last_pg)
        pages = size // meta.psize  # complete pages
        for what, root in (("main", meta.main_root), ("free-page", meta.free_root)):
            if root != P_INVALID and not 2 <= root <= meta.last_pg:
                raise _Damage(
                    f"the {what} database's root page {root} is outside pages 2..{meta.last_pg}",
                    state,
                )
        if pages > meta.last_pg:
            return
        if pages < 2:
            raise _Damage(f"{size} bytes cannot hold the two meta pages", state)
        free = _free_pages(fd, meta, pages, state)
        used = next((pg for pg in range(pages, meta.last_pg + 1) if pg not in free), None)
        if used is not None:
            raise _Damage(
                f"truncated: {size} bytes hold {pages} complete pages of {meta.psize} bytes, "
                f"but the meta page of transaction {meta.txnid} uses pages up to "
                f"{meta.last_pg} ({(meta.last_pg + 1) * meta.psize} bytes), and missing page "
                f"{used} is not a free page",
                state,
            )
    finally:
        os.close(fd)


def _pread(fd: int, n: int, offset: int, state: tuple[int, ...]) -> bytes:
    data = os.pread(fd, n, offset)
    if len(data) != n:
        raise _Damage(f"{n} bytes at offset {offset} are past the end of the file", state)
    return data


def _read_meta(fd: int, offset: int, size: int, first: _Meta | None = None) -> _Meta:
    """The meta page at ``offset`` (page 0 at 0, page 1 at page 0's page size)."""
    number = 0 if first is None else 1
    state = (size, offset)
    if size < offset + 24 + META_BYTES:
        raise _Damage(f"the file ({size} bytes) ends inside meta page {number}", state)
    buf = _pread(fd, 24 + META_BYTES, offset, state)
    layouts = _LAYOUTS if first is None else (first.layout,)
    for layout in layouts:
        h = layout.header
        if _U32.unpack_from(buf, h)[0] != MDB_MAGIC:
            continue
        version = _U32.unpack_from(buf, h + 4)[0]
        if version not in layout.versions:
            raise _Damage(
                f"meta page {number} has format version {version}, not one {layout.name} reads",
                state,
            )
        if not _U16.unpack_from(buf, h - 6)[0] & P_META:
            raise _Damage(f"meta page {number} is not flagged as a meta page", state)
        psize = _U32.unpack_from(buf, h + 24)[0]
        if first is not None and psize != first.psize:
            raise _Damage(f"the meta pages disagree on the page size ({first.psize})", state)
        if not MIN_PAGE <= psize <= layout.max_page or psize & (psize - 1):
            raise _Damage(f"meta page {number} names an impossible page size {psize}", state)
        return _Meta(
            layout,
            psize,
            _U64.unpack_from(buf, h + 24 + 40)[0],
            _U64.unpack_from(buf, h + 24 + 48 + 40)[0],
            _U64.unpack_from(buf, h + 24 + 96)[0],
            _U64.unpack_from(buf, h + 24 + 104)[0],
        )
    raise _Damage(f"meta page {number} lacks LMDB's magic number (not an LMDB file)", state)


def _free_pages(fd: int, meta: _Meta, pages: int, state: tuple[int, ...]) -> set[int]:
    """Every page the free database of ``meta`` lists, read with ``pread``; raises
    :class:`_Damage` if one of its own pages is past the ``pages`` complete pages of the file
    or malformed."""
    h, base, psize = meta.layout.header, meta.layout.base, meta.psize
    free: set[int] = set()
    if meta.free_root == P_INVALID:
        return free
    todo, seen = [meta.free_root], set[int]()
    while todo:
        pgno = todo.pop()
        if pgno in seen or len(seen) > pages:
            raise _Damage(f"the free-page database reaches page {pgno} twice", state)
        seen.add(pgno)
        if pgno >= pages:
            raise _Damage(
                f"truncated: page {pgno} of the free-page database is past the end of the "
                f"file ({pages} complete pages of {psize} bytes)",
                state,
            )
        page = _pread(fd, psize, pgno * psize, state)
        flags = _U16.unpack_from(page, h - 6)[0]
        count = (_U16.unpack_from(page, h - 4)[0] - (h - base)) >> 1
        if not 0 <= count <= (psize - h) // 2 or not flags & (P_BRANCH | P_LEAF):
            raise _Damage(f"page {pgno} of the free-page database is malformed", state)
        for i in range(count):
            at = _U16.unpack_from(page, h + 2 * i)[0] + base
            if not h <= at <= psize - _NODE.size:
                raise _Damage(f"page {pgno} of the free-page database is malformed", state)
            lo, hi, nflags, ksize = _NODE.unpack_from(page, at)
            if flags & P_BRANCH:
                todo.append(lo | hi << 16 | nflags << 32)
                continue
            dsize = lo | hi << 16
            start = at + _NODE.size + ksize
            if nflags & F_BIGDATA:
                data = _overflow(fd, meta, page, start, dsize, pages, state)
            else:
                data = page[start : start + dsize]
            if len(data) < 8 or len(data) < 8 * (1 + _U64.unpack_from(data, 0)[0]):
                raise _Damage(f"a record on page {pgno} of the free-page database is bad", state)
            n = _U64.unpack_from(data, 0)[0]
            free.update(struct.unpack_from(f"<{n}Q", data, 8))
    return free


def _overflow(
    fd: int, meta: _Meta, page: bytes, start: int, dsize: int, pages: int, state: tuple[int, ...]
) -> bytes:
    """The data of a free-database record kept on overflow pages."""
    h, psize = meta.layout.header, meta.psize
    if start + 8 > len(page):
        raise _Damage("a free-page database record is malformed", state)
    ov = _U64.unpack_from(page, start)[0]
    n_pages = -(-(h + dsize) // psize)
    if ov < 2 or ov + n_pages > pages:
        raise _Damage(
            f"truncated: overflow pages {ov}..{ov + n_pages - 1} of the free-page database "
            f"are past the end of the file ({pages} complete pages of {psize} bytes)",
            state,
        )
    head = _pread(fd, h, ov * psize, state)
    if not _U16.unpack_from(head, h - 6)[0] & P_OVERFLOW:
        raise _Damage(f"page {ov} of the free-page database is not an overflow page", state)
    return _pread(fd, dsize, ov * psize + h, state)
