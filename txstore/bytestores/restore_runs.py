"""Sorted restore of an empty key-value store: sorted runs on disk, one k-way merge into LMDB.

A restore of a large changelog into a store that holds nothing yet (see
:func:`~txstore.runtime.restore_sorted.restore_sorted`) does not commit chunk after chunk into
a growing B-tree (each commit of random keys rewrites most of its leaves). Phase 1 turns each
restore chunk into a sorted **run** (:meth:`SortedRuns.add`: ``restore_rows`` keeps the last
record of each key, sorts, converts and seals them, as :meth:`BytesKeyValueStore.restore_records
<txstore.bytestores.kv.BytesKeyValueStore.restore_records>` does; ``encode_run`` of
``csrc/restore_runs.c`` packs it). A run stays in memory if it fits in what is left of the
memory budget (a task's overlay budget, 64 MiB by default); the others are appended to a file
of the partition directory, a file without a name (``tempfile.TemporaryFile``: a crash leaves
nothing behind). Phase 2 (:meth:`SortedRuns.commit`) merges the runs in C (``merge_runs``: the
later run wins on an equal key; a key whose latest record is a tombstone is dropped, the store
being empty), the filed runs read through a read-only map of the file, and streams the rows
into ONE LMDB write transaction by cursor appends
(:meth:`~txstore.engine.partition_writes.PartitionWrites.commit_stream`): every leaf written
once, one synced commit with the changelog's end offset. A crash before it leaves the store
empty: the next restore starts over.

Memory: one restore chunk and the runs kept in memory (at most the budget) in phase 1; in
phase 2 those runs and one merged batch, plus what LMDB keeps of the write transaction's
dirty pages (it spills them to the file past its limit). The map of the run file is page
cache, which the kernel reclaims under pressure (it reads the pages again when needed).

>>> import tempfile
>>> from txstore.engine.partition import Partition
>>> from txstore.bytestores.kv import BytesKeyValueStore
>>> from txstore.codecs import ValueFormat
>>> with tempfile.TemporaryDirectory() as d, Partition(d, sync=False) as p:
...     store = BytesKeyValueStore("s", p)
...     with SortedRuns(store, ValueFormat.PLAIN) as runs:
...         runs.add([b"b", b"a"], [b"1", b"2"], [0, 0], [b"", b""])
...         runs.add([b"b", b"c"], [None, b"3"], [0, 0], [b"", b""])
...         runs.commit(4)
...     print(store.committed_offset, list(store.all()))
...     store.close()
4 [(b'a', b'2'), (b'c', b'3')]
"""

from __future__ import annotations

import contextlib
import glob
import mmap
import os
import tempfile
from collections.abc import Iterator, Sequence
from typing import IO, Any, Final

from txstore._checksums import encode_run, merge_runs, restore_frames_run
from txstore.bytestores.kv import BytesKeyValueStore, checked_rows
from txstore.codecs import ValueFormat, records_to_values
from txstore.engine.base import MAX_KEY_SIZE
from txstore.engine.checksums import frame_records, restore_rows, seal
from txstore.errors import InvalidTypeError, StorageError

__all__ = [
    "MEMORY_BYTES",
    "MERGE_BATCH",
    "PREFIX",
    "RELEASE_BYTES",
    "SortedRuns",
    "sorted_restore_applies",
]

#: The name of a run file (none on Linux: the file is made without a name, ``O_TMPFILE``).
PREFIX: Final = "txstore-restore-runs-"
#: Rows one merge call hands LMDB (one ``putmulti``).
MERGE_BATCH: Final = 65_536
#: Bytes of a filed run merged before its pages are handed back (``MADV_DONTNEED`` on the
#: map: the process's resident size stays small; the pages stay in the page cache).
RELEASE_BYTES: Final = 256 << 10
#: Bytes of runs kept in memory by default (a task passes its overlay budget).
MEMORY_BYTES: Final = 64 << 20


