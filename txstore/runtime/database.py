"""``txstore.open(path)``: a partition directory and the typed stores inside it.

A :class:`Database` is one partition (a task, in Kafka's words): one LMDB environment holding
every store of the partition as named databases, so that :meth:`Database.commit` can commit
several stores in one LMDB transaction (atomic across stores, which Kafka cannot do).

Costs: opening a store reads the partition's metadata (and, for window and session stores,
their segment registry); writes are buffered in the partition's overlay, and a commit is one
LMDB write transaction, synced unless the database was opened with ``sync=False``.

>>> import tempfile, txstore
>>> with tempfile.TemporaryDirectory() as d, txstore.open(d) as db:
...     users = db.key_value_store("users", txstore.Serdes.string(), txstore.Serdes.json())
...     clicks = db.window_store("clicks", txstore.Serdes.string(), txstore.Serdes.long(),
...                              retention_period=3_600_000, window_size=60_000)
...     users.put("u1", {"name": "Ada"})
...     clicks.put("u1", 3, 120_000)
...     db.commit({"users": 41, "clicks": 41})
...     users.committed_offset, users.get("u1"), clicks.fetch("u1", 120_000)
(41, {'name': 'Ada'}, 3)
"""

from __future__ import annotations

import datetime as _dt
import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from txstore.codecs import ValueFormat
from txstore.engine.partition import Partition
from txstore.errors import (
    DamagedFileError,
    InvalidArgumentError,
    InvalidTypeError,
    StoreClosedError,
    UncommittedWritesWarning,
    UnsupportedOperationError,
)
from txstore.runtime.committed import CommittedState, open_committed
from txstore.runtime.snapshot import Manifest, snapshot_partition
from txstore.runtime.statedir import check_data_not_lost
from txstore.runtime.transaction import Transaction
from txstore.stores.assembly import (
    AnyStore,
    ChangelogSource,
    StoreBuilder,
    StoreStack,
    assemble,
    check_name_free,
)
from txstore.stores.builders import (
    KeyValueStoreBuilder,
    KeyValueStoreSupplier,
    SessionStoreBuilder,
    WindowStoreBuilder,
    session_supplier,
    window_supplier,
)
from txstore.stores.kv import KeyValueStore
from txstore.stores.serdes import Serde, Serdes
from txstore.stores.session import SessionStore
from txstore.stores.window import WindowStore

__all__ = ["Database", "check_not_a_file", "open"]

K = TypeVar("K")
V = TypeVar("V")


def _retention_period(
    period: int | _dt.timedelta | None, old: int | _dt.timedelta | None
) -> int | _dt.timedelta:
    """``retention_period``, or its deprecated spelling ``retention`` (with a warning)."""
    if old is not None:
        if period is not None:
            raise InvalidArgumentError("give retention_period only (retention is its old name)")
        warnings.warn(
            "retention= is deprecated: use retention_period= (the name Stores and Kafka use)",
            DeprecationWarning,
            stacklevel=3,
        )
        return old
    if period is None:
        raise InvalidArgumentError("retention_period is required (milliseconds or timedelta)")
    return period


