"""Key schemas of segmented stores: Kafka's ``WindowKeySchema`` and ``SessionKeySchema``.

A key schema keeps the binary key layout out of the segmented store: which timestamp picks the
segment, the range bounds of a fetch, and the filter (Kafka's ``hasNextCondition``) that a row
inside those bounds must still pass. Bounds are computed by :mod:`txstore.codecs` exactly as
Kafka computes them (``docs/formats.md``); the filter compares the *extracted* key bytes, so a
single-key fetch of ``a`` never returns ``aa``.

>>> WindowKeySchema().segment_timestamp(bytes.fromhex("61 00000000000003e8 00000000"))
1000
>>> SessionKeySchema().segment_timestamp(bytes.fromhex("61 0000000000000014 000000000000000a"))
20
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

from txstore import codecs
from txstore.errors import InvalidArgumentError

__all__ = ["KeySchema", "SessionKeySchema", "WindowKeySchema"]

LONG_MAX: Final = 2**63 - 1
_Q: Final = struct.Struct(">q")
_QQ: Final = struct.Struct(">qq")

Condition = Callable[[bytes], bool]


class KeySchema:
    """The layout of a segmented store's keys (see the module docstring)."""

    kind: str = ""
    suffix: int = 0
    #: Window fetches whose ``to`` is below the actual ``from`` are empty before any read.
    window: bool = False

    def segment_timestamp(self, key: bytes) -> int:
        """The timestamp that picks the segment of a store key."""
        raise NotImplementedError

    def segment_timestamps(self, keys: list[bytes]) -> list[int]:
        """:meth:`segment_timestamp` of every key (restore's batch path): both layouts start
        their suffix with that timestamp. O(n), one ``unpack_from`` per key."""
        suffix = self.suffix
        if keys and min(map(len, keys)) < suffix:
            for key in keys:
                self._check(key)
        unpack = _Q.unpack_from
        return [unpack(key, len(key) - suffix)[0] for key in keys]

    def lower_range_fixed(self, key: bytes, time_from: int) -> bytes:
        """Lower bound of a single-key fetch."""
        raise NotImplementedError

    def upper_range_fixed(self, key: bytes, time_to: int) -> bytes:
        """Upper bound of a single-key fetch."""
        raise NotImplementedError

    def lower_range(self, key: bytes, time_from: int) -> bytes:
        """Lower bound of a key-range fetch."""
        raise NotImplementedError

    def upper_range(self, key: bytes, time_to: int) -> bytes:
        """Upper bound of a key-range fetch (``OrderedBytes.upperRange``)."""
        raise NotImplementedError

    def search_to(self, time_to: int) -> int:
        """The largest segment timestamp a fetch up to ``time_to`` must search."""
        raise NotImplementedError

    def condition(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        time_from: int,
        time_to: int,
        single_key: bool,
    ) -> Condition:
        """The filter of a fetch (Kafka's ``hasNextCondition``), on raw store keys."""
        raise NotImplementedError

    def time_order_key(self, raw: bytes) -> Any:
        """Sort key of a raw store key in the order of Kafka's in-memory store of this kind
        (``docs/stores.md``, "Iteration order")."""
        raise NotImplementedError

    def single_key_needs_sort(self) -> bool:
        """True if one key's rows, in store-key order, are not yet in :meth:`time_order_key`
        order (the session layout: Kafka's in-memory store returns one end's sessions latest
        start first)."""
        return False

    def _check(self, raw: bytes) -> None:
        if len(raw) < self.suffix:
            raise InvalidArgumentError(
                f"{self.kind} store key of {len(raw)} bytes is shorter than its "
                f"{self.suffix}-byte suffix"
            )


