"""Windowed and sessioned tables (KIP-300), and the windowed serdes they read.

A windowed aggregation in Kafka Streams writes its results to a **windowed topic**, and its store
writes a **window changelog**; both hold keys with the window inside them. KIP-300 proposed
``StreamsBuilder#windowedTable`` and ``#sessionedTable`` to read such a topic back into a window
or session store, so that another application can query or join it. Its pull request
(apache/kafka#5044) was closed without being merged: Kafka has neither method, and users read
windowed topics with ``WindowedSerdes`` by hand. txstore provides both halves:

* :class:`TimeWindowedSerde` and :class:`SessionWindowedSerde`, Kafka's ``WindowedSerdes``
  byte for byte (``docs/formats.md``), for reading and producing windowed keys in user code;
* :func:`windowed_table` and :func:`sessioned_table`, which materialize a windowed source into a
  window or session store and return the opened store.

Key layouts (``L`` is an 8-byte and ``I`` a 4-byte big-endian signed integer):

==============================  ===============================  ==========================
source                          key                              becomes the store key
==============================  ===============================  ==========================
windowed topic                  ``[key][L(start)]``              ``[key][L(start)][I(seq)]``
window changelog                ``[key][L(start)][I(seq)]``      the same bytes
session topic or changelog      ``[key][L(end)][L(start)]``      the same bytes
==============================  ===============================  ==========================

The window end is not in either window layout: it is ``start + window size``, which is why a
windowed table needs the window size. Values are plain values, as in Kafka topics and
changelogs; the record's timestamp and headers go into the store's format through the record
converters (KIP-258, KIP-1271), as a restore does.

Mapping of KIP-300's API (Java) to txstore:

* ``StreamsBuilder#windowedTable(topic, windowSize, consumed, materialized)`` ->
  ``windowed_table(source, window_size, materialized, db=db)``;
* ``StreamsBuilder#sessionedTable(topic, consumed, materialized)`` ->
  ``sessioned_table(source, materialized, db=db)``;
* the ``topic`` (a windowed topic, or a store's changelog topic) -> ``source``: a
  :class:`~txstore.changelog.log.FileChangelog`, its directory, or an iterable of records;
* ``Consumed.with(WindowedSerdes.timeWindowedSerdeFrom(..).forChangelog(b), ..)`` ->
  ``for_changelog=b`` (keys are bytes here; the serdes decode them in user code);
* ``Materialized.as(name).withKeySerde(..).withValueSerde(..).withRetention(..)`` ->
  ``Materialized(name, key_serde, value_serde, retention=..., segment_interval=...,
  format=...)``, or a ``Stores`` window or session store builder;
* the resulting ``KTable<Windowed<K>, V>``, queried through its store -> the returned
  :class:`~txstore.stores.window.WindowStore` or :class:`~txstore.stores.session.SessionStore`.

Kafka's DSL derives a windowed store's retention and segments from the ``Windows`` definition
of the aggregation; a table read back from a topic has none, so txstore asks for them
explicitly (:class:`Materialized`, or a ``Stores`` builder).

>>> import tempfile, txstore
>>> from txstore import Serdes, TimeWindow, Windowed
>>> serde = TimeWindowedSerde(Serdes.string(), 60_000)
>>> key = serde.serialize(Windowed("a", TimeWindow(0, 60_000)))
>>> key.hex()
'610000000000000000'
>>> records = [(key, Serdes.long().serialize(3), 1_000, b"")]
>>> with txstore.open(tempfile.mkdtemp()) as db:
...     table = windowed_table(records, 60_000, Materialized(
...         "clicks", key_serde=Serdes.string(), value_serde=Serdes.long(),
...         retention=3_600_000, segment_interval=1_800_000,
...         format=txstore.ValueFormat.TIMESTAMPED), db=db)
...     table.fetch("a", 0)
ValueAndTimestamp(value=3, timestamp=1000)
"""

from __future__ import annotations

import datetime as _dt
import os
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from txstore import codecs
from txstore.bytestores.sequence import sequence_numbers
from txstore.changelog.log import FileChangelog
from txstore.codecs import ValueFormat
from txstore.engine.base import MAX_KEY_SIZE
from txstore.errors import InvalidArgumentError, InvalidTypeError, SerializationError
from txstore.runtime.database import Database
from txstore.stores.builders import SessionStoreBuilder, WindowStoreBuilder
from txstore.stores.materialized import Materialized, session_builder, window_builder
from txstore.stores.session import SessionStore
from txstore.stores.window import WindowStore
from txstore.stores.windowed_serdes import (
    SessionWindowedSerde,
    TimeWindowedSerde,
    WindowedSerdes,
    windowed_serde_by_name,
)
from txstore.types import Headers, SessionWindow, check_long

