"""The change-logging layer: every write to a store is also appended to its changelog.

Kafka Streams' ``ChangeLogging*BytesStore`` sits between the typed store and the bytes store;
so does :class:`ChangeLoggingKeyValueBytesStore`. It forwards every call to the bytes store and,
for writes, appends a changelog record in Kafka's changelog representation:

* the record **value** is the plain value, without the timestamp or headers prefix of the
  store's format (``None`` for a delete);
* the record **timestamp** is the stored timestamp for timestamped formats, otherwise (and for
  deletes) the timestamp of the record being processed (:class:`RecordContext`);
* the record **headers** are the stored headers for header formats, otherwise (and for deletes)
  the headers of the record being processed.

Restoring goes the other way through the record converters
(:func:`txstore.codecs.records_to_values`).

The changelog record is made and checked *before* the store is written: a record the changelog
would refuse (a record timestamp below -1, headers of the wrong type) raises a typed error and
writes nothing, where writing the store first left a write in it that its changelog never got
(and the next commit made the store differ from a restore of its changelog).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from txstore import codecs
from txstore.bytestores.kv import BytesKeyValueStore
from txstore.changelog.api import MAX_FIELD_BYTES, Changelog, check_record, check_record_size
from txstore.changelog.format import LONG_MAX
from txstore.codecs import ValueFormat
from txstore.engine.base import MAX_KEY_SIZE
from txstore.errors import UnsupportedOperationError

_I = struct.Struct(">i")
_QI = struct.Struct(">qi")

__all__ = [
    "ChangeLoggingKeyValueBytesStore",
    "ChangeLoggingSegmentedBytesStore",
    "RecordContext",
]


@dataclass
class RecordContext:
    """The timestamp and serialized headers of the input record being processed (Kafka's
    ``ProcessorContext`` record metadata). Kafka Streams sets it for you; in txstore **you**
    set it, ``task.context.timestamp = record_ms`` (and ``headers``), before processing each
    record: the changelog records of its writes carry them. Unset, the timestamp is -1."""

    timestamp: int = -1
    """The record's timestamp, epoch milliseconds (-1: none)."""
    headers: bytes = b""
    """The record's headers in Kafka's serialized layout
    (``txstore.codecs.encode_headers([("name", b"value")])``)."""