def sorted_restore_applies(store: object) -> bool:
    """Whether ``store`` can take a sorted restore: a key-value bytes store on an LMDB
    partition that has committed nothing and holds no row (nothing staged either)."""
    return (
        isinstance(store, BytesKeyValueStore)
        and store.persistent
        and hasattr(store.partition, "commit_stream")
        and store.committed_offset is None
        and store.approximate_num_entries() == 0
    )


def _columns(
    store: BytesKeyValueStore,
    keys: list[bytes],
    values: list[bytes | None],
    timestamps: Sequence[int],
    headers: Sequence[bytes],
    fmt: ValueFormat,
) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """The sorted rows (keys, stored values) and deletes of one restore chunk: ``restore_rows``
    or, when it refuses an item, the checked Python path of ``restore_records`` (which raises
    the typed error naming a bad item)."""
    checksums = bool(store.partition.checksums)
    try:
        return restore_rows(keys, values, timestamps, headers, int(fmt), checksums, MAX_KEY_SIZE)
    except (TypeError, ValueError, OverflowError):
        converted: list[Any] = list(values)
        if fmt != ValueFormat.PLAIN:
            converted = records_to_values(fmt, converted, timestamps, headers)
        latest = checked_rows(keys, converted)
    live = sorted((k, v) for k, v in latest.items() if v is not None)
    ordered = [k for k, _ in live]
    stored = [seal(k, v) if checksums else v for k, v in live]
    deletes = sorted(k for k, v in latest.items() if v is None)
    return ordered, stored, deletes