__all__ = [
    "BATCH_SIZE",
    "MaterializeProgress",
    "Materialized",
    "SessionWindowedSerde",
    "TimeWindowedSerde",
    "WindowedSerdes",
    "sessioned_table",
    "windowed_serde_by_name",
    "windowed_table",
]

#: Records per batch of :func:`windowed_table` and :func:`sessioned_table`: one record-converter
#: call, one store transaction and one commit per batch (as restore).
BATCH_SIZE: Final = 10_000
_Q: Final = struct.Struct(">q")
_QQ: Final = struct.Struct(">qq")
_I: Final = struct.Struct(">i")
_SEQ_ZERO: Final = bytes(4)


@dataclass(frozen=True)
class MaterializeProgress:
    """Passed to the progress callback after each committed batch.

    ``consumed`` records were read from the source so far: ``applied`` of them were written,
    ``dropped`` fell into segments that had expired when their batch was applied (Kafka's
    dropped-records sensor), and ``skipped`` were no-ops: a null key (a KTable source skips
    those) or, with ``retain_duplicates``, a null value. ``total`` is the number of records to
    read when known (changelogs); ``offset`` the store's committed offset.
    """

    store: str
    consumed: int
    applied: int
    dropped: int
    skipped: int
    total: int | None
    offset: int