class _ChangeLogging:
    """Forwards everything to the wrapped bytes store; subclasses log the writes."""

    def __init__(
        self, inner: Any, changelog: Changelog, fmt: ValueFormat, context: RecordContext
    ) -> None:
        self.inner = inner
        self.changelog = changelog
        self.format = ValueFormat(fmt)
        self.context = context
        # A task's changelog refuses writes before the task is initialized, before the store
        # is written (``TaskChangelog.check_append``); asked until it first accepts (a task
        # never goes back to created), so a running task's writes pay one ``is None``.
        self._gate: Callable[[], None] | None = getattr(changelog, "check_append", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def commit(self, changelog_offset: int) -> None:
        """Refused: a change-logged store commits with its task, changelog first
        (``Task.commit``); committing the store alone would record an offset its changelog
        does not hold. Raises :class:`~txstore.errors.UnsupportedOperationError`."""
        raise UnsupportedOperationError(
            f"store {self.inner.name!r} writes to a changelog: commit it with "
            "Task.commit(input_position), which commits the changelog first"
        )

    def recover(self, offset: int) -> bool:
        """Refused: discarding a change-logged store's writes must discard its open changelog
        transaction too (``Task.abort``). Raises
        :class:`~txstore.errors.UnsupportedOperationError`."""
        raise UnsupportedOperationError(
            f"store {self.inner.name!r} writes to a changelog: discard its uncommitted writes "
            "with Task.abort(), which also drops the changelog's open transaction"
        )

    def _record(self, key: bytes, raw: bytes | None) -> tuple[bytes, bytes | None, int, bytes]:
        """The changelog record of writing ``raw`` under ``key``, checked as the changelog
        checks it (a typed error for a record it would refuse)."""
        if self._gate is not None:
            self._gate()
            self._gate = None
        ctx = self.context
        rec: tuple[bytes, bytes | None, int, bytes]
        if raw is None:
            rec = key, None, ctx.timestamp, ctx.headers
        elif self.format == ValueFormat.PLAIN:
            rec = key, raw, ctx.timestamp, ctx.headers
        else:
            fmt = self.format
            value, ts, headers = codecs.split_value(fmt, raw)
            rec = (
                key,
                value,
                ctx.timestamp if ts is None else ts,
                headers if fmt.has_headers else ctx.headers,
            )
        ts = rec[2]
        if type(ts) is not int or not -1 <= ts <= LONG_MAX or type(rec[3]) is not bytes:
            rec = check_record(*rec)
        k, v, _, h = rec
        try:
            size = len(k) + len(h) + (0 if v is None else len(v))
        except TypeError:  # a key or value of the wrong type: the store's put types it
            return rec
        if size > MAX_FIELD_BYTES:  # refused here, before the store stages the write
            check_record_size(k, v, h)
        return rec


class ChangeLoggingKeyValueBytesStore(_ChangeLogging):
    """A bytes key-value store whose writes are appended to ``changelog`` as well.

    Reads and everything else go straight to the wrapped store. The changelog append follows
    the store write, in the same thread; both are part of the task's open transaction, so a
    crash before the task commits discards both.

    :meth:`put` of a plain value (or a delete) with bytes arguments, on a transactional
    :class:`~txstore.bytestores.kv.BytesKeyValueStore`, stages it in the store's overlay and
    appends its record itself, as the calls it replaces would (``_record``, the bytes store's
    ``put``): two Python frames fewer; 100k task puts, measured side by side on a loaded
    machine, went from ~1,880 to ~1,410 ns each (0.75x).
    """

    def __init__(
        self, inner: Any, changelog: Changelog, fmt: ValueFormat, context: RecordContext
    ) -> None:
        super().__init__(inner, changelog, fmt, context)
        # the fast path's ends, bound once: the put of the store's overlay (set at the store's
        # construction only; None unless transactional on a writable partition) and the
        # changelog's append
        ov = inner.db_overlay if type(inner) is BytesKeyValueStore else None
        self._stage: Callable[[bytes, bytes | None], None] | None = None if ov is None else ov.put
        self._plain = self.format == ValueFormat.PLAIN
        self._append = changelog.append

    def put(self, key: bytes, value: bytes | None) -> None:
        """Write to the store, then log the write."""
        stage = self._stage
        ctx = self.context
        ts, headers = ctx.timestamp, ctx.headers
        if (
            stage is not None
            and self._gate is None
            and type(key) is bytes
            and 0 < len(key) <= MAX_KEY_SIZE
            and ((type(value) is bytes and self._plain) or value is None)
            and type(ts) is int
            and -1 <= ts <= LONG_MAX
            and type(headers) is bytes
            and len(key) + len(headers) + (0 if value is None else len(value)) <= MAX_FIELD_BYTES
            and self.inner.is_open
        ):
            # the record _record makes of these arguments, and the bytes store's fast path
            stage(key, value)
            self._append(key, value, ts, headers)
            return
        record = self._record(key, value)
        self.inner.put(key, value)
        self.changelog.append(*record)

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Write every pair to the store, then log them in one append."""
        pairs = list(entries)
        records = [self._record(k, v) for k, v in pairs]
        self.inner.put_all(pairs)
        self.changelog.append_many(records)

    def put_if_absent(self, key: bytes, value: bytes | None) -> bytes | None:
        """Put only if absent; a write that happened is logged."""
        record = self._record(key, value)
        old: bytes | None = self.inner.put_if_absent(key, value)
        if old is None:
            self.changelog.append(*record)
        return old

    def delete(self, key: bytes) -> bytes | None:
        """Delete from the store and log a tombstone."""
        record = self._record(key, None)
        old: bytes | None = self.inner.delete(key)
        self.changelog.append(*record)
        return old


class ChangeLoggingSegmentedBytesStore(_ChangeLogging):
    """A window or session bytes store (:class:`~txstore.bytestores.segments.SegmentedBytesStore`)
    whose
    writes are appended to ``changelog`` as well.

    The changelog key is the store key: ``[key][start][seq]`` for windows and
    ``[key][end][start]`` for sessions, as Kafka's ``ChangeLoggingWindowBytesStore`` and
    ``ChangeLoggingSessionBytesStore`` write them; restore puts it back verbatim. A record
    dropped because its segment expired is still logged, as in Kafka (restore drops it again).

    With ``retain_duplicates`` (window stores), this layer numbers the changelog keys with
    **its own** sequence counter, as ``ChangeLoggingWindowBytesStore`` does: incremented
    (``& 0x7FFFFFFF``) before every put, including ``put(key, None, ts)``, which the store
    skips (no write, no store seqnum) but this layer logs as a null record under
    ``[key][ts][seq]`` (kafka-formats.md section 4.4). The two counters therefore part after
    the first null put (store 1, 2 where the changelog has 1, 2 (null), 3); restoring the
    changelog gives the changelog's numbering, as in Kafka, and a null record deletes a key
    the store never held: nothing.
    """

    def __init__(
        self,
        inner: Any,
        changelog: Changelog,
        fmt: ValueFormat,
        context: RecordContext,
        retain_duplicates: bool = False,
    ) -> None:
        super().__init__(inner, changelog, fmt, context)
        self.retain_duplicates = retain_duplicates
        self.seqnum = 0

    def _log_key(self, key: bytes) -> bytes:
        """The changelog key of the window store key ``key``: its sequence number replaced by
        this layer's counter, advanced first (retain_duplicates), else ``key`` itself."""
        if not self.retain_duplicates:
            return key
        self.seqnum = seq = (self.seqnum + 1) & 0x7FFFFFFF
        return key[:-4] + _I.pack(seq)

    def put_at(self, key: bytes, ts: int, value: bytes | None) -> bool:
        """Write to the store, then log the write."""
        _, v, t, h = self._record(key, value)
        applied: bool = self.inner.put_at(key, ts, value)
        self.changelog.append(self._log_key(key), v, t, h)
        return applied

    def put(self, key: bytes, value: bytes | None) -> bool:
        """Write to the store, then log the write."""
        _, v, t, h = self._record(key, value)
        applied: bool = self.inner.put(key, value)
        self.changelog.append(self._log_key(key), v, t, h)
        return applied

    def put_skipped_null(self, key: bytes, ts: int) -> None:
        """``put(key, None, ts)`` on a window store with retain_duplicates: a no-op in the
        store, logged here as a null record under ``[key][ts][next seq]`` (as Kafka)."""
        _, v, t, h = self._record(key, None)
        self.inner.put_skipped_null(key, ts)
        self.changelog.append(self._log_key(key + _QI.pack(ts, 0)), v, t, h)

    def remove(self, key: bytes) -> None:
        """Remove from the store and log a tombstone."""
        record = self._record(key, None)
        self.inner.remove(key)
        self.changelog.append(*record)
