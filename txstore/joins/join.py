"""Windowed stream-stream joins inside a :class:`~txstore.Task`: inner, left, outer and self.

The model is Kafka Streams' ``KStreamKStreamJoin`` (and ``KStreamKStreamSelfJoin``), with the
buffers the WindowStoreWithHeaders proposal designs for it. A :class:`StreamJoin` opens its
stores in a task (before :meth:`~txstore.Task.initialize`), all change-logged and committed
with the task:

=====================  ===========================================================================
store                  what it holds
=====================  ===========================================================================
``<name>-left``        the left records: a plain window store with headers
``<name>-right``       (``PLAIN_HEADERS``, ``[headersSize][headers][value]``), retaining
                       duplicates, window start = record time (``<name>-buffer`` for a self-join)
``<name>-outer``       left and outer joins: the records that have not joined yet, by
                       ``[time][side][key]`` (KIP-633's shared outer-join store)
``<name>-state``       stream time and the dropped-record counters
``<name>-out``         the outputs of :meth:`StreamJoin.process_batch`, by input position
=====================  ===========================================================================

**Semantics** (docs/joins.md has a worked example). Stream time is the largest timestamp of
the records processed so far, both sides together. A record with a null key or value is
dropped (counted in :attr:`StreamJoin.dropped_null`, as Kafka's "Skipping record due to null
key or value"). A left record at ``t`` has its window open until stream time passes ``t +
after + grace`` (a right record: ``t + before + grace``); a record that arrives with its window
already closed is late, dropped and counted (:attr:`StreamJoin.dropped_late`). Otherwise:

1. stream time advances; on left and outer joins every waiting record whose window closed is
   emitted as unmatched (``joiner(key, left, None)`` or ``joiner(key, None, right)``, at its own
   timestamp), oldest first: exactly when stream time passes its window's end plus grace, never
   early and never later (no wall-clock throttle);
2. the record joins every buffered record of the other side with the same key, in its time
   range and whose own window is still open (output timestamp: the larger of the two), in
   window-store order (time, then arrival);
3. a record that joined nothing waits in ``<name>-outer`` (left records of left joins, both
   sides of outer joins); it is put into its side's buffer.

The joiner gets the key and both sides as :class:`~txstore.types.ValueAndHeaders` (value and
headers), ``None`` for a missing side.

**Exactly once.** State, outputs and the input position commit in one task commit:
:meth:`StreamJoin.process_batch` writes its outputs to ``<name>-out`` under the batch's input
position and returns them; a batch at or below the task's committed input position is a replay,
and gets the outputs recorded for it, without processing anything again.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Any, Generic, Literal, NamedTuple, TypeVar

from txstore import Serde, Serdes, Task
from txstore.codecs import ValueFormat
from txstore.engine.base import MAX_KEY_SIZE
from txstore.errors import InvalidArgumentError, InvalidTypeError
from txstore.joins.stores import join_store_builders
from txstore.joins.windows import JoinWindows
from txstore.stores.formats import value_codec
from txstore.types import EMPTY_HEADERS, Headers, ValueAndHeaders

__all__ = [
    "JoinKind",
    "JoinRecord",
    "JoinedRecord",
    "Joiner",
    "StreamJoin",
    "decode_output",
    "default_joiner",
    "encode_output",
    "left",
    "output_key",
    "parse_output_key",
    "right",
]

K = TypeVar("K")
R = TypeVar("R")

JoinKind = Literal["inner", "left", "outer", "self"]
#: ``joiner(key, left, right)``: the output value of a join result (``None`` for a side that
#: has no record: unmatched records of left and outer joins).
Joiner = Callable[[Any, ValueAndHeaders[Any] | None, ValueAndHeaders[Any] | None], Any]

_OUTER_KEY = struct.Struct(">qB")  # [time][side] then the serialized key
_OUT_KEY = struct.Struct(">qI")  # [input position][n]
_OUT_HEAD = struct.Struct(">qBI")  # output record: [timestamp][has value][key length]
_LEN = struct.Struct(">I")
_Q = struct.Struct(">q")
_QI = struct.Struct(">qi")
_MAX_BUFFER_KEY = MAX_KEY_SIZE - 12
_LEFT, _RIGHT = 0, 1


class JoinRecord(NamedTuple):
    """An input record: ``side`` is ``"left"`` or ``"right"`` (ignored by a self-join)."""

    side: str
    key: Any
    value: Any
    timestamp: int
    headers: Any = None


class JoinedRecord(NamedTuple):
    """An output record: the key, the joiner's value, and the timestamp (the larger of the
    two joined records', or an unmatched record's own)."""

    key: Any
    value: Any
    timestamp: int


def left(key: Any, value: Any, timestamp: int, headers: Any = None) -> JoinRecord:
    """A left input record."""
    return JoinRecord("left", key, value, timestamp, headers)


def right(key: Any, value: Any, timestamp: int, headers: Any = None) -> JoinRecord:
    """A right input record."""
    return JoinRecord("right", key, value, timestamp, headers)


def default_joiner(
    key: Any, left: ValueAndHeaders[Any] | None, right: ValueAndHeaders[Any] | None
) -> list[Any]:
    """``[left value, right value]``, ``None`` for a missing side."""
    return [None if left is None else left.value, None if right is None else right.value]


class StreamJoin(Generic[K, R]):
    """A windowed join of two keyed streams (or a stream with itself) in ``task``.

    ``StreamJoin(task, name, windows, kind="inner", *, key_serde, left_serde, right_serde,
    output_serde, joiner, persistent=True, buffer_format=PLAIN_HEADERS)`` opens the join's
    stores in ``task`` (call before ``task.initialize()``; the module docstring lists them).
    ``kind`` is ``"inner"``, ``"left"``, ``"outer"`` or ``"self"`` (a stream joined with itself,
    inner, one buffer). ``buffer_format`` is the format of persistent buffers' bytes: the
    default ``PLAIN_HEADERS``, or ``HEADERS`` (what Kafka's join used before the proposal: the
    buffers then go through an adapter). Buffers that already hold ``HEADERS`` or ``PLAIN``
    data upgrade lazily when opened with the default. ``open_stores=False``: the stores are
    already open in the task, opened by the caller from
    :func:`~txstore.joins.stores.join_store_builders` (a pipeline that opens its stores
    itself, such as the Spark stateful step).

    >>> import tempfile
    >>> from txstore import Task
    >>> with Task(tempfile.mkdtemp()) as task:
    ...     join = StreamJoin(task, "j", JoinWindows.of_time_difference_and_grace(10, 0), "left")
    ...     report = task.initialize()
    ...     out = join.process_batch([left("a", 1, 100), right("a", 2, 105), left("b", 3, 106),
    ...                               left("c", 4, 200)], input_position=1)
    ...     task.commit(1)
    >>> [tuple(r) for r in out]
    [('a', [1, 2], 105), ('b', [3, None], 106)]
    """

    def __init__(
        self,
        task: Task,
        name: str,
        windows: JoinWindows,
        kind: JoinKind = "inner",
        *,
        key_serde: Serde[K] | None = None,
        left_serde: Serde[Any] | None = None,
        right_serde: Serde[Any] | None = None,
        output_serde: Serde[R] | None = None,
        joiner: Joiner | None = None,
        persistent: bool = True,
        buffer_format: ValueFormat = ValueFormat.PLAIN_HEADERS,
        open_stores: bool = True,
    ) -> None:
        if kind not in ("inner", "left", "outer", "self"):
            raise InvalidArgumentError(f"kind must be inner, left, outer or self, got {kind!r}")
        if not isinstance(windows, JoinWindows):
            raise InvalidTypeError(f"windows must be a JoinWindows, got {windows!r}")
        self.task = task
        self.name = name
        self.windows = windows
        self.kind = kind
        self.key_serde: Serde[Any] = key_serde or Serdes.string()
        self.left_serde: Serde[Any] = left_serde or Serdes.json()
        self.right_serde: Serde[Any] = (
            self.left_serde if kind == "self" else right_serde or Serdes.json()
        )
        self.output_serde: Serde[Any] = output_serde or Serdes.json()
        self.joiner: Joiner = joiner or default_joiner
        self._before, self._after, self._grace = (
            windows.before_ms,
            windows.after_ms,
            windows.grace_ms,
        )
        builders = join_store_builders(
            name,
            windows,
            kind,
            key_serde=self.key_serde,
            left_serde=self.left_serde,
            right_serde=self.right_serde,
            persistent=persistent,
            buffer_format=buffer_format,
        )
        if open_stores:
            for builder in builders.values():
                builder.build(task.db)
        stores = {n: task.store(n) for n in builders}
        suffixes = ("-buffer", "-buffer") if kind == "self" else ("-left", "-right")
        self.buffers = [stores[name + s] for s in suffixes]
        #: which sides wait in the outer store when they join nothing
        self._tracked = (kind in ("left", "outer"), kind == "outer")
        self.outer = stores.get(f"{name}-outer")
        self.state = stores[f"{name}-state"]
        self.outputs = stores[f"{name}-out"]
        self._serdes = (self.left_serde, self.right_serde)
        self._codecs = (
            value_codec(ValueFormat.PLAIN_HEADERS, self.left_serde),
            value_codec(ValueFormat.PLAIN_HEADERS, self.right_serde),
        )
        # the buffers' single-key row reader (the fast path of _fetch), when their bytes are
        # PLAIN_HEADERS and need no adapter
        self._rows_of = [
            getattr(b.bytes_store, "fetch_window_rows", None)
            if b.adapter is None and b.stored_format == ValueFormat.PLAIN_HEADERS
            else None
            for b in self.buffers
        ]
        self._loaded = False
        self.stream_time = -1
        """The largest timestamp processed (both sides); -1 before any record."""
        self.dropped_null = 0
        """Records dropped for a null key or value."""
        self.dropped_late = 0
        """Records dropped because their window had closed (past the grace period)."""
        self._saved: tuple[int, int, int] = (-1, 0, 0)
        self._min_waiting: int | None = None  # no waiting record is older than this
        self._position: int | None = None
        self._out_n = 0

    # ---- state -------------------------------------------------------------------------------

    def reload(self) -> None:
        """Forget the stream time, counters and outputs numbering kept in memory; the next
        call reads them from the stores. Call it after ``task.abort()`` (which rolls the stores
        back, not this object). O(1)."""
        self._loaded = False
        self._position = None

    def _load(self) -> None:
        st = self.state
        saved = [st.get(label) for label in ("stream_time", "dropped_null", "dropped_late")]
        self.stream_time, self.dropped_null, self.dropped_late = (
            default if value is None else value
            for value, default in zip(saved, (-1, 0, 0), strict=True)
        )
        self._saved = (self.stream_time, self.dropped_null, self.dropped_late)
        self._min_waiting = None
        if self.outer is not None:
            with self.outer.all() as it:
                for kv in it:
                    self._min_waiting = _OUTER_KEY.unpack_from(kv.key)[0]
                    break
        self._loaded = True

    def _save(self) -> None:
        now = (self.stream_time, self.dropped_null, self.dropped_late)
        for label, old, new in zip(
            ("stream_time", "dropped_null", "dropped_late"), self._saved, now, strict=True
        ):
            if old != new:
                self.state.put(label, new)
        self._saved = now

    # ---- processing --------------------------------------------------------------------------

    def process(self, records: Iterable[JoinRecord]) -> list[JoinedRecord]:
        """Process ``records`` in order and return the join results, in order. Their effects
        (buffers, waiting records, stream time, counters) commit with the task's next commit;
        the outputs are only returned (:meth:`process_batch` also records them).

        Every record is checked first: a timestamp that is not an ``int >= 0`` raises
        :class:`~txstore.errors.InvalidArgumentError` (``InvalidTypeError`` for another type)
        and a side other than ``"left"``/``"right"`` too, before anything is processed. Cost
        per record: one window fetch of the other side and one put into its own buffer (plus,
        on left and outer joins, a get and put of the waiting store for a record that joined
        nothing, and a delete for each time a record joined)."""
        batch = _checked(records, self.kind == "self")
        if not self._loaded:
            self._load()
        out: list[JoinedRecord] = []
        if self.kind == "self":
            for _side, key, value, ts, headers in batch:
                self._process_self(key, value, ts, headers, out)
        else:
            for side, key, value, ts, headers in batch:
                self._process(side, key, value, ts, headers, out)
        self._save()
        return out

    def process_batch(
        self, records: Iterable[JoinRecord], input_position: int
    ) -> list[JoinedRecord]:
        """:meth:`process`, and record the outputs in ``<name>-out`` under ``input_position``
        (the position the caller then commits the task with). A batch at or below the task's
        committed input position is a replay of a committed batch: nothing is processed, and
        the outputs recorded for it are returned (:meth:`outputs_at`), so a retried batch
        (a crash after the commit, a Spark task retry) emits exactly what its first run did.
        ``input_position`` is an ``int >= 0`` (else ``InvalidTypeError`` /
        ``InvalidArgumentError``)."""
        if isinstance(input_position, bool) or not isinstance(input_position, int):
            raise InvalidTypeError(f"input_position must be an int, got {input_position!r}")
        if input_position < 0:
            raise InvalidArgumentError(f"input_position must be >= 0, got {input_position}")
        committed = self.task.input_position
        if committed is not None and input_position <= committed:
            return self.outputs_at(input_position)
        out = self.process(records)
        if self._position != input_position:
            self._position, self._out_n = input_position, 0
        for rec in out:
            self.outputs.put(output_key(input_position, self._out_n), self._encode_output(rec))
            self._out_n += 1
        return out

    def outputs_at(self, input_position: int) -> list[JoinedRecord]:
        """The outputs recorded for the batch at ``input_position`` (committed or not), in
        order. O(log n + outputs)."""
        lo, hi = _OUT_KEY.pack(input_position, 0), _OUT_KEY.pack(input_position, 0xFFFFFFFF)
        with self.outputs.range(lo, hi) as it:
            return [self._decode_output(kv.value) for kv in it]

    def all_outputs(self) -> list[tuple[int, JoinedRecord]]:
        """Every recorded output with its input position, in order. O(n)."""
        with self.outputs.all() as it:
            return [(_OUT_KEY.unpack(kv.key)[0], self._decode_output(kv.value)) for kv in it]

    def purge_outputs(self, below: int) -> int:
        """Delete the recorded outputs of input positions below ``below`` (once they were
        delivered); returns how many. Committed with the task. O(log n + deleted)."""
        with self.outputs.range(None, _OUT_KEY.pack(below, 0)) as it:
            keys = [kv.key for kv in it if kv.key < _OUT_KEY.pack(below, 0)]
        for k in keys:
            self.outputs.delete(k)
        return len(keys)

    def _encode_output(self, rec: JoinedRecord) -> bytes:
        return encode_output(rec, self.key_serde, self.output_serde)

    def _decode_output(self, raw: bytes) -> JoinedRecord:
        return decode_output(raw, self.key_serde, self.output_serde)

    def _process(
        self, side: int, key: Any, value: Any, ts: int, headers: Headers, out: list[JoinedRecord]
    ) -> None:
        if key is None or value is None:
            self.dropped_null += 1
            return
        is_left = side == _LEFT
        before, after, grace = self._before, self._after, self._grace
        if ts + (after if is_left else before) + grace < self.stream_time:
            self.dropped_late += 1
            return
        if ts > self.stream_time:
            self.stream_time = ts
            if self.outer is not None:
                self._emit_closed(out)
        other = 1 - side
        # the other side's records in the time range whose window is still open (t +
        # lookahead + grace >= now), clamped at 0 as Kafka's
        if is_left:
            lo, hi = ts - before, ts + after
            lo2 = self.stream_time - before - grace
        else:
            lo, hi = ts - after, ts + before
            lo2 = self.stream_time - after - grace
        lo = max(lo, lo2, 0)
        hi = max(hi, 0)
        vh = ValueAndHeaders(value, headers)
        matched = False
        if lo <= hi:
            joiner = self.joiner
            track_other = self._tracked[other]
            last_deleted = -1
            kb = None
            for t_other, v_other in self._fetch(other, key, lo, hi):
                matched = True
                result = joiner(key, vh, v_other) if is_left else joiner(key, v_other, vh)
                out.append(JoinedRecord(key, result, ts if ts > t_other else t_other))
                if track_other and t_other != last_deleted:
                    last_deleted = t_other
                    kb = kb or self.key_serde.serialize(key) or b""
                    self.outer.delete(_OUTER_KEY.pack(t_other, other) + kb)  # type: ignore[union-attr]
        if not matched and self._tracked[side]:
            self._wait(side, key, vh, ts)
        self.task.context.timestamp = ts
        self._put(side, key, vh, ts)

    def _put(self, side: int, key: Any, vh: ValueAndHeaders[Any], ts: int) -> None:
        """Buffer a record. With ``PLAIN_HEADERS`` bytes and no adapter, the bytes are made
        here and written to the buffer's change-logged bytes store under the buffer's next
        sequence number, as ``WindowStore.put`` does for a retain-duplicates store, without
        its per-call checks (the key and timestamp were checked, the value is not None)."""
        buffer = self.buffers[side]
        if self._rows_of[side] is None or vh.headers:
            buffer.put(key, vh, ts)
            return
        raw = self._serdes[side].serialize(vh.value)
        kb = self.key_serde.serialize(key)
        if raw is None or kb is None or len(kb) > _MAX_BUFFER_KEY:
            buffer.put(key, vh, ts)  # the typed store's errors and rules
            return
        buffer.seqnum = seq = (buffer.seqnum + 1) & 0x7FFFFFFF
        buffer.bytes_store.put_at(kb + _QI.pack(ts, seq), ts, b"\x00" + raw)

    def _fetch(self, side: int, key: Any, lo: int, hi: int) -> list[tuple[int, Any]]:
        """``(time, ValueAndHeaders)`` of the records of ``key`` in buffer ``side`` with
        ``lo <= time <= hi``, in window-store order. Reads the rows in one go from the buffer's
        bytes store when it holds ``PLAIN_HEADERS`` bytes (no adapter), else through the typed
        store's fetch."""
        rows_of = self._rows_of[side]
        if rows_of is not None:
            kb = self.key_serde.serialize(key)
            if kb is not None:
                read = rows_of(kb, lo, hi, False)
                if read is not None:
                    n = len(kb)
                    size, unpack = n + 12, _Q.unpack_from
                    decode, deserialize = self._codecs[side].decode, self._serdes[side].deserialize
                    return [
                        # a first byte 0: no headers (headers size 0), the value follows
                        (
                            unpack(k, n)[0],
                            ValueAndHeaders(deserialize(v[1:])) if v[0] == 0 else decode(v),
                        )
                        for k, v in read[0]
                        if len(k) == size
                    ]
        with self.buffers[side].fetch(key, lo, hi) as it:
            return [(kv.key, kv.value) for kv in it]

    def _process_self(
        self, key: Any, value: Any, ts: int, headers: Headers, out: list[JoinedRecord]
    ) -> None:
        """One record of a self-join: as :meth:`_process` of the same record on the left and
        then on the right of an inner join of the stream with itself, over one buffer."""
        if key is None or value is None:
            self.dropped_null += 1
            return
        before, after, grace = self._before, self._after, self._grace
        now = max(self.stream_time, ts)
        late_left = ts + after + grace < self.stream_time
        late_right = ts + before + grace < now  # after the left role advanced stream time
        if late_left and late_right:
            self.dropped_late += 1
            return
        self.stream_time = now
        joiner = self.joiner
        vh = ValueAndHeaders(value, headers)
        if not late_left:  # as a left record: the buffered records as right ones
            lo, hi = self.windows.bounds(ts, True)
            lo = max(lo, now - before - grace)
            if lo <= hi:
                for t_other, v_other in self._fetch(0, key, lo, hi):
                    out.append(JoinedRecord(key, joiner(key, vh, v_other), max(ts, t_other)))
        self.task.context.timestamp = ts
        self._put(0, key, vh, ts)
        if not late_right:  # as a right record: the buffered ones (itself too) as left ones
            lo, hi = self.windows.bounds(ts, False)
            lo = max(lo, now - after - grace)
            if lo <= hi:
                for t_other, v_other in self._fetch(0, key, lo, hi):
                    out.append(JoinedRecord(key, joiner(key, v_other, vh), max(ts, t_other)))

    def _wait(self, side: int, key: Any, vh: ValueAndHeaders[Any], ts: int) -> None:
        """Keep a record that joined nothing in the outer store until its window closes."""
        okey = _OUTER_KEY.pack(ts, side) + (self.key_serde.serialize(key) or b"")
        raw = self._codecs[side].encode(vh) or b""
        outer: Any = self.outer
        old = outer.get(okey)
        item = _LEN.pack(len(raw)) + raw
        outer.put(okey, item if old is None else old + item)
        if self._min_waiting is None or ts < self._min_waiting:
            self._min_waiting = ts

    def _emit_closed(self, out: list[JoinedRecord]) -> None:
        """Emit the waiting records whose window closed (stream time passed its end plus
        grace), oldest first, and forget them."""
        first = self._min_waiting
        now, grace = self.stream_time, self._grace
        looks = (self._after, self._before)
        soonest = min(looks[s] for s in (0, 1) if self._tracked[s])
        if first is None or first + soonest + grace >= now:
            return
        closed: list[tuple[bytes, bytes]] = []
        remaining: int | None = None
        outer: Any = self.outer
        with outer.all() as it:
            for okey, blob in it:
                t, side = _OUTER_KEY.unpack_from(okey)
                if t + soonest + grace >= now:  # this and every later one are still open
                    remaining = t if remaining is None else min(remaining, t)
                    break
                if t + looks[side] + grace < now:
                    closed.append((okey, blob))
                elif remaining is None:
                    remaining = t
        self._min_waiting = remaining
        joiner, deserialize = self.joiner, self.key_serde.deserialize
        for okey, blob in closed:
            t, side = _OUTER_KEY.unpack_from(okey)
            key = deserialize(okey[_OUTER_KEY.size :])
            codec = self._codecs[side]
            pos = 0
            while pos < len(blob):
                (n,) = _LEN.unpack_from(blob, pos)
                vh = codec.decode(blob[pos + 4 : pos + 4 + n])
                pos += 4 + n
                value = joiner(key, vh, None) if side == _LEFT else joiner(key, None, vh)
                out.append(JoinedRecord(key, value, t))
            outer.delete(okey)