class _Loader:
    """Turns batches of source records into store rows and applies them, one commit each."""

    def __init__(
        self,
        kind: str,
        store: Any,
        changelog_keys: bool,
        retain_duplicates: bool,
        progress: Callable[[MaterializeProgress], None] | None,
    ) -> None:
        self.store = store
        self.raw = store.bytes_store
        self.format = ValueFormat(self.raw.format)
        self.kind = kind
        self.topic_keys = kind == "window" and not changelog_keys
        self.suffix = 16 if kind == "session" else 12 if changelog_keys else 8
        self.added = 4 if self.topic_keys else 0  # the sequence number a topic key lacks
        self.retain_duplicates = retain_duplicates
        self.progress = progress
        self.seq = 0
        self.consumed = self.applied = self.dropped = self.skipped = self.batches = 0
        self.total: int | None = None

    def apply(
        self,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        stamps: Sequence[int],
        headers: Sequence[bytes],
        where: Callable[[int], str],
        offset: int,
    ) -> None:
        """Apply one batch and commit the store at ``offset``."""
        n = len(keys)
        self.consumed += n
        idx: Sequence[int] = range(n)
        if not all(keys):  # null or empty keys: Kafka's deserializers return null, tables skip
            idx = [i for i in idx if keys[i]]
            self.skipped += n - len(idx)
            keys = [keys[i] for i in idx]
            values = [values[i] for i in idx]
            stamps = [stamps[i] for i in idx]
            headers = [headers[i] for i in idx]
        ks: list[bytes] = keys  # type: ignore[assignment]  # no None left
        if ks:
            self._check(ks, idx, where)
        if self.topic_keys:
            ks, values, stamps, headers = self._number(ks, values, stamps, headers)
        if self.format != ValueFormat.PLAIN and ks:
            values = codecs.records_to_values(self.format, values, stamps, headers)
        applied = self.raw.restore(zip(ks, values, strict=True)) if ks else 0
        numbers = sequence_numbers(self.raw)
        if numbers is not None and ks:  # later puts number after these (retain_duplicates)
            numbers.restored(ks[-1:])
        self.applied += applied
        self.dropped += len(ks) - applied
        self.raw.dropped_records += len(ks) - applied
        committed = self.raw.committed_offset
        offset = offset if committed is None else max(offset, committed)
        self.raw.commit(offset)
        self.batches += 1
        if self.progress is not None:
            self.progress(
                MaterializeProgress(
                    self.store.name,
                    self.consumed,
                    self.applied,
                    self.dropped,
                    self.skipped,
                    self.total,
                    offset,
                )
            )

    def _check(self, keys: list[bytes], idx: Sequence[int], where: Callable[[int], str]) -> None:
        """Key lengths and window times, each error naming its record."""
        suffix = self.suffix
        lengths = list(map(len, keys))
        if min(lengths) < suffix or max(lengths) + self.added > MAX_KEY_SIZE:
            i = next(
                j for j, n in enumerate(lengths) if n < suffix or n + self.added > MAX_KEY_SIZE
            )
            if lengths[i] < suffix:
                layout = {
                    8: "a windowed topic key [key][L(start)]",
                    12: "a window changelog key [key][L(start)][I(seq)]",
                    16: "a session key [key][L(end)][L(start)]",
                }[suffix]
                raise SerializationError(
                    f"{where(idx[i])}: its key has {lengths[i]} bytes, too short for {layout} "
                    f"({suffix} bytes after the key)"
                )
            raise InvalidArgumentError(
                f"{where(idx[i])}: its store key would be {lengths[i] + self.added} bytes, above "
                f"LMDB's maximum key size of {MAX_KEY_SIZE}"
            )
        if self.kind == "session":
            unpack2 = _QQ.unpack_from
            for j, k in enumerate(keys):
                end, start = unpack2(k, len(k) - 16)
                if start < 0 or end < start:
                    try:
                        SessionWindow(start, end)
                    except InvalidArgumentError as exc:
                        raise InvalidArgumentError(
                            f"{where(idx[j])}: invalid session [{start}, {end}]: {exc}"
                        ) from None
            return
        unpack, back = _Q.unpack_from, suffix
        starts = [unpack(k, len(k) - back)[0] for k in keys]
        if min(starts) < 0:
            j = next(j for j, s in enumerate(starts) if s < 0)
            raise InvalidArgumentError(
                f"{where(idx[j])}: window start {starts[j]} is negative "
                "(Window startMs time cannot be negative.)"
            )

    def _number(
        self,
        keys: list[bytes],
        values: Sequence[bytes | None],
        stamps: Sequence[int],
        headers: Sequence[bytes],
    ) -> tuple[list[bytes], Sequence[bytes | None], Sequence[int], Sequence[bytes]]:
        """Topic keys to store keys: sequence number 0, or with ``retain_duplicates`` Kafka's
        counter (incremented before each put, a null value a no-op)."""
        if not self.retain_duplicates:
            return [k + _SEQ_ZERO for k in keys], values, stamps, headers
        out_k: list[bytes] = []
        out_v: list[bytes | None] = []
        out_t: list[int] = []
        out_h: list[bytes] = []
        pack, seq = _I.pack, self.seq
        for k, v, t, h in zip(keys, values, stamps, headers, strict=True):
            if v is None:
                self.skipped += 1  # Kafka: "this delete is a no-op"
                continue
            seq = (seq + 1) & 0x7FFFFFFF
            out_k.append(k + pack(seq))
            out_v.append(v)
            out_t.append(t)
            out_h.append(h)
        self.seq = seq
        return out_k, out_v, out_t, out_h

    def from_changelog(self, log: FileChangelog, from_offset: int | None, batch: int) -> None:
        """Read ``log`` committed, from ``from_offset`` (default: where the store is)."""
        raw = self.raw
        end = log.committed_end_offset
        committed = raw.committed_offset
        if committed is not None and committed > end:
            raise InvalidArgumentError(
                f"store {self.store.name!r} is at offset {committed}, beyond the committed end "
                f"{end} of changelog {log.path!r}: it was materialized from another source; "
                "materialize into a fresh store"
            )
        if from_offset is None:
            start = committed if committed is not None else log.log_start_offset
        else:
            start = check_long("from_offset", from_offset)
        self.total = max(0, end - max(start, log.log_start_offset))
        offsets: list[int] = []
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        stamps: list[int] = []
        headers: list[bytes] = []

        def where(i: int) -> str:
            return f"record at offset {offsets[i]} of changelog {log.path!r}"

        def flush(n: int) -> None:
            self.apply(keys[:n], values[:n], stamps[:n], headers[:n], where, offsets[n - 1] + 1)
            for column in (offsets, keys, values, stamps, headers):
                del column[:n]

        with log.read_committed_batches(start) as batches:
            for b in batches:
                n = len(b)
                if b.offsets[0] >= end:
                    break
                if b.offsets[-1] >= end:  # a writer committed more since we started
                    n = sum(1 for o in b.offsets if o < end)
                offsets.extend(b.offsets[:n])
                keys.extend(b.keys[:n])
                values.extend(b.values[:n])
                stamps.extend(b.timestamps[:n])
                headers.extend(b.headers[:n])
                while len(keys) >= batch:
                    flush(batch)
        if keys:
            flush(len(keys))
        if raw.committed_offset is None or raw.committed_offset < end or not self.batches:
            self.apply([], [], [], [], where, end)  # a compacted tail, or nothing to read

    def from_records(self, records: Iterable[Any], batch: int) -> None:
        """Read ``(key, value, timestamp, headers)`` records; the store's committed offset
        advances by one per record read."""
        base = self.raw.committed_offset or 0
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        stamps: list[int] = []
        headers: list[bytes] = []
        first = 0  # index in the source of keys[0]

        def where(i: int) -> str:
            return f"record #{first + i} of the source"

        def flush() -> None:
            nonlocal first
            self.apply(keys, values, stamps, headers, where, base + first + len(keys))
            first += len(keys)
            for column in (keys, values, stamps, headers):
                column.clear()

        for rec in records:
            k, v, t, h = _record(rec, first + len(keys))
            keys.append(k)
            values.append(v)
            stamps.append(t)
            headers.append(h)
            if len(keys) >= batch:
                flush()
        if keys or not self.batches:
            flush()