class Database:
    """One partition directory: its LMDB environment, its stores, and multi-store commits.

    Open with :func:`txstore.open` (parameters and errors there). Thread model: one thread
    writes (puts and commits); read-committed views may be read from any thread or process.
    Every method but :meth:`close` raises :class:`~txstore.errors.StoreClosedError` once the
    database is closed.

    Every store is opened through :func:`~txstore.stores.assembly.assemble`, once: asking for
    an open store again (``store(name)``) returns the same handle, and opening it a second time
    is refused. A store closed on its own (``store.close()``) is forgotten at once: the
    database keeps no reference to it, its commits and transactions leave it out, and the
    name can be opened again (``on_store_closed`` is then called with its stack). With
    ``changelogs`` (what a :class:`~txstore.runtime.task.Task` passes), every store opened
    here, whichever way, writes to its changelog, and commits go through the task, never
    :meth:`commit`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        sync: bool = True,
        overlay_budget_bytes: int = 64 * 2**20,
        map_size: int | None = None,
        max_dbs: int | None = None,
        changelogs: ChangelogSource | None = None,
        verify: str | None = None,
        checksums: bool = True,
        on_store_closed: Callable[[StoreStack], None] | None = None,
    ) -> None:
        kwargs: dict[str, Any] = {
            "readonly": readonly,
            "sync": sync,
            "overlay_budget_bytes": overlay_budget_bytes,
            "verify": verify,
            "checksums": checksums,
        }
        if map_size is not None:
            kwargs["map_size"] = map_size
        if max_dbs is not None:
            kwargs["max_dbs"] = max_dbs
        if changelogs is None:
            check_data_not_lost(os.fspath(path))
        self._committed = CommittedState()
        self.partition: Partition
        if readonly and changelogs is None:
            # Served as committed: a changelog tail a dead writer left is replayed in memory,
            # in a ReplayedPartition, which offers a Partition's surface (the rest delegated).
            served, self._committed = open_committed(path, verify=verify, max_dbs=max_dbs)
            self.partition = cast(Partition, served)
        else:
            self.partition = Partition(path, **kwargs)
        self.changelogs = changelogs
        self._stacks: dict[str, StoreStack] = {}
        self._on_store_closed = on_store_closed

    @property
    def path(self) -> str:
        """The partition directory. O(1)."""
        return str(self.partition.path)

    @property
    def input_position(self) -> int | None:
        """Read-only databases: the input position of the partition's last complete task
        commit, as its changelogs hold it (None: no task commit, or opened for writing; a
        :class:`~txstore.runtime.task.Task` has its own). O(1)."""
        return self._committed.input_position

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (the environment is released). O(1)."""
        return bool(self.partition.closed)

    def _check_open(self) -> None:
        if self.partition.closed:
            raise StoreClosedError(str(self.partition.path))

    def open_store(self, builder: StoreBuilder) -> AnyStore:
        """Open (creating on first use) the store ``builder`` describes, of any kind.

        Reopening with other serdes or configuration than the ones on disk raises
        :class:`~txstore.errors.ConfigConflictError`; with a later format (``PLAIN`` ->
        ``TIMESTAMPED`` -> ``HEADERS``) it upgrades the store lazily
        (:mod:`txstore.bytestores.upgrade`; window and session stores keep old segments in
        their format); with an earlier one it raises ``ConfigConflictError`` (downgrades are
        refused).

        Cost: a few short LMDB read transactions over the partition's metadata (the check
        that the name collides with no other store's databases is O(stores)), plus one LMDB
        write transaction when the store is created or upgraded; a window or session store
        also reads its segment registry, O(segments). Also raises
        :class:`~txstore.errors.InvalidArgumentError` for an in-memory supplier (unless this
        is a task's database: a :class:`~txstore.runtime.task.Task` keeps its in-memory stores
        in memory, change-logged and restored from their changelogs), a store already open
        here, a name that collides with another store's segment or upgrade databases, or a
        builder format older than the supplier's; :class:`~txstore.errors.ReadOnlyError` for a
        store that does not exist in a read-only database; whatever the changelog source
        raises (a running task refuses new stores with
        :class:`~txstore.errors.InvalidStateStoreError`).
        """
        self._check_open()
        supplier = builder.supplier
        name = supplier.name
        if not supplier.persistent and self.changelogs is None:
            raise InvalidArgumentError(f"store {name!r} is in-memory; build it without a database")
        existing = self._stacks.get(name)
        if existing is not None and existing.store.is_open:
            raise InvalidArgumentError(
                f"store {name!r} is already open in this database; use db.store({name!r})"
            )
        if supplier.persistent:
            check_name_free(self.partition, name)
            self._refuse_damaged(name)
            stack = assemble(builder, self.partition, self.changelogs)
        else:  # a task's in-memory store: change-logged, restored from its changelog
            assert self.changelogs is not None
            stack = assemble(builder, self.changelogs.memory_partition, self.changelogs)
        stack.unlogged_store.partition.on_detach(self._forget)
        self._stacks[name] = stack
        return stack.store

    def _forget(self, name: str, store: object) -> None:
        """Drop the stack of a store that was closed (its partition's detach hook)."""
        stack = self._stacks.get(name)
        if stack is not None and stack.unlogged_store is store:
            del self._stacks[name]
            if self._on_store_closed is not None:
                self._on_store_closed(stack)

    def _refuse_damaged(self, name: str) -> None:
        """A store in which the check at open (after an unclean shutdown) found an entry whose
        checksum failed is not served: its gets could miss a damaged key silently. A task
        rebuilds it from its changelog instead (and has dropped it before this)."""
        damaged = sorted(
            db for db in self.partition.damaged_at_open if self.partition.store_of_db(db) == name
        )
        if damaged:
            raise DamagedFileError(
                os.path.join(self.path, "data", "data.mdb"),
                f"store {name!r} holds an entry whose checksum failed (found at open, in "
                f"database {damaged[0].decode(errors='replace')!r}, after the last writer "
                "did not close cleanly): open the partition as a Task to rebuild it from its "
                "changelog, or restore it from a snapshot",
                database=damaged[0].decode(errors="replace"),
            )

    def open_key_value_store(self, builder: KeyValueStoreBuilder[K, V]) -> KeyValueStore[K, V]:
        """:meth:`open_store` for a key-value store builder (typed for it); same cost and
        errors, plus :class:`~txstore.errors.InvalidTypeError` for another builder."""
        if not isinstance(builder, KeyValueStoreBuilder):
            raise InvalidTypeError("open_key_value_store needs a KeyValueStoreBuilder")
        return cast(KeyValueStore[K, V], self.open_store(builder))

    def open_window_store(self, builder: WindowStoreBuilder[K, V]) -> WindowStore[K, V]:
        """:meth:`open_store` for a window store builder (typed for it); same cost and
        errors, plus :class:`~txstore.errors.InvalidTypeError` for another builder."""
        if not isinstance(builder, WindowStoreBuilder):
            raise InvalidTypeError("open_window_store needs a WindowStoreBuilder")
        return cast(WindowStore[K, V], self.open_store(builder))

    def open_session_store(self, builder: SessionStoreBuilder[K, V]) -> SessionStore[K, V]:
        """:meth:`open_store` for a session store builder (typed for it); same cost and
        errors, plus :class:`~txstore.errors.InvalidTypeError` for another builder."""
        if not isinstance(builder, SessionStoreBuilder):
            raise InvalidTypeError("open_session_store needs a SessionStoreBuilder")
        return cast(SessionStore[K, V], self.open_store(builder))

    def key_value_store(
        self,
        name: str,
        key_serde: Serde[K] | None = None,
        value_serde: Serde[Any] | None = None,
        *,
        format: ValueFormat = ValueFormat.PLAIN,
        transactional: bool = True,
    ) -> KeyValueStore[K, Any]:
        """Shortcut for ``Stores`` builder + ``build(db)``: a persistent key-value store.

        Serdes default to bytes; ``format`` is one of ``ValueFormat.PLAIN``, ``TIMESTAMPED``
        and ``HEADERS`` (another raises :class:`~txstore.errors.InvalidArgumentError`). Costs
        and errors as :meth:`open_key_value_store`.

        >>> import tempfile, txstore
        >>> from txstore import Serdes, ValueAndTimestamp, ValueFormat
        >>> with tempfile.TemporaryDirectory() as d, txstore.open(d) as db:
        ...     seen = db.key_value_store("seen", Serdes.string(), Serdes.long(),
        ...                               format=ValueFormat.TIMESTAMPED)
        ...     seen.put("ada", ValueAndTimestamp(1, 1_700_000_000_000))
        ...     seen.commit(1)
        ...     seen.get("ada").timestamp
        1700000000000
        """
        if not isinstance(format, ValueFormat) or format == ValueFormat.PLAIN_HEADERS:
            raise InvalidArgumentError(
                f"key-value stores are PLAIN, TIMESTAMPED or HEADERS, not {format!r}"
            )
        supplier = KeyValueStoreSupplier(name, True, format, transactional)
        builder: KeyValueStoreBuilder[K, Any] = KeyValueStoreBuilder(
            supplier,
            key_serde if key_serde is not None else Serdes.bytes(),  # type: ignore[arg-type]
            value_serde if value_serde is not None else Serdes.bytes(),
            format,
        )
        return self.open_key_value_store(builder)

    def window_store(
        self,
        name: str,
        key_serde: Serde[K] | None = None,
        value_serde: Serde[Any] | None = None,
        *,
        retention_period: int | _dt.timedelta | None = None,
        window_size: int | _dt.timedelta,
        retain_duplicates: bool = False,
        format: ValueFormat = ValueFormat.PLAIN,
        transactional: bool = True,
        retention: int | _dt.timedelta | None = None,
    ) -> WindowStore[K, Any]:
        """Shortcut for a ``Stores`` window supplier + builder + ``build(db)``.

        Serdes default to bytes; ``format`` is any of the four :class:`ValueFormat` s;
        ``retention_period`` and ``window_size`` are milliseconds (or ``timedelta``), as in
        ``Stores.persistent_window_store``. Costs and errors as :meth:`open_window_store`,
        plus the supplier's checks (see :class:`~txstore.stores.factories.Stores`): a window
        size above the retention raises :class:`~txstore.errors.InvalidArgumentError`.
        ``retention=`` is the old name of ``retention_period``: accepted, with a
        ``DeprecationWarning``.
        """
        period = _retention_period(retention_period, retention)
        supplier = window_supplier(
            name, period, window_size, retain_duplicates, True, format, transactional
        )
        builder: WindowStoreBuilder[K, Any] = WindowStoreBuilder(
            supplier,
            key_serde if key_serde is not None else Serdes.bytes(),  # type: ignore[arg-type]
            value_serde if value_serde is not None else Serdes.bytes(),
            supplier.format,
        )
        return self.open_window_store(builder)

    def session_store(
        self,
        name: str,
        key_serde: Serde[K] | None = None,
        value_serde: Serde[Any] | None = None,
        *,
        retention_period: int | _dt.timedelta | None = None,
        format: ValueFormat = ValueFormat.PLAIN,
        transactional: bool = True,
        retention: int | _dt.timedelta | None = None,
    ) -> SessionStore[K, Any]:
        """Shortcut for a ``Stores`` session supplier + builder + ``build(db)``; ``format`` is
        any of the four :class:`ValueFormat` s: ``PLAIN``, ``TIMESTAMPED``
        (:class:`~txstore.types.ValueAndTimestamp` aggregations), ``HEADERS``
        (:class:`~txstore.types.ValueTimestampHeaders`) or ``PLAIN_HEADERS``
        (:class:`~txstore.types.AggregationWithHeaders`); ``retention_period`` in milliseconds
        or a ``timedelta`` (``retention=`` is its old, deprecated name).

        Costs and errors as :meth:`open_window_store`; a value that is not a
        :class:`ValueFormat` raises :class:`~txstore.errors.InvalidArgumentError`.
        """
        period = _retention_period(retention_period, retention)
        supplier = session_supplier(name, period, True, format, transactional)
        builder: SessionStoreBuilder[K, Any] = SessionStoreBuilder(
            supplier,
            key_serde if key_serde is not None else Serdes.bytes(),  # type: ignore[arg-type]
            value_serde if value_serde is not None else Serdes.bytes(),
            supplier.format,
        )
        return self.open_session_store(builder)

    def store(self, name: str) -> Any:
        """The handle of the open store ``name`` opened through this database (the same object
        every time).

        O(1), a dict lookup. Raises :class:`~txstore.errors.InvalidArgumentError` for a name
        not opened through this database or closed since, :class:`~txstore.errors.StoreClosedError`
        once the database is closed.
        """
        self._check_open()
        try:
            return self._stacks[name].store
        except KeyError:
            raise InvalidArgumentError(
                f"no store {name!r} is open in this database; open it with a builder first"
            ) from None

    def stacks(self) -> list[StoreStack]:
        """The layers of every open store opened through this database, in the order they
        were opened (what a task commits and restores). O(stores)."""
        return list(self._stacks.values())

    def store_names(self) -> list[str]:
        """Names of every store recorded in this partition, open or not, sorted.

        One LMDB read transaction scanning the metadata database, O(stores).
        """
        self._check_open()
        names: list[str] = self.partition.store_names()
        return names

    def commit(self, offsets: Mapping[str, int]) -> None:
        """Commit several stores in one LMDB transaction, each with its changelog offset.

        Either every named store's writes and offset become durable, or none do. One LMDB
        write transaction, synced unless ``sync=False``, applying the ``u`` staged writes of
        those stores in key order: O(u log n) plus the sync. An offset that is negative or
        below a store's committed one raises :class:`~txstore.errors.OffsetError` before
        anything is written; a non-mapping or a non-``int`` offset raises
        :class:`~txstore.errors.InvalidTypeError`, a store not in this partition
        :class:`~txstore.errors.InvalidArgumentError`, a read-only database
        :class:`~txstore.errors.ReadOnlyError`.

        >>> import tempfile, txstore
        >>> with tempfile.TemporaryDirectory() as d, txstore.open(d) as db:
        ...     a, b = db.key_value_store("a"), db.key_value_store("b")
        ...     db.commit({"a": 5, "b": 5})
        ...     a.put(b"k", b"v")
        ...     try:
        ...         db.commit({"a": 6, "b": 4})          # b would go backwards
        ...     except txstore.OffsetError:
        ...         print("refused:", a.committed_offset, b.committed_offset)
        ...     db.commit({"a": 6, "b": 6})
        refused: 5 5
        """
        self._check_open()
        if self.changelogs is not None:
            raise UnsupportedOperationError(
                f"the stores of {self.path} write to changelogs: commit them with "
                "Task.commit(input_position), which commits the changelogs first"
            )
        if not isinstance(offsets, Mapping):
            raise InvalidTypeError("offsets must be a mapping of store name to offset")
        self.partition.commit_stores(dict(offsets))

    def transaction(self, offsets: Mapping[str, int] | int) -> Transaction:
        """A ``with`` block whose writes are all or nothing: on a normal end, the stores named
        in ``offsets`` commit together (:meth:`commit`); on an exception, or if that commit is
        refused, their uncommitted writes are discarded (back to their last commit) and the
        exception goes on. An ``int`` gives every store opened through this database that
        offset.

        O(1) to open; the end costs a :meth:`commit` or, on rollback, O(uncommitted writes).
        Raises, before the block runs, :class:`~txstore.errors.InvalidArgumentError` for a
        store not opened through this database, :class:`~txstore.errors.InvalidTypeError` for
        offsets that are neither a mapping nor an ``int``,
        :class:`~txstore.errors.UnsupportedOperationError` for a task's database (use
        ``task.transaction(input_position)``).

        >>> import tempfile, txstore
        >>> with tempfile.TemporaryDirectory() as d, txstore.open(d) as db:
        ...     users = db.key_value_store("users", txstore.Serdes.string(), txstore.Serdes.long())
        ...     with db.transaction({"users": 1}):
        ...         users.put("ada", 1)
        ...     try:
        ...         with db.transaction({"users": 2}):
        ...             users.put("bob", 2)
        ...             raise KeyError("the input was bad")
        ...     except KeyError:
        ...         pass
        ...     users.committed_offset, users.get("ada"), users.get("bob")
        (1, 1, None)
        """
        self._check_open()
        if self.changelogs is not None:
            raise UnsupportedOperationError(
                f"the stores of {self.path} write to changelogs: use "
                "task.transaction(input_position)"
            )
        if isinstance(offsets, int) and not isinstance(offsets, bool):
            wanted = dict.fromkeys(self._stacks, offsets)
        elif isinstance(offsets, Mapping):
            wanted = dict(offsets)
        else:
            raise InvalidTypeError("offsets must be a mapping of store name to offset, or an int")
        unknown = sorted(set(wanted) - set(self._stacks))
        if unknown:
            raise InvalidArgumentError(
                f"stores {unknown} are not open in this database; open them before the transaction"
            )
        stacks = [self._stacks[name] for name in wanted]

        def rollback() -> None:
            for stack in stacks:
                if stack.unlogged_store.is_open:
                    stack.unlogged_store.recover(0)

        return Transaction(lambda: self.commit(wanted), rollback)

    def snapshot(self, dest: str | os.PathLike[str]) -> Manifest:
        """Copy this partition's committed state into the new directory ``dest``: LMDB's
        compacting copy taken in one read transaction, plus ``manifest.json`` with the stores,
        configurations and committed offsets of exactly that copy. Writers may keep running.
        Returns the manifest (:mod:`txstore.runtime.snapshot`). O(committed data).

        Raises :class:`~txstore.errors.InvalidArgumentError` if ``dest`` exists and is not an
        empty directory.
        """
        self._check_open()
        return snapshot_partition(self.partition, dest)

    def uncommitted_stores(self) -> list[str]:
        """The open stores of this database holding writes not yet committed, sorted.
        O(open stores)."""
        return sorted(
            s.name
            for s in self._stacks.values()
            if s.store.is_open and s.unlogged_store.approximate_num_uncommitted_bytes() > 0
        )

    def close(self) -> None:
        """Close every store and the environment; idempotent. Uncommitted writes are
        discarded, as in Kafka Streams (what was not committed is processed again), with an
        :class:`~txstore.errors.UncommittedWritesWarning` naming the stores (none when a
        ``with`` block is left by an exception: that is a rollback).

        O(open stores + their open iterators + staged writes); nothing is written.
        """
        self._close(warn=True, stacklevel=3)

    def _close(self, *, warn: bool, stacklevel: int) -> None:
        pending: list[str] = []
        if warn and self.changelogs is None and not self.closed:
            pending = self.uncommitted_stores()
        for stack in list(self._stacks.values()):  # each close drops its stack (_forget)
            stack.store.close()
        self._stacks.clear()
        self.partition.close()
        if pending:  # once closed: a warning turned into an error leaks nothing
            warnings.warn(
                f"closing {self.path} discarded the uncommitted writes of stores {pending}: "
                "commit them first (db.commit(offsets) or store.commit(offset)), or leave the "
                "with block by an exception to roll back without this warning",
                UncommittedWritesWarning,
                stacklevel=stacklevel,
            )

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close(warn=exc[0] is None, stacklevel=3)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<txstore.Database {self.path!r} {state}>"