def output_key(input_position: int, n: int) -> bytes:
    """The key of the ``n``-th output of the batch at ``input_position`` in ``<name>-out``:
    ``[position: 8 bytes][n: 4 bytes]``, big-endian (so the outputs sort in order)."""
    return _OUT_KEY.pack(input_position, n)


def parse_output_key(raw: bytes) -> tuple[int, int]:
    """``(input position, n)`` of an output key (:func:`output_key`)."""
    position, n = _OUT_KEY.unpack(raw)
    return int(position), int(n)


def encode_output(rec: JoinedRecord, key_serde: Serde[Any], output_serde: Serde[Any]) -> bytes:
    """An output record as ``<name>-out`` holds it: ``[timestamp: 8][has value: 1][key
    length: 4][key][value]``."""
    kb = key_serde.serialize(rec.key) or b""
    value = output_serde.serialize(rec.value)
    return _OUT_HEAD.pack(rec.timestamp, value is not None, len(kb)) + kb + (value or b"")


def decode_output(raw: bytes, key_serde: Serde[Any], output_serde: Serde[Any]) -> JoinedRecord:
    """The output record of :func:`encode_output`'s bytes."""
    ts, has_value, n = _OUT_HEAD.unpack_from(raw)
    start = _OUT_HEAD.size
    key = key_serde.deserialize(raw[start : start + n])
    value = output_serde.deserialize(raw[start + n :]) if has_value else None
    return JoinedRecord(key, value, ts)


