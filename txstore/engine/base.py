"""The interface every partition offers its stores, and the checks they share.

A partition is where a task's stores keep their committed data: ``Partition`` (one LMDB
environment per directory, :mod:`txstore.engine.partition`) or ``MemoryPartition`` (sorted dicts,
for in-memory stores, :mod:`txstore.engine.memory`). Stores talk to either through
:class:`PartitionBase`; the overlay of uncommitted writes is shared machinery
(:mod:`txstore.engine.overlay`), and so is the commit path (:meth:`PartitionBase.commit_stores`).
"""

from __future__ import annotations

import json
import re
import threading
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Self, TypeVar

from txstore.engine.checksums import damaged_entry
from txstore.engine.iterators import ChunkSource, KeyRange, Row
from txstore.engine.overlay import Overlay
from txstore.errors import (
    ConfigConflictError,
    DamagedFileError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidStateStoreError,
    InvalidTypeError,
    OffsetError,
    ReadOnlyError,
)

__all__ = [
    "MAX_KEY_SIZE",
    "MAX_STORE_NAME_LENGTH",
    "META_DB",
    "RESERVED_STORE_PREFIX",
    "STORE_NAME_CHARS",
    "AtomicReads",
    "PartitionBase",
    "Snapshot",
    "check_offset",
    "check_store_name",
]

META_DB: Final = b"__txstore_meta__"
MAX_KEY_SIZE: Final = 511
"""LMDB's maximum key size (``env.max_key_size()``); both flavours enforce it."""
MAX_STORE_NAME_LENGTH: Final = 249
"""The longest store name: Kafka's longest topic name (``Topic.MAX_NAME_LENGTH``)."""
STORE_NAME_CHARS: Final = "a-z, A-Z, 0-9, '.', '_', '-'"
"""The characters of a store name: Kafka's legal topic characters (``Topic.LEGAL_CHARS``)."""
RESERVED_STORE_PREFIX: Final = "__txstore"
_STORE_NAME: Final = re.compile(r"[a-zA-Z0-9._-]{1,249}")
READER_CHECK_EVERY: Final = 64

#: Bumped in a forked child; a partition opened under an older generation is unusable there.
fork_generation = [0]

T = TypeVar("T")


class AtomicReads:
    """Reads of committed data that all see one committed state (one LMDB read transaction),
    handed to the function given to :meth:`PartitionBase.read_atomic`; usable only during that
    call, and only on the databases named there (a database that does not exist reads as
    empty)."""

    def get(self, db: bytes, key: bytes) -> bytes | None:
        """The value of ``key`` in ``db``. O(log n)."""
        raise NotImplementedError

    def read_range(
        self, db: bytes, lo: bytes, hi: bytes, reverse: bool, limit: int
    ) -> tuple[list[Row], bool]:
        """As :meth:`PartitionBase.read_range`."""
        raise NotImplementedError

    def read_chunk(
        self, db: bytes, rng: KeyRange, reverse: bool, n: int
    ) -> tuple[list[Row], bytes | None]:
        """One chunk of ``db``, as :meth:`ChunkSource.read_chunk`."""
        raise NotImplementedError

    def state_id(self) -> int | None:
        """The id of the committed state these reads see (LMDB's transaction id: in one
        partition, reads with the same id see the same data), or None when the engine has
        none. O(1)."""
        return None

    def cursor(self, db: bytes) -> Any:
        """A raw cursor of ``db`` in this transaction, for the C readers (py-lmdb's), or None
        (no such database, or an engine without one). O(1)."""
        return None


