"""The stored-value conversions between formats (adapters and lazy upgrades):
:func:`value_converter` hands out one function per pair of formats, :func:`convert_value`
looks the pair up on each call.

Each conversion is a C builtin (``csrc/fastpaths.c``, module ``txstore._fastpaths``) in front
of the Python function of the same pair below: C converts well-formed values (bytes with a
one-byte headers size), cheaper to call than any Python function, and passes everything else
to the Python function, which converts the rest or raises the typed error.
"""

from __future__ import annotations

from txstore._fastpaths import converter as _fast_converter
from txstore.codecs._common import (
    _HEADERS,
    _PLAIN,
    _PLAIN_HEADERS,
    _TIMESTAMPED,
    ValueFormat,
    _format,
)
from txstore.codecs.values import (
    ValueConverter,
    _headers_end,
    _pack_value_checked,
    _split_value_checked,
)

__all__ = ["convert_value", "value_converter"]


def value_converter(src: ValueFormat, dst: ValueFormat) -> ValueConverter:
    """The conversion of stored values from ``src`` to ``dst``, as one function of the value.

    Resolve it once (a store does so when it is opened) and call it for each value: it does
    what :func:`convert_value` does without looking up the formats on every call. O(1) to
    resolve; each call is O(len(raw)), with the same checks and errors as
    :func:`convert_value`. ``None`` stays ``None``.

    >>> to_headers = value_converter(ValueFormat.PLAIN, ValueFormat.HEADERS)
    >>> to_headers(b"v").hex(), to_headers(None)
    ('00ffffffffffffffff76', None)
    """
    return _CONVERTERS[_format(src)][_format(dst)]


def convert_value(raw: bytes | None, src: ValueFormat, dst: ValueFormat) -> bytes | None:
    """Convert a stored value between formats (adapters and lazy upgrades). O(n).

    A missing timestamp becomes -1 and missing headers become empty headers; fields the
    target has no room for are dropped. ``None`` stays ``None``. To convert many values
    between the same two formats, resolve the conversion once with :func:`value_converter`.

    >>> convert_value(b"v", ValueFormat.PLAIN, ValueFormat.HEADERS).hex()
    '00ffffffffffffffff76'
    """
    try:
        convert = _CONVERTERS[src][dst]
    except (KeyError, TypeError):  # not a format: value_converter reports it
        convert = value_converter(src, dst)
    return convert(raw)


# The sixteen conversions, one function each (value_converter hands them out). Each handles
# well-formed input inline and returns byte-for-byte what split_value + pack_value return;
# anything else (other types, truncated or malformed values, headers sizes of three bytes or
# more) goes to _checked, which does exactly that, so errors are those of split_value and
# pack_value. Constants are literals, not closure cells: LOAD_CONST is the cheapest load.
#
# From a format with headers, b = raw[0] starts the headers size varint: when b & 0x81 == 0
# the size is b >> 1, else _headers_end reads a two-byte size; raw[:end] is then
# [varint hsize][headers]. One length test covers a cut-off value (and an invalid size, for
# which _headers_end returns a position past the end), and a bytes type test keeps bytearray
# and memoryview, whose slices are not bytes, on the checked path.


def _checked(raw: bytes, src: ValueFormat, dst: ValueFormat) -> bytes:
    value, ts, headers = _split_value_checked(src, raw)
    return _pack_value_checked(dst, value, -1 if ts is None else ts, headers)


def _plain_to_plain(raw: bytes | None) -> bytes | None:
    if raw is None:
        return None
    try:
        return b"" + raw  # raw itself for bytes, a copy for other bytes-like types
    except TypeError:
        return _checked(raw, _PLAIN, _PLAIN)  # raises the typed error


def _plain_to_timestamped(raw: bytes | None) -> bytes | None:
    if raw is None:
        return None
    try:
        return b"\xff\xff\xff\xff\xff\xff\xff\xff" + raw
    except TypeError:
        return _checked(raw, _PLAIN, _TIMESTAMPED)


def _plain_to_headers(raw: bytes | None) -> bytes | None:
    if raw is None:
        return None
    try:
        return b"\x00\xff\xff\xff\xff\xff\xff\xff\xff" + raw
    except TypeError:
        return _checked(raw, _PLAIN, _HEADERS)


def _plain_to_plain_headers(raw: bytes | None) -> bytes | None:
    if raw is None:
        return None
    try:
        return b"\x00" + raw
    except TypeError:
        return _checked(raw, _PLAIN, _PLAIN_HEADERS)


def _timestamped_to_plain(raw: bytes | None) -> bytes | None:
    if type(raw) is bytes:
        if len(raw) >= 8:
            return raw[8:]
    elif raw is None:
        return None
    return _checked(raw, _TIMESTAMPED, _PLAIN)


def _timestamped_to_timestamped(raw: bytes | None) -> bytes | None:
    if type(raw) is bytes:
        if len(raw) >= 8:
            return raw
    elif raw is None:
        return None
    return _checked(raw, _TIMESTAMPED, _TIMESTAMPED)


def _timestamped_to_headers(raw: bytes | None) -> bytes | None:
    if raw is None:
        return None
    try:
        if len(raw) >= 8:
            return b"\x00" + raw
    except TypeError:
        pass
    return _checked(raw, _TIMESTAMPED, _HEADERS)