class WindowKeySchema(KeySchema):
    """``[key][L(window start)][I(seqnum)]``: segments by window start, key-major order."""

    kind = "window"
    suffix = 12
    window = True

    def segment_timestamp(self, key: bytes) -> int:
        if len(key) < 12:
            self._check(key)
        ts: int = _Q.unpack_from(key, len(key) - 12)[0]
        return ts

    def lower_range_fixed(self, key: bytes, time_from: int) -> bytes:
        return codecs.window_lower_range_fixed(key, time_from)

    def upper_range_fixed(self, key: bytes, time_to: int) -> bytes:
        return codecs.window_upper_range_fixed(key, time_to)

    def lower_range(self, key: bytes, time_from: int) -> bytes:
        return codecs.window_lower_range(key, time_from)

    def upper_range(self, key: bytes, time_to: int) -> bytes:
        return codecs.window_upper_range(key, time_to)

    def search_to(self, time_to: int) -> int:
        return time_to

    def condition(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        time_from: int,
        time_to: int,
        single_key: bool,
    ) -> Condition:
        unpack = _Q.unpack_from
        if single_key:
            assert key_from is not None
            key, size = key_from, len(key_from) + 12

            def one(raw: bytes) -> bool:
                return (
                    len(raw) == size
                    and raw.startswith(key)
                    and time_from <= unpack(raw, size - 12)[0] <= time_to
                )

            return one

        def many(raw: bytes) -> bool:
            n = len(raw) - 12
            if not time_from <= unpack(raw, n)[0] <= time_to:
                return False
            k = raw[:n]
            return (key_from is None or k >= key_from) and (key_to is None or k <= key_to)

        return many

    def time_order_key(self, raw: bytes) -> Any:
        """``L(start) || key || I(seq)``: by window start, then by the bytes ``key ||
        I(seq)``, as Kafka's ``InMemoryWindowStore`` orders one start's map (its keys are the
        serialized key, with the sequence number appended when it retains duplicates; the
        sequence number of a store without duplicates is always 0, which keeps plain key
        order)."""
        n = len(raw) - 12
        return raw[n : n + 8] + raw[:n] + raw[n + 8 :]


class SessionKeySchema(KeySchema):
    """``[key][L(end)][L(start)]``: segments by session end; end before start in the key."""

    kind = "session"
    suffix = 16

    def segment_timestamp(self, key: bytes) -> int:
        if len(key) < 16:
            self._check(key)
        ts: int = _Q.unpack_from(key, len(key) - 16)[0]
        return ts

    def lower_range_fixed(self, key: bytes, time_from: int) -> bytes:
        return codecs.session_lower_range_fixed(key, time_from)

    def upper_range_fixed(self, key: bytes, time_to: int) -> bytes:
        return codecs.session_upper_range_fixed(key, time_to)

    def lower_range(self, key: bytes, time_from: int) -> bytes:
        return codecs.session_lower_range(key, time_from)

    def upper_range(self, key: bytes, time_to: int) -> bytes:
        return codecs.session_upper_range(key, time_to)

    def search_to(self, time_to: int) -> int:
        return LONG_MAX  # a session ending later may start before ``time_to``

    def condition(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        time_from: int,
        time_to: int,
        single_key: bool,
    ) -> Condition:
        """Sessions with ``end >= time_from`` (earliest session end) and ``start <= time_to``
        (latest session start), key in range."""
        unpack = _QQ.unpack_from
        if single_key:
            assert key_from is not None
            key, size = key_from, len(key_from) + 16

            def one(raw: bytes) -> bool:
                if len(raw) != size or not raw.startswith(key):
                    return False
                end, start = unpack(raw, size - 16)
                return bool(end >= time_from and start <= time_to)

            return one

        def many(raw: bytes) -> bool:
            n = len(raw) - 16
            end, start = unpack(raw, n)
            if end < time_from or start > time_to:
                return False
            k = raw[:n]
            return (key_from is None or k >= key_from) and (key_to is None or k <= key_to)

        return many

    def time_order_key(self, raw: bytes) -> Any:
        """``(end, key, -start)``: Kafka's ``InMemorySessionStore`` maps end -> key -> start
        and walks the starts of one end and key **descending** in a forward iteration."""
        n = len(raw) - 16
        end, start = _QQ.unpack_from(raw, n)
        return (end, raw[:n], -start)

    def single_key_needs_sort(self) -> bool:
        return True