def _bytes_or_none(value: object, what: str, n: int) -> bytes | None:
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise InvalidTypeError(
        f"record #{n} of the source: its {what} must be bytes or None, got {type(value).__name__}"
    )


def _record(rec: Any, n: int) -> tuple[bytes | None, bytes | None, int, bytes]:
    """``(key, value, timestamp, serialized headers)`` of one source record."""
    try:
        size = len(rec)
    except TypeError:
        size = -1
    if size == 4:
        k, v, t, h = rec
    elif size == 3:
        (k, v, t), h = rec, b""
    else:
        raise InvalidTypeError(
            f"record #{n} of the source: a record is (key, value, timestamp, headers) or "
            f"(key, value, timestamp), got {rec!r:.80}"
        )
    if type(t) is not int:
        try:
            t = check_long("timestamp", t)
        except (InvalidTypeError, InvalidArgumentError) as exc:
            raise type(exc)(f"record #{n} of the source: {exc}") from None
    if h is None:
        h = b""
    elif type(h) is not bytes:
        if isinstance(h, (bytearray, memoryview)):
            h = bytes(h)
        elif isinstance(h, (Headers, list, tuple)):
            h = codecs.encode_headers(h)
        else:
            raise InvalidTypeError(
                f"record #{n} of the source: its headers must be serialized headers bytes, "
                f"Headers or (key, value) pairs, got {type(h).__name__}"
            )
    return _bytes_or_none(k, "key", n), _bytes_or_none(v, "value", n), t, h


def _open_source(source: object) -> tuple[FileChangelog | None, bool]:
    """``(changelog, owned)``; ``None`` for an iterable of records."""
    if isinstance(source, FileChangelog):
        return source, False
    if isinstance(source, (str, os.PathLike)):
        return FileChangelog(source, readonly=True), True
    if isinstance(source, (bytes, bytearray, memoryview)) or not isinstance(source, Iterable):
        raise InvalidTypeError(
            "source must be a FileChangelog, a changelog directory or an iterable of (key, "
            f"value, timestamp, headers) records, got {type(source).__name__}"
        )
    return None, False


def _positive_batch(batch_size: object) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidArgumentError(f"batch_size must be an int >= 1, got {batch_size!r}")
    return batch_size


def _materialize(
    kind: str,
    source: Any,
    builder: Any,
    db: Database | None,
    for_changelog: bool | None,
    from_offset: int | None,
    batch_size: int,
    progress: Callable[[MaterializeProgress], None] | None,
) -> Any:
    batch = _positive_batch(batch_size)
    if for_changelog is not None and not isinstance(for_changelog, bool):
        raise InvalidTypeError("for_changelog must be a bool or None")
    log, owned = _open_source(source)
    try:
        if log is None and from_offset is not None:
            raise InvalidArgumentError("from_offset applies to changelog sources only")
        changelog_keys = (log is not None) if for_changelog is None else for_changelog
        retain = kind == "window" and builder.supplier.retain_duplicates
        store = builder.build(db)
        try:
            loader = _Loader(kind, store, changelog_keys, retain, progress)
            if log is not None:
                loader.from_changelog(log, from_offset, batch)
            else:
                loader.from_records(source, batch)
            if loader.topic_keys and retain:
                store.seqnum = loader.seq  # later puts continue the numbering
        except BaseException:
            store.close()  # the last batch is discarded; committed batches stay
            raise
        return store
    finally:
        if owned and log is not None:
            log.close()


