"""Window and session store keys, their range bounds, windowed serde keys and segment ids.

Single-item, pure-Python paths (``key + struct.pack``) behind C builtins; batch forms are in
:mod:`txstore.codecs.batches`. Layouts and bound rules: ``docs/formats.md``.

Argument checks cost nothing when the arguments are good: ``struct`` already rejects a
non-int or out-of-range number and a short buffer, and ``bytes + x`` a non-bytes key, so the
functions let them do the work inside ``try`` and turn their errors into typed ones.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from txstore._fastpaths import key_function as _key_function
from txstore._fastpaths import segment_function as _segment_function
from txstore.codecs._common import (
    INT_MAX,
    LONG_MAX,
    _as_bytes,
    _check_int,
    _check_long,
    _fail,
    _pack_q,
    _pack_qi,
    _pack_qq,
    _unpack_q,
    _unpack_qi,
    _unpack_qq,
)
from txstore.errors import InvalidArgumentError


def _window_key(key: bytes, timestamp: int, seq: int = 0) -> bytes:
    """Window store key ``[key][ts 8 BE][seq 4 BE]`` (``WindowKeySchema.toStoreKeyBinary``)."""
    try:
        return key + _pack_qi(timestamp, seq)
    except (TypeError, struct.error):
        pass
    return _as_bytes("key", key) + _pack_qi(
        _check_long("timestamp", timestamp), _check_int("seq", seq)
    )


def _extract_window_key(raw: bytes) -> tuple[bytes, int, int]:
    """Split a window store key into ``(key, timestamp, seq)``. O(n).

    >>> extract_window_key(bytes.fromhex("6100000000000003e800000000"))
    (b'a', 1000, 0)
    """
    if type(raw) is bytes:
        n = len(raw) - 12
        try:  # a raw shorter than 12 bytes makes unpack_from fail (n < 0 counts from the end)
            ts, seq = _unpack_qi(raw, n)
        except struct.error:
            raise _fail(-1, "window store key") from None
        return raw[:n], ts, seq
    return extract_window_key(_as_bytes("raw", raw))


def ordered_upper_range(key: bytes, max_suffix: bytes) -> bytes:
    """Kafka's ``OrderedBytes.upperRange``: keep the key's first byte, then its bytes while
    they are >= the suffix's first byte, then append the suffix.

    >>> ordered_upper_range(b"ab", bytes.fromhex("7fffffffffffffff7fffffff")).hex()
    '617fffffffffffffff7fffffff'
    """
    if not max_suffix:
        raise InvalidArgumentError("max_suffix must not be empty")
    first = max_suffix[0]
    if first == 0 or not key:
        return key + max_suffix
    keep = 1
    n = len(key)
    while keep < n and key[keep] >= first:
        keep += 1
    return key[:keep] + max_suffix


def window_lower_range_fixed(key: bytes, time_from: int) -> bytes:
    """Lower bound of a single-key window fetch: ``key || L(max(0, from)) || I(0)``."""
    return window_key(key, max(0, time_from), 0)


def window_upper_range_fixed(key: bytes, time_to: int) -> bytes:
    """Upper bound of a single-key window fetch: ``key || L(to) || I(MAX)``."""
    return window_key(key, time_to, INT_MAX)


def window_lower_range(key: bytes, time_from: int) -> bytes:
    """Lower bound of a key-range window fetch: the timestamp is ignored, ``key || 00*12``."""
    return _as_bytes("key", key) + bytes(12)


def window_upper_range(key: bytes, time_to: int) -> bytes:
    """Upper bound of a key-range window fetch: ``upperRange(key, L(to) || I(MAX))``."""
    return ordered_upper_range(
        _as_bytes("key", key), _pack_qi(_check_long("time_to", time_to), INT_MAX)
    )


def _session_key(key: bytes, start: int, end: int) -> bytes:
    """Session store key ``[key][end 8 BE][start 8 BE]`` (end first, as Kafka does)."""
    try:
        return key + _pack_qq(end, start)
    except (TypeError, struct.error):
        pass
    return _as_bytes("key", key) + _pack_qq(_check_long("end", end), _check_long("start", start))


def _extract_session_key(raw: bytes) -> tuple[bytes, int, int]:
    """Split a session store key into ``(key, start, end)``. O(n).

    >>> extract_session_key(bytes.fromhex("61" "0000000000001388" "00000000000003e8"))
    (b'a', 1000, 5000)
    """
    if type(raw) is bytes:
        n = len(raw) - 16
        try:  # a raw shorter than 16 bytes makes unpack_from fail (n < 0 counts from the end)
            end, start = _unpack_qq(raw, n)
        except struct.error:
            raise _fail(-1, "session store key") from None
        return raw[:n], start, end
    return extract_session_key(_as_bytes("raw", raw))


def session_lower_range_fixed(key: bytes, time_from: int) -> bytes:
    """``key || L(max(0, from)) || L(0)``: lower bound of a single-key session search."""
    return session_key(key, 0, max(0, time_from))


def session_upper_range_fixed(key: bytes, time_to: int) -> bytes:
    """``key || L(MAX) || L(to)``: upper bound of a single-key session search."""
    return session_key(key, time_to, LONG_MAX)


def session_lower_range(key: bytes, time_from: int) -> bytes:
    """``key || 00*16``: lower bound of a key-range session search."""
    return _as_bytes("key", key) + bytes(16)


def session_upper_range(key: bytes, time_to: int) -> bytes:
    """``upperRange(key, L(MAX) || L(to))``: upper bound of a key-range session search."""
    return ordered_upper_range(
        _as_bytes("key", key), _pack_qq(LONG_MAX, _check_long("time_to", time_to))
    )


def time_windowed_key(key: bytes, start: int) -> bytes:
    """``TimeWindowedSerializer``: ``[key][L(start)]`` (no end, no sequence number)."""
    try:
        return key + _pack_q(start)
    except (TypeError, struct.error):
        pass
    return _as_bytes("key", key) + _pack_q(_check_long("start", start))


def parse_time_windowed_key(raw: bytes) -> tuple[bytes, int]:
    """``TimeWindowedDeserializer``: ``(key, start)`` of ``[key][L(start)]``."""
    if type(raw) is bytes:
        n = len(raw) - 8
        try:
            return raw[:n], _unpack_q(raw, n)[0]
        except struct.error:
            raise _fail(-1, "time-windowed key") from None
    return parse_time_windowed_key(_as_bytes("raw", raw))


#: Ints up to this bound are one 30-bit digit inside CPython, and comparing two of them is a
#: fast path of the interpreter; larger segment ids and intervals take the general checks.
_SMALL = (1 << 30) - 1


def segment_id(timestamp: int, interval: int) -> int:
    """``timestamp / interval`` with Java's truncation toward zero. O(1).

    To compute many segment ids for one interval, resolve it once with
    :func:`segment_id_function`.

    >>> segment_id(-1, 60000), segment_id(60000, 60000)
    (0, 1)
    """
    if type(timestamp) is int and type(interval) is int and 0 < interval < _SMALL:
        sid = timestamp // interval
        # 0 <= sid < 2**30 and interval < 2**30, so 0 <= timestamp < 2**60: a valid long
        if 0 <= sid < _SMALL:
            return sid
    return _segment_id_checked(timestamp, _check_interval(interval))


def _check_interval(interval: object) -> int:
    if type(interval) is not int or not 1 <= interval <= LONG_MAX:
        raise InvalidArgumentError(f"segment interval must be an int >= 1, got {interval!r}")
    return interval


def _segment_id_checked(timestamp: int, interval: int) -> int:
    timestamp = _check_long("timestamp", timestamp)
    return timestamp // interval if timestamp >= 0 else -(-timestamp // interval)


def segment_id_function(interval: int) -> Callable[[int], int]:
    """:func:`segment_id` for one ``interval``, as a function of the timestamp (Kafka's
    ``Segments.segmentId``). The interval is checked once, here; each call checks its
    timestamp and costs O(1).

    >>> segment_of = segment_id_function(60000)
    >>> segment_of(-1), segment_of(60000), segment_of(119999)
    (0, 1, 1)
    """
    interval = _check_interval(interval)
    # sid < small gives timestamp < (sid + 1) * interval <= LONG_MAX + 1: a valid long
    small = min(_SMALL, (LONG_MAX + 1) // interval)

    def segment_of(timestamp: int) -> int:
        if type(timestamp) is int:
            sid = timestamp // interval
            if 0 <= sid < small:
                return sid
        return _segment_id_checked(timestamp, interval)

    # A C builtin (csrc/fastpaths.c) in front: cheaper to call than segment_of, which takes
    # what it does not (other types, negative or out-of-range timestamps).
    return _segment_function(interval, small, segment_of)


# The public key codecs are C builtins (csrc/fastpaths.c), cheaper to call than any Python
# function, each in front of the Python function above: C takes exact bytes keys and ints in
# range, the Python function everything else (its own conversions, or the typed error).
window_key = _key_function("window_key", _window_key)
extract_window_key = _key_function("extract_window_key", _extract_window_key)
session_key = _key_function("session_key", _session_key)
extract_session_key = _key_function("extract_session_key", _extract_session_key)