def check_store_name(name: object) -> str:
    """Validate a store name; the one place that defines what a store name may be.

    The rules are Kafka's for topic names (a store's changelog is a topic, and its directory
    ``changelog/<store>/`` a path component): 1 to :data:`MAX_STORE_NAME_LENGTH` (249)
    characters from ``[a-zA-Z0-9._-]`` (:data:`STORE_NAME_CHARS`), not ``.`` or ``..``; and
    txstore's own: not starting with :data:`RESERVED_STORE_PREFIX` (``__txstore``, its
    internal databases). So no name can leave the directory it names (``../escape``), hide
    (``a/b``, NUL) or differ from another only by Unicode normalisation. Raises
    ``InvalidTypeError`` for a non-``str``, ``InvalidArgumentError`` naming the rule broken
    otherwise. O(len(name)), one regular-expression match."""
    if not isinstance(name, str):
        raise InvalidTypeError(f"store name must be a str, got {type(name).__name__}")
    if _STORE_NAME.fullmatch(name) is None:
        if not name:
            raise InvalidArgumentError("store name must not be empty")
        if len(name) > MAX_STORE_NAME_LENGTH:
            raise InvalidArgumentError(
                f"store name {name[:40]!r}... is {len(name)} characters long, longer than "
                f"{MAX_STORE_NAME_LENGTH} (Kafka's limit for topic names)"
            )
        bad = sorted({c for c in name if _STORE_NAME.fullmatch(c) is None})
        raise InvalidArgumentError(
            f"store name {name!r} contains {', '.join(map(repr, bad))}: a store name may only "
            f"contain {STORE_NAME_CHARS} (Kafka's legal topic characters)"
        )
    if name in (".", ".."):
        raise InvalidArgumentError(f"store name {name!r} is not allowed ('.' and '..' are not)")
    if name.startswith(RESERVED_STORE_PREFIX):
        raise InvalidArgumentError(
            f"store name {name!r} uses the reserved prefix {RESERVED_STORE_PREFIX!r}"
        )
    return name


def check_offset(offset: object) -> int:
    """Validate a changelog offset: an ``int`` (not ``bool``) >= 0."""
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise InvalidTypeError(f"changelog offset must be an int, got {type(offset).__name__}")
    if offset < 0:
        raise OffsetError(f"changelog offset must be >= 0, got {offset}")
    if offset >= 2**63:
        raise OffsetError(f"changelog offset {offset} does not fit a signed 64-bit long")
    return offset


def _normalize_meta(meta: object) -> dict[str, Any]:
    if not isinstance(meta, Mapping):
        raise InvalidTypeError(f"store metadata must be a dict, got {type(meta).__name__}")
    try:
        normalized = json.loads(json.dumps(dict(meta), sort_keys=True))
    except (TypeError, ValueError) as exc:
        raise InvalidTypeError(f"store metadata must be JSON-serializable: {exc}") from exc
    assert isinstance(normalized, dict)
    return normalized


def _meta_diff(disk: object, asked: object, path: str = "") -> list[str]:
    if isinstance(disk, dict) and isinstance(asked, dict):
        out: list[str] = []
        for k in sorted(set(disk) | set(asked)):
            p = f"{path}.{k}" if path else str(k)
            if k not in disk:
                out.append(f"{p}: absent on disk, requested {asked[k]!r}")
            elif k not in asked:
                out.append(f"{p}: {disk[k]!r} on disk, absent from the request")
            else:
                out.extend(_meta_diff(disk[k], asked[k], p))
        return out
    return [] if disk == asked else [f"{path or 'meta'}: {disk!r} on disk, requested {asked!r}"]