def _timestamped_to_plain_headers(raw: bytes | None) -> bytes | None:
    if type(raw) is bytes:  # raw[8:] of a memoryview or array would cut items, not bytes
        if len(raw) >= 8:
            return b"\x00" + raw[8:]
    elif raw is None:
        return None
    return _checked(raw, _TIMESTAMPED, _PLAIN_HEADERS)


def _headers_to_plain(raw: bytes | None) -> bytes | None:
    if type(raw) is bytes:
        try:
            b = raw[0]
            start = (b >> 1) + 9 if not b & 0x81 else _headers_end(raw) + 8
            if len(raw) >= start:
                return raw[start:]
        except IndexError:
            pass
    elif raw is None:
        return None
    return _checked(raw, _HEADERS, _PLAIN)


def _headers_to_timestamped(raw: bytes | None) -> bytes | None:
    if type(raw) is bytes:
        try:
            b = raw[0]
            start = (b >> 1) + 1 if not b & 0x81 else _headers_end(raw)
            if len(raw) >= start + 8:
                return raw[start:]
        except IndexError:
            pass
    elif raw is None:
        return None
    return _checked(raw, _HEADERS, _TIMESTAMPED)


def _headers_to_headers(raw: bytes | None) -> bytes | None:
    if type(raw) is bytes:
        try:
            b = raw[0]
            end = (b >> 1) + 1 if not b & 0x81 else _headers_end(raw)
            if len(raw) >= end + 8:
                return raw
        except IndexError:
            pass
    elif raw is None:
        return None
    return _checked(raw, _HEADERS, _HEADERS)


def _headers_to_plain_headers(raw: bytes | None) -> bytes | None:
    if type(raw) is bytes:
        try:
            b = raw[0]
            end = (b >> 1) + 1 if not b & 0x81 else _headers_end(raw)
            if len(raw) >= end + 8:
                return raw[:end] + raw[end + 8 :]
        except IndexError:
            pass
    elif raw is None:
        return None
    return _checked(raw, _HEADERS, _PLAIN_HEADERS)


def _plain_headers_to_plain(raw: bytes | None) -> bytes | None:
    if type(raw) is bytes:
        try:
            b = raw[0]
            start = (b >> 1) + 1 if not b & 0x81 else _headers_end(raw)
            if len(raw) >= start:
                return raw[start:]
        except IndexError:
            pass
    elif raw is None:
        return None
    return _checked(raw, _PLAIN_HEADERS, _PLAIN)


def _plain_headers_to_timestamped(raw: bytes | None) -> bytes | None:
    if type(raw) is bytes:
        try:
            b = raw[0]
            start = (b >> 1) + 1 if not b & 0x81 else _headers_end(raw)
            if len(raw) >= start:
                return b"\xff\xff\xff\xff\xff\xff\xff\xff" + raw[start:]
        except IndexError:
            pass
    elif raw is None:
        return None
    return _checked(raw, _PLAIN_HEADERS, _TIMESTAMPED)


def _plain_headers_to_headers(raw: bytes | None) -> bytes | None:
    if type(raw) is bytes:
        try:
            b = raw[0]
            end = (b >> 1) + 1 if not b & 0x81 else _headers_end(raw)
            if len(raw) >= end:
                return raw[:end] + b"\xff\xff\xff\xff\xff\xff\xff\xff" + raw[end:]
        except IndexError:
            pass
    elif raw is None:
        return None
    return _checked(raw, _PLAIN_HEADERS, _HEADERS)


def _plain_headers_to_plain_headers(raw: bytes | None) -> bytes | None:
    if type(raw) is bytes:
        try:
            b = raw[0]
            end = (b >> 1) + 1 if not b & 0x81 else _headers_end(raw)
            if len(raw) >= end:
                return raw
        except IndexError:
            pass
    elif raw is None:
        return None
    return _checked(raw, _PLAIN_HEADERS, _PLAIN_HEADERS)


_CONVERTERS: dict[ValueFormat, dict[ValueFormat, ValueConverter]] = {
    _PLAIN: {
        _PLAIN: _plain_to_plain,
        _TIMESTAMPED: _plain_to_timestamped,
        _HEADERS: _plain_to_headers,
        _PLAIN_HEADERS: _plain_to_plain_headers,
    },
    _TIMESTAMPED: {
        _PLAIN: _timestamped_to_plain,
        _TIMESTAMPED: _timestamped_to_timestamped,
        _HEADERS: _timestamped_to_headers,
        _PLAIN_HEADERS: _timestamped_to_plain_headers,
    },
    _HEADERS: {
        _PLAIN: _headers_to_plain,
        _TIMESTAMPED: _headers_to_timestamped,
        _HEADERS: _headers_to_headers,
        _PLAIN_HEADERS: _headers_to_plain_headers,
    },
    _PLAIN_HEADERS: {
        _PLAIN: _plain_headers_to_plain,
        _TIMESTAMPED: _plain_headers_to_timestamped,
        _HEADERS: _plain_headers_to_headers,
        _PLAIN_HEADERS: _plain_headers_to_plain_headers,
    },
}


# The C fast path in front of each (codes: src * 4 + dst, as csrc/fastpaths.c reads them).
_CONVERTERS = {
    src: {dst: _fast_converter(src * 4 + dst, fn) for dst, fn in row.items()}
    for src, row in _CONVERTERS.items()
}