def _checked(
    records: Iterable[JoinRecord], self_join: bool
) -> list[tuple[int, Any, Any, int, Headers]]:
    """``(side, key, value, timestamp, headers)`` of every record, checked before any is
    processed."""
    batch: list[tuple[int, Any, Any, int, Headers]] = []
    for i, rec in enumerate(records):
        if not isinstance(rec, tuple) or len(rec) not in (4, 5):
            raise InvalidTypeError(f"record {i} is not a JoinRecord: {rec!r}")
        side_name, key, value, ts = rec[0], rec[1], rec[2], rec[3]
        headers = rec[4] if len(rec) == 5 else None
        if side_name == "left" or self_join:
            side = _LEFT
        elif side_name == "right":
            side = _RIGHT
        else:
            raise InvalidArgumentError(
                f"record {i}: side must be 'left' or 'right', got {side_name!r}"
            )
        if isinstance(ts, bool) or not isinstance(ts, int):
            raise InvalidTypeError(f"record {i}: timestamp must be an int, got {ts!r}")
        if not 0 <= ts < 2**63:
            raise InvalidArgumentError(f"record {i}: timestamp must be >= 0, got {ts}")
        batch.append(
            (side, key, value, ts, EMPTY_HEADERS if headers is None else Headers.of(headers))
        )
    return batch
