"""The txstore exception hierarchy.

Every error txstore raises derives from :class:`TxStoreError`. Where a builtin exception
fits, the class also derives from it, so ``except ValueError`` keeps working for callers that
do not know txstore's names.

The interactive-query family mirrors Kafka Streams' ``InvalidStateStoreException`` and its
subclasses, with the same messages.
"""

from __future__ import annotations


class TxStoreError(Exception):
    """Base class of every error raised by txstore."""


class InvalidArgumentError(TxStoreError, ValueError):
    """An argument has a value the operation cannot accept (a ``None`` key, a bad range...)."""


class InvalidTypeError(TxStoreError, TypeError):
    """An argument has the wrong Python type (``str`` where ``bytes`` is required...)."""


class SerializationError(TxStoreError, ValueError):
    """Bytes could not be decoded: truncated, malformed or oversized input.

    Kafka's ``SerializationException``. Decoders raise it instead of reading past a buffer.
    """


class ConfigConflictError(TxStoreError, ValueError):
    """A store was reopened with a configuration that contradicts what is on disk."""


class OffsetError(InvalidArgumentError):
    """A changelog offset went backwards or is not a valid offset."""


class StorageError(TxStoreError, OSError):
    """The storage layer (LMDB, files) failed in a way the caller cannot fix by retrying."""


class ReadOnlyError(TxStoreError):
    """A write was attempted through a read-only handle or view."""


class InvalidStateStoreError(TxStoreError):
    """A store cannot be used in its current state (Kafka's ``InvalidStateStoreException``)."""


class StoreClosedError(InvalidStateStoreError):
    """The store (or the database holding it) is closed."""

    def __init__(self, name: str) -> None:
        super().__init__(f"Store {name} is currently closed")
        self.store_name = name


class SnapshotInvalidatedError(InvalidStateStoreError):
    """A read-committed snapshot can no longer be read (the LMDB map was resized, or a database
    it reads was dropped, in this process): take a new snapshot and retry."""


class ChangelogCorruptionError(StorageError):
    """A checksum or structure check failed inside *committed* changelog data, or after the
    last commit in bytes no crash leaves (zeros, a foreign header, a failed checksum: see
    docs/changelog.md, "Recovery on open").

    Never raised for a torn tail a crash leaves (valid frames of the open transaction, then at
    most the start of one frame: truncated on open). ``path`` is the
    segment file, ``position`` the byte position of the bad frame in it, ``offset`` the first
    record offset it should hold (None when unknown).
    """

    def __init__(
        self, message: str, *, path: str, position: int, offset: int | None = None
    ) -> None:
        super().__init__(message)
        self.path = path
        self.position = position
        self.offset = offset


class TaskCorruptedError(StorageError):
    """A task's stores and changelogs disagree in a way recovery cannot repair without losing
    committed data: a store is ahead of its changelog, or a task commit that reached the stores
    is missing from a changelog (the changelog lost committed data). Kafka's
    ``TaskCorruptedException``: wipe the store and restore it from its changelog, or restore the
    changelog from a backup. Nothing was changed when it was raised."""


class WriterLockedError(InvalidStateStoreError):
    """Another process holds the single-writer lock (open read-only instead, or stop it).

    A subclass of :class:`InvalidStateStoreError`, which partitions raised for it before, so
    ``except InvalidStateStoreError`` still catches it."""