class SortedRuns:
    """The sorted runs of one sorted restore of ``store`` (values converted to ``fmt``): each
    in memory if it fits in what is left of ``memory_bytes``, else in an unnamed temporary
    file of the partition directory; a context manager (closing it drops them)."""

    def __init__(
        self, store: BytesKeyValueStore, fmt: ValueFormat, memory_bytes: int = MEMORY_BYTES
    ) -> None:
        self.store = store
        self.fmt = fmt
        self.memory_bytes = memory_bytes
        """Bytes of runs kept in memory at most (a run past them goes to the file)."""
        self._directory = os.fspath(getattr(store.partition, "path", "")) or None
        if self._directory is not None:  # a file a crash left where the kernel lacks O_TMPFILE
            pattern = os.path.join(glob.escape(self._directory), PREFIX + "*")
            for stale in glob.glob(pattern):
                with contextlib.suppress(OSError):
                    os.unlink(stale)
        self._file: IO[bytes] | None = None  # made by the first run that does not fit
        self.runs: list[bytes | tuple[int, int]] = []
        """Each run, in the order written: its bytes (kept in memory) or its (start, end)
        byte offsets in the run file."""
        self.nbytes = 0
        """Bytes of runs written, in memory and in the file."""
        self._held = 0  # bytes of runs in memory
        self._filed = 0  # bytes of runs in the file

    def __enter__(self) -> SortedRuns:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop the runs (the file has no name: closing it frees its space)."""
        self.runs = []
        self._held = 0
        if self._file is not None:
            self._file.close()
            self._file = None

    def add(
        self,
        keys: list[bytes],
        values: list[bytes | None],
        timestamps: Sequence[int],
        headers: Sequence[bytes],
    ) -> None:
        """Write the run of one restore chunk (changelog records in their order; a later
        record of a key wins). A bad item raises its typed error; nothing is written."""
        self._add(*_columns(self.store, keys, values, timestamps, headers, self.fmt))

    def add_frames(self, frames: list[Any]) -> None:
        """:meth:`add` of records left in the changelog reader's buffers (``frames``: the
        slices of :meth:`~txstore.bytestores.kv.BytesKeyValueStore.restore_frames`), made
        into a run in place by the C ``restore_frames_run`` (no object per record or row);
        anything it refuses is decoded and takes :meth:`add`'s checked path (typed errors,
        nothing written)."""
        if not isinstance(frames, list):
            raise InvalidTypeError(f"frames must be a list, got {type(frames).__name__}")
        checksums = bool(self.store.partition.checksums)
        try:
            run = restore_frames_run(frames, int(self.fmt), checksums, MAX_KEY_SIZE)
        except (TypeError, ValueError, OverflowError):
            self.add(*frame_records(frames))
            return
        self._keep(run)

    def _add(self, ordered: list[bytes], stored: list[bytes], deletes: list[bytes]) -> None:
        self._keep(encode_run(ordered, stored, deletes))

    def _keep(self, data: bytes) -> None:
        """Keep run ``data``: in memory if it fits in what is left of :attr:`memory_bytes`,
        else appended to the file. The write is synchronous: a writer thread waited for the GIL behind the
        restore's C passes (1M records: 0.25-0.6 s of waits against 30 ms of writes)."""
        if self._held + len(data) <= self.memory_bytes:
            self.runs.append(data)
            self._held += len(data)
        else:
            try:
                if self._file is None:
                    self._file = tempfile.TemporaryFile(  # noqa: SIM115 (closed by close())
                        buffering=0, dir=self._directory, prefix=PREFIX
                    )
                with memoryview(data) as left:
                    while left:  # os.write may write less (a signal, 2 GiB at most a call)
                        left = left[os.write(self._file.fileno(), left) :]
            except OSError as e:
                raise StorageError(
                    f"cannot write a sorted restore's run into {self._directory}: {e}"
                ) from e
            self.runs.append((self._filed, self._filed + len(data)))
            self._filed += len(data)
        self.nbytes += len(data)

    def merged(self) -> Iterator[tuple[list[bytes], list[bytes]]]:
        """The merged rows of every run, in key order, in batches of at most
        :data:`MERGE_BATCH` (keys, stored values): the latest run wins, a key whose latest
        record is a tombstone is left out. Each call merges from the start. Every run is read
        whole: from memory, or through a read-only map of the run file (its pages are the
        page cache's: no copy, and the kernel may drop them and read them again); the pages
        of a filed run are unmapped as the merge passes them, every :data:`RELEASE_BYTES`."""
        mapped = view = None
        if self._filed:
            assert self._file is not None
            fd = self._file.fileno()
            if os.fstat(fd).st_size < self._filed:  # a map past the end would fault (SIGBUS)
                raise StorageError("a restore run file ended early: its runs were cut")
            mapped = mmap.mmap(fd, self._filed, prot=mmap.PROT_READ)
            view = memoryview(mapped)
        bufs: list[Any] = [
            run if isinstance(run, bytes) else view[run[0] : run[1]]  # type: ignore[index]
            for run in self.runs
        ]
        filed = [(i, run[0]) for i, run in enumerate(self.runs) if isinstance(run, tuple)]
        try:
            pos, more = [0] * len(bufs), [False] * len(bufs)
            released = [0] * len(bufs)
            while True:
                try:
                    keys, values, _ = merge_runs(bufs, pos, more, MERGE_BATCH)
                except ValueError as e:  # a run ends inside a record
                    raise StorageError(f"a sorted restore's run is damaged: {e}") from e
                if not keys:
                    return
                for i, start in filed:  # hand back the pages merged (the process's RSS)
                    if mapped is not None and pos[i] - released[i] >= RELEASE_BYTES:
                        lo = (start + released[i]) // mmap.PAGESIZE * mmap.PAGESIZE
                        hi = (start + pos[i]) // mmap.PAGESIZE * mmap.PAGESIZE
                        mapped.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
                        released[i] = pos[i]
                yield keys, values
        finally:
            for buf in bufs:
                if isinstance(buf, memoryview):
                    buf.release()
            if view is not None:
                view.release()
            if mapped is not None:
                mapped.close()

    def commit(self, offset: int) -> None:
        """Merge the runs into the (empty) store and commit them with changelog ``offset``:
        one LMDB write transaction, synced (see the module)."""
        store = self.store
        store.partition.commit_stream(  # type: ignore[attr-defined]
            store.name, store.db, self.merged, offset, self.nbytes + self.nbytes // 2
        )
