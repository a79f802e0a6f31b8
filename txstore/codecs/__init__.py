"""Byte codecs of Kafka Streams' state stores.

Every function here works on ``bytes`` and produces exactly the bytes Kafka Streams produces
(see ``docs/formats.md``). Two implementations sit behind one API:

* **batch functions** (plural names: ``window_keys``, ``convert_values``...) take a whole list:
  those where C wins (varints, ``partitions_for_keys``, the column codecs) call the C library
  ``txstore._codecs`` once for it (:mod:`txstore.codecs._native`, the only module that touches
  the C library); the others map the single-item function (:mod:`txstore.codecs.batches`),
  since making one object per item costs more than a cffi batch saves;
* **single-item functions** use whichever implementation ``perf/bench_codecs.py`` measured
  faster on one item. A cffi call costs 90-450 ns with its argument conversion, so short
  layouts (``key + struct.pack``) stay in Python and only murmur2 goes to C.

Decoders never read past their input: truncated, oversized or malformed input raises
:class:`~txstore.errors.SerializationError`; a wrong argument type raises
:class:`~txstore.errors.InvalidTypeError`. Any bytes-like input (``bytearray``, a contiguous
``memoryview`` or ``array``) is taken as its bytes, whatever its item size.

May import: ``txstore.errors`` and ``txstore.types`` (and the C library ``txstore._codecs``);
every other layer may import it.

>>> encode_varint(-65).hex()
'8101'
>>> window_key(b"a", 1000, 0).hex()
'6100000000000003e800000000'
>>> murmur2(b"21")
-973932308
"""

from __future__ import annotations

from txstore.codecs._common import (
    INT_MAX,
    LONG_MAX,
    ValueFormat,
)
from txstore.codecs._native import (
    decode_varints,
    encode_varints,
    murmur2,
    partition_for_key,
    partitions_for_keys,
)
from txstore.codecs.batches import (
    convert_values,
    extract_session_keys,
    extract_window_keys,
    segment_ids,
    session_keys,
    split_values,
    window_keys,
)
from txstore.codecs.converters import convert_value, value_converter
from txstore.codecs.keys import (
    extract_session_key,
    extract_window_key,
    ordered_upper_range,
    parse_time_windowed_key,
    segment_id,
    segment_id_function,
    session_key,
    session_lower_range,
    session_lower_range_fixed,
    session_upper_range,
    session_upper_range_fixed,
    time_windowed_key,
    window_key,
    window_lower_range,
    window_lower_range_fixed,
    window_upper_range,
    window_upper_range_fixed,
)
from txstore.codecs.records import record_to_value, records_to_values
from txstore.codecs.values import (
    ValueConverter,
    decode_headers,
    decode_unsigned_varint,
    decode_varint,
    encode_headers,
    encode_unsigned_varint,
    encode_varint,
    pack_value,
    split_value,
)

__all__ = [
    "INT_MAX",
    "LONG_MAX",
    "ValueConverter",
    "ValueFormat",
    "convert_value",
    "convert_values",
    "decode_headers",
    "decode_unsigned_varint",
    "decode_varint",
    "decode_varints",
    "encode_headers",
    "encode_unsigned_varint",
    "encode_varint",
    "encode_varints",
    "extract_session_key",
    "extract_session_keys",
    "extract_window_key",
    "extract_window_keys",
    "murmur2",
    "ordered_upper_range",
    "pack_value",
    "parse_time_windowed_key",
    "partition_for_key",
    "partitions_for_keys",
    "record_to_value",
    "records_to_values",
    "segment_id",
    "segment_id_function",
    "segment_ids",
    "session_key",
    "session_keys",
    "session_lower_range",
    "session_lower_range_fixed",
    "session_upper_range",
    "session_upper_range_fixed",
    "split_value",
    "split_values",
    "time_windowed_key",
    "value_converter",
    "window_key",
    "window_keys",
    "window_lower_range",
    "window_lower_range_fixed",
    "window_upper_range",
    "window_upper_range_fixed",
]