class DamagedFileError(StorageError):
    """A file on disk cannot be what it claims to be: an LMDB ``data.mdb`` that is shorter than
    the pages its meta pages say it holds (truncated), or whose meta pages are unreadable (bad
    magic, unknown format version, impossible page size). Found *before* the file is mapped, so
    the process gets this error instead of dying of SIGBUS. ``path`` is the file, ``reason``
    what is wrong with it. Nothing was changed; restore the partition from its changelogs (open
    it as a :class:`~txstore.runtime.task.Task` after moving the damaged ``data/`` away) or from
    a snapshot."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(
            f"damaged file {path!r}: {reason}. Nothing was changed; restore the partition from "
            "its changelogs (move its data/ directory away and open it as a Task) or from a "
            "snapshot"
        )
        self.path = path
        self.reason = reason


class PartitionDataLostError(StorageError):
    """A partition directory shows that it held data (``evidence``: its changelogs, a spill
    directory, a snapshot manifest, the writer's lock file) but its LMDB environment
    (``data/data.mdb``) is missing or empty. Opening it as a plain database would serve empty
    stores as if nothing had ever been written, so it is refused; open it as a
    :class:`~txstore.runtime.task.Task`, which restores every store from its changelog."""

    def __init__(self, path: str, missing: str, evidence: list[str], advice: str) -> None:
        super().__init__(
            f"partition {path!r} lost its data: {missing}, yet it holds {'; '.join(evidence)}, "
            f"so it held data. Refusing to serve empty stores. {advice}"
        )
        self.path = path
        self.missing = missing
        self.evidence = list(evidence)


class StorageFullError(StorageError):
    """LMDB reported its map full and it could not be grown: the disk is full, the process
    cannot map a larger file (address space, ``ulimit -v``), or the write is too large for one
    transaction. Nothing of the failed write was committed."""


class UnsupportedOperationError(TxStoreError, NotImplementedError):
    """The store does not implement this operation (Kafka's ``UnsupportedOperationException``),
    e.g. the time-only ``find_sessions`` of a persistent session store."""


# ---- interactive queries (KIP-67; txstore.queries) ------------------------------------------
# Kafka's messages are kept word for word, "KafkaStreams" included, so that logs and runbooks
# written for Kafka Streams read the same. Which subclass is raised follows KIP-216: a closed or
# missing store is "migrated" while the application runs or rebalances, "not available" once it
# shuts down.


class StreamsNotStartedError(InvalidStateStoreError):
    """The application was queried before ``start()`` (Kafka's ``StreamsNotStartedException``):
    retry after starting it."""

    def __init__(
        self,
        message: str = "KafkaStreams has not been started, you can retry after calling start()",
    ) -> None:
        super().__init__(message)


class IllegalStateError(TxStoreError, RuntimeError):
    """An operation is not allowed in the object's current state (Kafka's
    ``IllegalStateException``), e.g. starting an application twice."""


class StreamsNotRunningError(IllegalStateError):
    """The application is shutting down, stopped or failed (Kafka's ``IllegalStateException``
    from ``validateIsRunningOrRebalancing``); not retriable on this instance."""

    def __init__(self, state: str) -> None:
        super().__init__(f"KafkaStreams is not running. State is {state}.")
        self.state = state


class StreamsRebalancingError(InvalidStateStoreError):
    """The instance is restoring partitions it was just assigned (Kafka's stream thread is not
    RUNNING): retry shortly, or query with stale stores enabled."""


class UnknownStateStoreError(InvalidStateStoreError):
    """No store of that name is part of the application (Kafka's
    ``UnknownStateStoreException``)."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"Cannot get state store {name} because no such store is registered in the topology."
        )
        self.store_name = name


class InvalidStateStorePartitionError(InvalidStateStoreError):
    """The requested partition of a store is not hosted here (Kafka's
    ``InvalidStateStorePartitionException``): re-discover its host from the metadata."""

    def __init__(self, partition: int, name: str) -> None:
        super().__init__(f"The specified partition {partition} for store {name} does not exist.")
        self.partition = partition
        self.store_name = name


class StateStoreMigratedError(InvalidStateStoreError):
    """The store (or the partition holding the key) moved to another instance, or is closed
    while the application runs (Kafka's ``StateStoreMigratedException``): re-discover its
    location from the metadata and query there."""


class StateStoreNotAvailableError(InvalidStateStoreError):
    """The store is closed because the application is shutting down, stopped or failed
    (Kafka's ``StateStoreNotAvailableException``)."""


class TaskMigratedError(TxStoreError):
    """A writer used a partition this instance no longer owns (Kafka's ``TaskMigratedException``):
    stop processing it; its new owner resumes from the last commit."""


class QueryServiceError(TxStoreError):
    """The HTTP query service answered with an error the client has no better class for;
    ``status`` is the HTTP status, ``error`` the server's error name."""

    def __init__(self, message: str, *, status: int, error: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.error = error


class TruncatedResultError(TxStoreError):
    """A remote query's answer was cut at the server's per-request result limit and could not
    be resumed (the server gave no resume position, e.g. an older server, or the query was not
    on one partition): the client raises rather than return part of the answer. Narrow the
    query (a smaller key or time range), or pass ``limit`` to ask for the first items only."""


class StoreNotChangeloggedError(InvalidStateStoreError):
    """A store committed without a changelog (by :func:`txstore.open`) was opened in a
    :class:`~txstore.runtime.task.Task`, which restores its stores from their changelogs and so
    cannot take it over. Nothing was changed; its data is only in the store: keep opening it with
    ``txstore.open``, or copy its records into a new task's store."""


class TxStoreWarning(UserWarning):
    """Base class of the warnings txstore gives."""


class UncommittedWritesWarning(TxStoreWarning):
    """A database or task was closed with writes it had not committed: they were discarded
    (Kafka's semantics: what is not committed is processed again). Commit before closing, or
    leave the ``with`` block by an exception (a rollback, without this warning)."""