class PartitionBase:
    """What stores need from a partition; see :class:`Partition` and :class:`MemoryPartition`."""

    persistent: bool = False
    readonly: bool = False
    path: str | None = None
    overlay: Overlay | None = None
    write_generation: int | None = None
    """Counts the write transactions this object committed, if it is the only writer of its
    data (a writable :class:`~txstore.engine.partition.Partition`); None otherwise. Readers may
    cache
    what they read while it is unchanged."""
    checksums: bool = False
    """Whether every value this partition stores in LMDB carries its checksum trailer
    (:mod:`txstore.engine.checksums`); read from the partition's metadata when it opens."""
    writer_cursors: Mapping[bytes, Any] = {}
    """Cursors of the writer's read transaction, by database (a writable
    :class:`~txstore.engine.partition.Partition`; empty otherwise), for the writer thread's short
    forward reads that position one (``set_range``) and read it to their end at once, with no
    other read or write of the partition in between: the fast path of a single-key window
    fetch. The mapping is replaced, never changed in place, when that transaction ends. A
    database without a cursor here: use :meth:`read_range`, which opens one."""

    def __init__(self) -> None:
        self._closed = False
        self._generation = fork_generation[0]
        self._stores: dict[str, Any] = {}
        self._before_commit: dict[str, Callable[[], None]] = {}
        self._on_detach: list[Callable[[str, Any], None]] = []
        self._snapshots: weakref.WeakSet[Snapshot] = weakref.WeakSet()
        self._snapshots_lock = threading.RLock()
        self._commits = 0

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    @property
    def inherited(self) -> bool:
        """True in a process forked after this partition was opened: the partition is unusable
        there, and must never touch the environment it inherited."""
        return self._generation != fork_generation[0]

    def check_usable(self) -> None:
        """Raise ``InvalidStateStoreError`` if the partition is closed, or was opened before a
        fork of this process. O(1)."""
        if self._closed:
            raise InvalidStateStoreError(f"partition {self.path or '<memory>'} is closed")
        if self._generation != fork_generation[0]:
            raise InvalidStateStoreError(
                f"partition {self.path} was opened before a fork: open it again in this process"
            )

    def _check_writable(self) -> None:
        self.check_usable()
        if self.readonly:
            raise ReadOnlyError(f"partition {self.path} is open read-only")

    def attach(self, name: str, store: Any) -> None:
        """Register an open store object (closed by :meth:`close`); one per name."""
        self.check_usable()
        if name in self._stores:
            raise InvalidStateStoreError(
                f"store {name!r} is already open on this partition: close it first or reuse it"
            )
        self._stores[name] = store

    def detach(self, name: str, store: Any) -> None:
        """Forget a store object registered with :meth:`attach` (and its commit hook)."""
        if self._stores.get(name) is store:
            del self._stores[name]
            self._before_commit.pop(name, None)
            for hook in list(self._on_detach):
                hook(name, store)

    def on_detach(self, hook: Callable[[str, Any], None]) -> None:
        """Call ``hook(name, store)`` whenever a store object is detached (closed), so that
        whoever keeps open stores (a :class:`~txstore.runtime.Database`) forgets it. A hook
        registered again is kept once. O(hooks)."""
        if hook not in self._on_detach:
            self._on_detach.append(hook)

    def on_before_commit(self, name: str, hook: Callable[[], None]) -> None:
        """Call ``hook`` at every commit of store ``name``, before its overlay is applied, so
        that the store can stage rows of its own into the same LMDB transaction (a window
        store's last sequence number, :mod:`txstore.bytestores.sequence`). O(1)."""
        self._before_commit[name] = hook

    def close(self) -> None:
        """Close the stores, snapshots and overlay of this partition. Idempotent."""
        if self._closed:
            return
        for store in list(self._stores.values()):
            store.close()
        with self._snapshots_lock:
            snapshots = list(self._snapshots)
        for snap in snapshots:
            snap.close()
        if self.overlay is not None and self._generation == fork_generation[0]:
            self.overlay.close()
        self._closed = True
        self._release()

    def _release(self) -> None:
        pass

    def _track_snapshot(self, snap: Snapshot) -> None:
        with self._snapshots_lock:
            self._snapshots.add(snap)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- stores and offsets -------------------------------------------------------------------

    @staticmethod
    def db_name(store: str, suffix: str | None = None) -> bytes:
        """The named database of ``store`` (``<store>.<suffix>`` for extra databases)."""
        return (store if suffix is None else f"{store}.{suffix}").encode()

    def register_store(self, name: str, meta: Mapping[str, Any]) -> dict[str, Any]:
        """Record ``meta`` for ``name`` at first open; later opens must match. O(1) + a commit.

        Raises ``ConfigConflictError`` naming each differing field with both values.
        """
        check_store_name(name)
        asked = _normalize_meta(meta)
        self.check_usable()
        disk = self.store_meta(name)
        if disk is None:
            if self.readonly:
                raise ReadOnlyError(
                    f"store {name!r} does not exist in read-only partition {self.path}"
                )
            self._write_meta(name, asked)
            return asked
        diffs = _meta_diff(disk, asked)
        if diffs:
            raise ConfigConflictError(
                f"store {name!r} in partition {self.path or '<memory>'} was created with a "
                f"different configuration: {'; '.join(diffs)}. Open it with the configuration "
                "on disk, or use another store name"
            )
        return disk

    def update_store_meta(self, name: str, meta: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the recorded metadata of the existing store ``name`` (format upgrades).

        One write transaction. Raises ``InvalidArgumentError`` if ``name`` is not registered.
        """
        check_store_name(name)
        asked = _normalize_meta(meta)
        self._check_writable()
        if self.store_meta(name) is None:
            raise InvalidArgumentError(f"store {name!r} is not registered in this partition")
        self._write_meta(name, asked)
        return asked

    def store_meta(self, name: str) -> dict[str, Any] | None:
        """The recorded metadata of ``name``, or None. O(log n)."""
        raise NotImplementedError

    def store_names(self) -> list[str]:
        """Names of the registered stores, sorted. O(stores)."""
        raise NotImplementedError

    def committed_offset(self, store: str) -> int | None:
        """The committed changelog offset of ``store`` (None: never committed). O(log n)."""
        raise NotImplementedError

    def committed_offsets(self, stores: Sequence[str]) -> dict[str, int | None]:
        """The committed changelog offsets of ``stores`` (None: never committed), read
        together (one read transaction for an LMDB partition). O(stores x log n)."""
        return self._committed_offsets(list(stores))

    def _write_meta(self, name: str, meta: dict[str, Any]) -> None:
        raise NotImplementedError

    def _committed_offsets(self, stores: list[str]) -> dict[str, int | None]:
        return {s: self.committed_offset(s) for s in stores}

    def _check_commit(self, offsets: Mapping[str, int]) -> dict[str, int]:
        self._check_writable()
        if not isinstance(offsets, Mapping):
            raise InvalidTypeError(f"offsets must be a mapping, got {type(offsets).__name__}")
        checked: dict[str, int] = {}
        for name, offset in offsets.items():
            check_store_name(name)
            checked[name] = check_offset(offset)
        current = self._committed_offsets(list(checked))
        for name, offset in checked.items():
            if self.store_meta(name) is None:
                raise InvalidArgumentError(f"store {name!r} is not registered in this partition")
            old = current[name]
            if old is not None and offset < old:
                raise OffsetError(
                    f"changelog offset of store {name!r} would go backwards: {offset} < "
                    f"committed {old}; nothing was written"
                )
        return checked

    def commit_stores(self, offsets: Mapping[str, int]) -> None:
        """Atomically commit the overlays of the given stores with their changelog offsets.

        One write transaction for all of them (synced unless ``sync=False``); the overlays are
        cleared only after it committed. An invalid or backwards offset raises before anything
        is written. Cost: O(staged rows x log N) plus one sync.
        """
        checked = self._check_commit(offsets)
        for name in checked:
            hook = self._before_commit.get(name)
            if hook is not None:
                hook()
        self._apply(checked)
        if self.overlay is not None:
            for name in checked:
                self.overlay.clear_store(name)
        for name in checked:  # stores that keep committed in-memory state (segmented stores)
            on_commit = getattr(self._stores.get(name), "on_commit", None)
            if on_commit is not None:
                on_commit()
        self._commits += 1
        if self._commits % READER_CHECK_EVERY == 0:
            self.reader_check()

    def commit_rows(self, store: str, writes: Mapping[bytes, list[Row]], offset: int) -> None:
        """Write ``writes`` (for databases of ``store``: rows sorted by key, one per key; a
        ``None`` value deletes) with ``store``'s changelog offset in one transaction, past the
        overlay: the restore path, which has the rows at hand and nothing staged.

        ``store`` must have nothing staged in the overlay (else
        :class:`~txstore.errors.IllegalStateError`); the offset is checked as by
        :meth:`commit_stores`; both before anything is written. Cost: O(rows x log N) plus one
        sync, without the overlay's copy and sort of every row.
        """
        self._commit_direct(store, offset, lambda checked: self._apply_rows(writes, checked))

    def commit_columns(
        self,
        store: str,
        db: bytes,
        keys: list[bytes],
        stored: list[bytes],
        deletes: list[bytes],
        offset: int,
    ) -> None:
        """:meth:`commit_rows` for rows as columns, as restore's C pass makes them
        (``restore_rows`` of :mod:`txstore.engine.checksums`): ``keys`` sorted and unique,
        ``stored[i]`` the value of ``keys[i]`` as stored (with its checksum trailer when
        :attr:`checksums` is set), and ``deletes`` the keys to delete (none in ``keys``).
        Checks and cost as :meth:`commit_rows`, without a row tuple per key on LMDB."""
        self._commit_direct(
            store, offset, lambda checked: self._apply_columns(db, keys, stored, deletes, checked)
        )

    def _commit_direct(
        self, store: str, offset: int, apply: Callable[[dict[str, int]], None]
    ) -> None:
        """The checks and bookkeeping of :meth:`commit_rows` around ``apply(offsets)``."""
        checked = self._check_commit({store: offset})
        ov = self.overlay
        if ov is not None and not all(d.is_empty() and not d.dropped for d in ov.dbs(store)):
            raise IllegalStateError(
                f"store {store!r} has staged writes: commit or discard them before commit_rows"
            )
        apply(checked)
        on_commit = getattr(self._stores.get(store), "on_commit", None)
        if on_commit is not None:
            on_commit()
        self._commits += 1
        if self._commits % READER_CHECK_EVERY == 0:
            self.reader_check()

    def _apply_columns(
        self,
        db: bytes,
        keys: list[bytes],
        stored: list[bytes],
        deletes: list[bytes],
        offsets: dict[str, int],
    ) -> None:
        """:meth:`commit_columns` for an engine without a direct path (and without checksums):
        the rows and the deletes through the overlay."""
        rows: list[Row] = list(zip(keys, stored, strict=True))
        rows += [(k, None) for k in deletes]
        self._apply_rows({db: rows}, offsets)

    def _apply_rows(self, writes: Mapping[bytes, list[Row]], offsets: dict[str, int]) -> None:
        """:meth:`commit_rows` for an engine without a direct path: through the overlay."""
        if self.overlay is None:
            raise IllegalStateError("commit_rows needs a transactional partition")
        for db, rows in writes.items():
            self.overlay.db(next(iter(offsets)), db).put_many(rows)
        self._apply(offsets)
        for name in offsets:
            self.overlay.clear_store(name)

    def discard(self, store: str) -> None:
        """Drop everything ``store`` has staged, in memory and spilled. O(staged)."""
        self.check_usable()
        if self.overlay is not None:
            self.overlay.clear_store(store)

    def damaged(self, db: bytes, exc: BaseException) -> DamagedFileError:
        """The error of an entry of ``db`` whose checksum does not match (``exc``: the
        :class:`~txstore.engine.checksums.ChecksumError`); a writable partition also records
        the database (see :func:`~txstore.engine.checksums.record_damage`)."""
        return damaged_entry(self.path, db, exc)

    def verify_rows(self, db: bytes, rows: list[Row]) -> list[Row]:
        """``rows`` read from ``db``, checksums checked and stripped (nothing to do here)."""
        return rows

    def reader_check(self) -> int:
        """Clear stale reader slots left by dead processes; returns how many. O(readers)."""
        return 0

    def _apply(self, offsets: dict[str, int]) -> None:
        raise NotImplementedError

    # -- committed tier -----------------------------------------------------------------------

    def get(self, db: bytes, key: bytes, *, shared: bool = False) -> bytes | None:
        """The committed value of ``key`` in database ``db``. O(log n), one read txn."""
        raise NotImplementedError

    def source(self, db: bytes, *, shared: bool = False) -> ChunkSource:
        """A :class:`ChunkSource` over the committed rows of ``db`` (one read txn a chunk)."""
        raise NotImplementedError

    def count(self, db: bytes, *, shared: bool = False) -> int:
        """Number of committed entries of ``db``. O(1)."""
        raise NotImplementedError

    def read_range(
        self,
        db: bytes,
        lo: bytes,
        hi: bytes,
        reverse: bool = False,
        limit: int = 64,
        shared: bool = False,
    ) -> tuple[list[Row], bool]:
        """The committed rows with ``lo <= key <= hi``, ascending, at most ``limit`` of them
        (the smallest if forward, the largest if ``reverse``), and whether more rows follow.

        For short point ranges (one key's windows): it stops at ``hi`` instead of reading a
        whole chunk. One read transaction, O(log n + rows).
        """
        raise NotImplementedError

    def snapshot(self) -> Snapshot:
        """A consistent read-only view of committed data (one read txn until closed)."""
        raise NotImplementedError

    def read_atomic(self, dbs: Sequence[bytes], fn: Callable[[AtomicReads], T]) -> T:
        """``fn(reads)``, where every read of the databases ``dbs`` through ``reads`` sees the
        same committed state: one short shared read transaction (any thread, never blocks the
        writer). For reads that must agree with each other, such as a segment's format in the
        registry and the segment's rows. Cost: one read transaction plus the reads."""
        raise NotImplementedError

    def write_through(self, db: bytes, rows: list[Row]) -> None:
        """Non-transactional stores: apply rows (None value: delete) in one write txn."""
        raise NotImplementedError

    def write_through_dbs(
        self, writes: Mapping[bytes, list[Row]], drops: Sequence[bytes] = ()
    ) -> None:
        """Non-transactional stores: drop the databases ``drops`` (missing ones are skipped),
        then apply ``writes`` (database -> rows, None value: delete), in one write txn."""
        raise NotImplementedError

    def record_offset(self, store: str, offset: int) -> None:
        """Non-transactional stores: record ``offset`` and flush to disk."""
        self.commit_stores({store: offset})


class Snapshot:
    """A consistent, read-only view of a partition's committed data and offsets.

    Every read sees the same committed state (data and offsets from one transaction). Keep it
    short: an LMDB snapshot pins pages (the file grows while it is open). Close it, or use it as
    a context manager; a leaked open snapshot emits ``ResourceWarning``. A map resize in this
    process invalidates it (:class:`SnapshotInvalidatedError`; take a new one).
    """

    _closed = True

    def __init__(self, partition: PartitionBase) -> None:
        self.partition = partition

    def get(self, db: bytes, key: bytes) -> bytes | None:
        """The value of ``key`` in ``db`` in this snapshot. O(log n)."""
        raise NotImplementedError

    def source(self, db: bytes) -> ChunkSource:
        """A :class:`ChunkSource` over ``db`` in this snapshot."""
        raise NotImplementedError

    def count(self, db: bytes) -> int:
        """Number of entries of ``db`` in this snapshot. O(1)."""
        raise NotImplementedError

    def committed_offset(self, store: str) -> int | None:
        """The committed offset of ``store`` in this snapshot. O(log n)."""
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        return self._closed

    def _check(self) -> None:
        if self._closed:
            raise InvalidStateStoreError("snapshot is closed")
        self.partition.check_usable()

    def close(self) -> None:
        """Release the snapshot. Idempotent."""
        self._closed = True

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not self._closed:
            warnings.warn(
                "unclosed txstore snapshot: close it or use it in a 'with' block",
                ResourceWarning,
                stacklevel=2,
                source=self,
            )
            self.close()
