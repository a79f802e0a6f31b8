"""The changelog interface (:class:`Changelog`), its value types, and argument checks.

Kept apart from :mod:`txstore.changelog.log` so that another implementation (a Kafka topic written
by a transactional producer) can depend on this module alone.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Final, NamedTuple, Protocol, TypeVar, runtime_checkable

from txstore.changelog.format import LONG_MAX, LONG_MIN
from txstore.changelog.reader import ChangelogRecord, RecordBatch
from txstore.codecs import encode_headers
from txstore.errors import InvalidArgumentError, InvalidTypeError
from txstore.types import Headers

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_MIN_CLEANABLE_DIRTY_RATIO",
    "DEFAULT_RETENTION_MS",
    "DEFAULT_SEGMENT_BYTES",
    "DEFAULT_TOMBSTONE_RETENTION_MS",
    "MAX_FIELD_BYTES",
    "MAX_METADATA_BYTES",
    "Changelog",
    "ChangelogRecord",
    "CleanupPolicy",
    "CloseableIterator",
    "CommitInfo",
    "HeadersArg",
    "RecordBatch",
    "check_position",
    "check_record",
    "check_record_size",
    "positive_int",
    "to_policy",
]

T_co = TypeVar("T_co", covariant=True)


class CloseableIterator(Protocol[T_co]):
    """An iterator holding resources: close it, or use it in a ``with`` block or until
    exhaustion."""

    def __iter__(self) -> CloseableIterator[T_co]: ...

    def __next__(self) -> T_co: ...

    def close(self) -> None: ...


#: Record headers as ``append`` takes them: serialized Kafka headers bytes (stored as given),
#: or :class:`~txstore.types.Headers` / a list of ``(str, bytes | None)`` pairs (serialized once).
HeadersArg = bytes | Headers | Sequence[tuple[str, bytes | None]]

MiB: Final = 1 << 20
DEFAULT_SEGMENT_BYTES: Final = 64 * MiB
DEFAULT_BATCH_BYTES: Final = 1 * MiB
DEFAULT_RETENTION_MS: Final = 7 * 24 * 3600 * 1000  # Kafka's retention.ms
DEFAULT_TOMBSTONE_RETENTION_MS: Final = 24 * 3600 * 1000  # Kafka's delete.retention.ms
DEFAULT_MIN_CLEANABLE_DIRTY_RATIO: Final = 0.5  # Kafka's min.cleanable.dirty.ratio
#: Largest key, value or headers of one record (a value length is a signed 32-bit int).
MAX_FIELD_BYTES: Final = 2**31 - 1
#: Largest commit metadata blob.
MAX_METADATA_BYTES: Final = 1 * MiB
RECORD_OVERHEAD: Final = 20  # ts + three lengths: the bytes a record adds besides its fields


class CleanupPolicy(enum.StrEnum):
    """Kafka's ``cleanup.policy`` of a changelog topic.

    ``COMPACT`` for key-value stores, ``COMPACT_DELETE`` (Kafka Streams' choice) or ``DELETE``
    for window and session stores.
    """

    COMPACT = "compact"
    DELETE = "delete"
    COMPACT_DELETE = "compact,delete"

    @property
    def compacts(self) -> bool:
        return self is not CleanupPolicy.DELETE

    @property
    def deletes(self) -> bool:
        return self is not CleanupPolicy.COMPACT


class CommitInfo(NamedTuple):
    """What :meth:`Changelog.commit` committed: offsets ``[start_offset, end_offset)``."""

    start_offset: int
    end_offset: int
    input_position: int

    @property
    def offsets(self) -> range:
        return range(self.start_offset, self.end_offset)


@runtime_checkable
class Changelog(Protocol):
    """A transactional changelog, as the task layer and the stores use it.

    Offsets increase strictly and are never changed; a reader must accept gaps (compaction
    leaves them, and a Kafka topic's transaction markers take offsets). A record's ``value``
    is the plain value (``None``: a tombstone); timestamp and serialized headers are record
    fields, as in Kafka's changelog topics.
    """

    def append(
        self, key: bytes, value: bytes | None, timestamp: int, headers: HeadersArg = b""
    ) -> int:
        """Add a record to the open transaction; return its offset."""
        ...

    def append_many(
        self,
        records: Iterable[
            tuple[bytes, bytes | None, int] | tuple[bytes, bytes | None, int, HeadersArg]
        ],
    ) -> range:
        """Add records to the open transaction; return their offsets."""
        ...

    def commit(self, input_position: int, metadata: bytes = b"") -> CommitInfo:
        """Durably commit the open transaction together with ``input_position``."""
        ...

    def abort(self) -> None:
        """Discard the open transaction."""
        ...

    def read_committed(self, from_offset: int = 0) -> CloseableIterator[ChangelogRecord]:
        """Committed records with offsets >= ``from_offset``, in offset order."""
        ...

    def read_committed_batches(self, from_offset: int = 0) -> CloseableIterator[RecordBatch]:
        """The same, as columnar batches (restore's input)."""
        ...

    @property
    def end_offset(self) -> int:
        """The offset the next appended record gets."""
        ...

    @property
    def committed_end_offset(self) -> int:
        """The offset after the last committed record (Kafka's last stable offset)."""
        ...

    @property
    def last_committed_offset(self) -> int | None:
        """The offset of the last committed record (None: nothing committed yet)."""
        ...

    @property
    def last_committed_input_position(self) -> int | None:
        """The input position of the last commit (None: no commit yet)."""
        ...

    @property
    def log_start_offset(self) -> int:
        """The smallest offset the log may still hold (cleanup raises it)."""
        ...

    def close(self) -> None:
        """Close; an open transaction is aborted."""
        ...


def to_policy(value: object) -> CleanupPolicy:
    if isinstance(value, CleanupPolicy):
        return value
    if isinstance(value, str):
        norm = ",".join(sorted(p.strip() for p in value.split(",")))
        for p in CleanupPolicy:
            if p.value == norm:
                return p
    raise InvalidArgumentError(
        f"cleanup_policy must be one of {[p.value for p in CleanupPolicy]}, got {value!r}"
    )


def positive_int(name: str, value: object, *, zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0 or (value == 0 and not zero) or value > LONG_MAX:
        raise InvalidArgumentError(f"{name} must be {'>= 0' if zero else '> 0'}, got {value}")
    return value


def check_position(position: object) -> int:
    if isinstance(position, bool) or not isinstance(position, int):
        raise InvalidTypeError(f"input_position must be an int, got {type(position).__name__}")
    if not LONG_MIN <= position <= LONG_MAX:
        raise InvalidArgumentError(f"input_position {position} does not fit a signed 64-bit long")
    return int(position)


def check_record(
    key: object, value: object, timestamp: object, headers: object
) -> tuple[bytes, bytes | None, int, bytes]:
    """The slow path of a record check: convert what can be, raise typed errors otherwise."""
    if key is None:
        raise InvalidArgumentError(
            "a changelog record needs a key (compaction keeps the latest record per key); got None"
        )
    if not isinstance(key, bytes):
        raise InvalidTypeError(f"key must be bytes, got {type(key).__name__}")
    if value is not None and not isinstance(value, bytes):
        raise InvalidTypeError(f"value must be bytes or None, got {type(value).__name__}")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise InvalidTypeError(f"timestamp must be an int, got {type(timestamp).__name__}")
    if not -1 <= timestamp <= LONG_MAX:
        raise InvalidArgumentError(
            f"timestamp {timestamp} is invalid: a record timestamp is >= 0, or -1 "
            "(NO_TIMESTAMP); Kafka rejects other negative timestamps"
        )
    if headers is None:
        hb = b""
    elif isinstance(headers, (bytes, bytearray, memoryview)):
        hb = bytes(headers)
    elif isinstance(headers, (Headers, list, tuple)):
        hb = encode_headers(headers)
    else:
        raise InvalidTypeError(
            f"headers must be serialized headers bytes or Headers, got {type(headers).__name__}"
        )
    return bytes(key), None if value is None else bytes(value), int(timestamp), hb


def check_record_size(key: bytes, value: bytes | None, headers: bytes) -> None:
    for name, field in (("key", key), ("value", value), ("headers", headers)):
        if field is not None and len(field) > MAX_FIELD_BYTES:
            raise InvalidArgumentError(
                f"record {name} is {len(field)} bytes, above the limit of {MAX_FIELD_BYTES}"
            )
    total = len(key) + len(headers) + (len(value) if value is not None else 0)
    if total > MAX_FIELD_BYTES:
        raise InvalidArgumentError(
            f"record is {total} bytes, above the limit of {MAX_FIELD_BYTES} bytes per record"
        )