def windowed_table(
    source: FileChangelog | str | os.PathLike[str] | Iterable[Any],
    window_size: int | _dt.timedelta | None,
    materialized: Materialized | WindowStoreBuilder[Any, Any],
    *,
    db: Database | None = None,
    for_changelog: bool | None = None,
    from_offset: int | None = None,
    batch_size: int = BATCH_SIZE,
    progress: Callable[[MaterializeProgress], None] | None = None,
) -> WindowStore[Any, Any]:
    """Materialize a windowed topic or a window changelog into a window store; return it open.

    KIP-300's ``StreamsBuilder#windowedTable(topic, windowSize, consumed, materialized)``.

    * ``source``: a :class:`~txstore.changelog.log.FileChangelog` (read committed), its directory
      (opened read-only), or an iterable of records ``(key, value, timestamp, headers)``
      (``headers`` serialized headers bytes, a :class:`~txstore.types.Headers`, or omitted),
      such as a Kafka topic's records.
    * ``for_changelog``: keys are ``[key][L(start)][I(seq)]`` (a window changelog, kept
      verbatim as in a restore) rather than ``[key][L(start)]`` (a windowed topic, stored with
      sequence number 0, or numbered 1, 2... with ``retain_duplicates``). Default: True for a
      changelog source, False for an iterable.
    * ``window_size`` and ``materialized``: see :class:`Materialized`; a ``Stores`` window store
      builder works too. The window size may come from either, and must agree.
    * ``db``: the :class:`~txstore.runtime.database.Database` to open a persistent store in.
    * ``from_offset`` (changelogs): where to start; default where the store's committed offset
      is, so a second call picks up what the changelog committed since.

    Values are plain; each record's timestamp and headers go into the store's format through
    the record converters. A ``None`` value deletes the window. Records with a null key are
    skipped; records whose segment has expired are dropped as Kafka drops them (the observed
    stream time advances to each batch's largest window start first, as in a restore). Work
    goes in batches of ``batch_size`` records, each one store transaction committed with the
    changelog offset after it (for an iterable, the count of records read), then reported to
    ``progress``. On an error the store is closed; batches committed before stay.
    """
    builder = window_builder(materialized, window_size)
    store: WindowStore[Any, Any] = _materialize(
        "window", source, builder, db, for_changelog, from_offset, batch_size, progress
    )
    return store


def sessioned_table(
    source: FileChangelog | str | os.PathLike[str] | Iterable[Any],
    materialized: Materialized | SessionStoreBuilder[Any, Any],
    *,
    db: Database | None = None,
    from_offset: int | None = None,
    batch_size: int = BATCH_SIZE,
    progress: Callable[[MaterializeProgress], None] | None = None,
) -> SessionStore[Any, Any]:
    """Materialize a session-windowed topic or a session changelog into a session store;
    return it open.

    KIP-300's ``StreamsBuilder#sessionedTable(topic, consumed, materialized)``. Session keys
    ``[key][L(end)][L(start)]`` are the same in topics and changelogs and are stored verbatim;
    everything else is as :func:`windowed_table` (no window size: a session's start and end
    are both in its key).

    >>> import tempfile, txstore
    >>> from txstore import Serdes, Windowed
    >>> serde = SessionWindowedSerde(Serdes.string())
    >>> key = serde.serialize(Windowed("u1", SessionWindow(0, 9_000)))
    >>> with txstore.open(tempfile.mkdtemp()) as db:
    ...     sessions = sessioned_table([(key, b"3", 9_000, b"")], Materialized(
    ...         "sessions", Serdes.string(), retention=600_000, segment_interval=300_000,
    ...         format=ValueFormat.PLAIN), db=db)
    ...     sessions.fetch_session("u1", 0, 9_000)
    b'3'
    """
    builder = session_builder(materialized)
    store: SessionStore[Any, Any] = _materialize(
        "session", source, builder, db, None, from_offset, batch_size, progress
    )
    return store