def check_not_a_file(path: str | os.PathLike[str]) -> None:
    """Raise :class:`~txstore.errors.InvalidArgumentError` if ``path`` is a file (a partition
    is a directory); it was a bare ``NotADirectoryError``."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise InvalidArgumentError(
            f"{os.fspath(path)!r} is a file: a partition is a directory (txstore.open "
            "creates it; a state directory holds one per partition)"
        )


def open(
    path: str | os.PathLike[str],
    *,
    readonly: bool = False,
    sync: bool = True,
    overlay_budget_bytes: int = 64 * 2**20,
    map_size: int | None = None,
    max_dbs: int | None = None,
    verify: str | None = None,
    checksums: bool = True,
) -> Database:
    """Open (creating if needed) the partition directory ``path``.

    ``sync=False`` skips the fsync at commit: a process crash loses nothing committed, but a
    power loss or OS crash may lose recent commits and can corrupt the environment, which must
    then be rebuilt from the changelog. ``overlay_budget_bytes`` bounds the memory of
    uncommitted writes per store before they spill to disk. ``max_dbs`` is the size of this
    process's table of named-database handles (default
    :data:`~txstore.engine.lmdb_env.DEFAULT_MAX_DBS`; see
    :class:`~txstore.engine.partition.Partition`). ``verify`` decides when every page of
    ``data/data.mdb`` is walked before the first read: ``"auto"`` (the default, or the
    environment variable ``TXSTORE_VERIFY``) when the last writer did not close it cleanly,
    ``"always"``, or ``"never"`` (see :class:`~txstore.engine.partition.Partition`).
    ``checksums=False`` creates a new partition whose entries carry no checksums (the legacy
    layout, for comparisons); an existing partition keeps what its metadata records (see
    ``docs/formats.md``, "Entry checksums").

    Cost: an ``lmdb.open`` and a check of stale reader slots; when writable also the
    single-writer lock, the removal of a spill directory a crash left behind and one LMDB
    write transaction; nothing proportional to the committed data, except the page walk
    (``verify``: one read of every page in use, see docs/engine.md for its speed). Raises
    :class:`~txstore.errors.WriterLockedError` if the partition is open for writing by another
    process (:class:`~txstore.errors.InvalidStateStoreError`, its base class, if by another
    ``Database`` of this one): open it with ``readonly=True``;
    :class:`~txstore.errors.StorageError` for a read-only open of a directory that holds no
    partition; :class:`~txstore.errors.PartitionDataLostError` (a ``StorageError``) for a
    directory whose ``data/`` is missing or empty although it held data (see
    :func:`check_data_not_lost`: open it as a :class:`~txstore.runtime.task.Task` to restore
    it from its changelogs); :class:`~txstore.errors.DamagedFileError` (a ``StorageError``)
    for a truncated or unreadable ``data/data.mdb`` or a damaged page the walk found;
    :class:`~txstore.errors.InvalidTypeError` or :class:`~txstore.errors.InvalidArgumentError`
    for a size that is not a positive ``int`` or a ``verify`` that is not one of the three,
    and ``InvalidArgumentError`` for a ``path`` that is a file.
    """
    check_not_a_file(path)
    return Database(
        path,
        readonly=readonly,
        sync=sync,
        overlay_budget_bytes=overlay_budget_bytes,
        map_size=map_size,
        max_dbs=max_dbs,
        verify=verify,
        checksums=checksums,
    )
