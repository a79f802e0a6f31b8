"""Window and session store keys, their range bounds, windowed serde keys and segment ids.

Single-item, pure-Python paths (``key + struct.pack``); batch forms are in
:mod:`txstore.codecs._native`. Layouts and bound rules: ``docs/formats.md``.
"""

from __future__ import annotations

import struct

from txstore.codecs._common import (
    _Q,
    _QI,
    _QQ,
    INT_MAX,
    LONG_MAX,
    _as_bytes,
    _check_int,
    _check_long,
    _fail,
)
from txstore.errors import InvalidArgumentError


def window_key(key: bytes, timestamp: int, seq: int = 0) -> bytes:
    """Window store key ``[key][ts 8 BE][seq 4 BE]`` (``WindowKeySchema.toStoreKeyBinary``)."""
    try:
        return key + _QI.pack(timestamp, seq)
    except (TypeError, struct.error):
        _as_bytes("key", key)
        _check_long("timestamp", timestamp)
        _check_int("seq", seq)
        return _as_bytes("key", key) + _QI.pack(timestamp, seq)


def extract_window_key(raw: bytes) -> tuple[bytes, int, int]:
    """Split a window store key into ``(key, timestamp, seq)``. O(n)."""
    if type(raw) is not bytes:
        raw = _as_bytes("raw", raw)
    if len(raw) < 12:
        raise _fail(-1, "window store key")
    ts, seq = _QI.unpack_from(raw, len(raw) - 12)
    return raw[:-12], ts, seq


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
        _as_bytes("key", key), _QI.pack(_check_long("time_to", time_to), INT_MAX)
    )


def session_key(key: bytes, start: int, end: int) -> bytes:
    """Session store key ``[key][end 8 BE][start 8 BE]`` (end first, as Kafka does)."""
    try:
        return key + _QQ.pack(end, start)
    except (TypeError, struct.error):
        _as_bytes("key", key)
        _check_long("start", start)
        _check_long("end", end)
        return _as_bytes("key", key) + _QQ.pack(end, start)


def extract_session_key(raw: bytes) -> tuple[bytes, int, int]:
    """Split a session store key into ``(key, start, end)``."""
    if type(raw) is not bytes:
        raw = _as_bytes("raw", raw)
    if len(raw) < 16:
        raise _fail(-1, "session store key")
    end, start = _QQ.unpack_from(raw, len(raw) - 16)
    return raw[:-16], start, end


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
        _as_bytes("key", key), _QQ.pack(LONG_MAX, _check_long("time_to", time_to))
    )


def time_windowed_key(key: bytes, start: int) -> bytes:
    """``TimeWindowedSerializer``: ``[key][L(start)]`` (no end, no sequence number)."""
    try:
        return key + _Q.pack(start)
    except (TypeError, struct.error):
        _as_bytes("key", key)
        _check_long("start", start)
        return _as_bytes("key", key) + _Q.pack(start)


def parse_time_windowed_key(raw: bytes) -> tuple[bytes, int]:
    """``TimeWindowedDeserializer``: ``(key, start)`` of ``[key][L(start)]``."""
    if type(raw) is not bytes:
        raw = _as_bytes("raw", raw)
    if len(raw) < 8:
        raise _fail(-1, "time-windowed key")
    return raw[:-8], _Q.unpack_from(raw, len(raw) - 8)[0]


def segment_id(timestamp: int, interval: int) -> int:
    """``timestamp / interval`` with Java's truncation toward zero.

    >>> segment_id(-1, 60000), segment_id(60000, 60000)
    (0, 1)
    """
    if type(interval) is not int or not 1 <= interval <= LONG_MAX:
        raise InvalidArgumentError(f"segment interval must be an int >= 1, got {interval!r}")
    if type(timestamp) is not int or not -(2**63) <= timestamp <= 2**63 - 1:
        _check_long("timestamp", timestamp)  # raises the typed error
    return timestamp // interval if timestamp >= 0 else -(-timestamp // interval)
