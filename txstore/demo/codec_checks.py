"""Step 0 of ``txstore demo`` (``make demo``): every codec against Kafka's own bytes.

Each row encodes an input from Kafka's test vectors or the worked examples of
``docs/formats.md`` with the C batch path and with the single-item path, compares both with the
bytes Kafka Streams produces and decodes them back; :func:`run_codec_demo` then checks that the
batch and single-item paths agree on 100,000 window keys. The demo counts any failed row as a
failure of the whole run (non-zero exit).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from txstore import codecs
from txstore.codecs import ValueFormat
from txstore.types import Headers


@dataclass(frozen=True)
class Row:
    codec: str
    case: str
    expected_hex: str
    single: Callable[[], Any]
    batch: Callable[[], Any]
    decode: Callable[[bytes], object]
    decoded: object


def _first(xs: list[bytes | None]) -> bytes:
    x = xs[0]
    if x is None:
        raise AssertionError("the batch codec returned None for a non-null input")
    return x


def _record_batch(fmt: ValueFormat, value: bytes, ts: int, headers: bytes) -> bytes:
    return _first(codecs.records_to_values(fmt, [value], [ts], [headers]))


def _window_batch(key: bytes, ts: int, seq: int) -> bytes:
    return codecs.window_keys([key], [ts], [seq])[0]


def _murmur_bytes(data: bytes) -> bytes:
    return (codecs.murmur2(data) & 0xFFFFFFFF).to_bytes(4, "big")


def _murmur_batch_agrees(data: bytes, hashed: bytes) -> bool:
    n = 1 << 30
    return (
        codecs.partitions_for_keys([data], n)[0] == (int.from_bytes(hashed, "big") & 0x7FFFFFFF) % n
    )


# Kafka ByteUtilsTest.assertVarintSerde vectors.
VARINTS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (-8192, "ff7f"),
    (8192, "808001"),
    (-8193, "818001"),
    (1048575, "feff7f"),
    (-1048576, "ffff7f"),
    (1048576, "80808001"),
    (-1048577, "81808001"),
    (134217727, "feffff7f"),
]
# Kafka UtilsTest.testMurmur2 vectors.
MURMUR2 = [
    ("21", -973932308),
    ("foobar", -790332482),
    ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    ("abc", 479470107),
]


def _rows() -> list[Row]:
    rows: list[Row] = []
    for number, hx in VARINTS:
        rows.append(
            Row(
                "varint",
                str(number),
                hx,
                partial(codecs.encode_varint, number),
                partial(codecs.encode_varints, [number]),
                lambda b: codecs.decode_varint(b)[0],
                number,
            )
        )
    hs = Headers([("a", None), ("bc", b"\x01\x02")])
    rows.append(
        Row(
            "headers",
            "[a=null, bc=0102]",
            "04026101046263040102",
            partial(codecs.encode_headers, hs),
            partial(codecs.encode_headers, list(hs)),
            codecs.decode_headers,
            hs,
        )
    )
    hv = codecs.encode_headers([("k", b"v")])
    ha = codecs.encode_headers([("a", None)])
    cases: list[tuple[str, ValueFormat, bytes, int, bytes, str]] = [
        ("timestamped", ValueFormat.TIMESTAMPED, b"val", 1000, b"", "00000000000003e876616c"),
        ("ts+headers", ValueFormat.HEADERS, b"val", 1000, hv, "0a02026b027600000000000003e876616c"),
        ("ts+headers", ValueFormat.HEADERS, b"v", 100, b"", "00000000000000006476"),
        (
            "plain+headers",
            ValueFormat.PLAIN_HEADERS,
            b"\x00\x00\x00\x05",
            -1,
            ha,
            "080202610100000005",
        ),
    ]
    for name, fmt, value, ts, hb, hx in cases:
        expect_ts = None if fmt == ValueFormat.PLAIN_HEADERS else ts
        rows.append(
            Row(
                "value " + name,
                f"{value.hex()} ts={ts}",
                hx,
                partial(codecs.pack_value, fmt, value, ts, hb),
                partial(_record_batch, fmt, value, ts, hb),
                partial(codecs.split_value, fmt),
                (value, expect_ts, hb),
            )
        )
    rows.append(
        Row(
            "convert",
            "plain -> ts+headers",
            "00ffffffffffffffff76",
            lambda: codecs.convert_value(b"v", ValueFormat.PLAIN, ValueFormat.HEADERS) or b"",
            lambda: _first(codecs.convert_values([b"v"], ValueFormat.PLAIN, ValueFormat.HEADERS)),
            lambda b: codecs.convert_value(b, ValueFormat.HEADERS, ValueFormat.PLAIN),
            b"v",
        )
    )
    window_cases = [
        (b"a", 1000, 1, "6100000000000003e800000001"),
        (b"key", 1700000000000, 7, "6b65790000018bcfe5680000000007"),
        (b"\x00\x00\x00\x01", 60000, 0, "00000001000000000000ea6000000000"),
    ]
    for key, ts, seq, hx in window_cases:
        rows.append(
            Row(
                "window key",
                f"{key.hex()} ts={ts} seq={seq}",
                hx,
                partial(codecs.window_key, key, ts, seq),
                partial(_window_batch, key, ts, seq),
                codecs.extract_window_key,
                (key, ts, seq),
            )
        )
    rows.append(
        Row(
            "window bound",
            "upperRange('ab', MAX)",
            "617fffffffffffffff7fffffff",
            partial(codecs.window_upper_range, b"ab", 2**63 - 1),
            partial(codecs.ordered_upper_range, b"ab", bytes.fromhex("7fffffffffffffff7fffffff")),
            lambda b: b[:1],
            b"a",
        )
    )
    rows.append(
        Row(
            "session key",
            "'key' [1000,5000]",
            "6b6579000000000000138800000000000003e8",
            partial(codecs.session_key, b"key", 1000, 5000),
            lambda: codecs.session_keys([b"key"], [1000], [5000])[0],
            codecs.extract_session_key,
            (b"key", 1000, 5000),
        )
    )
    for text, h in MURMUR2:
        data = text.encode()
        expected = (h & 0xFFFFFFFF).to_bytes(4, "big").hex()
        rows.append(
            Row(
                "murmur2",
                text[:24],
                expected,
                partial(_murmur_bytes, data),
                partial(_murmur_bytes, data),
                partial(_murmur_batch_agrees, data),
                True,
            )
        )
    return rows


def run_codec_demo(out: Callable[[str], None] = print) -> int:
    """Check every codec row and print the table; return the number of failed rows."""
    rows = _rows()
    failed = 0
    out(f"{'codec':<19} {'case':<32} {'bytes (hex)':<42} {'kafka':<6} result")
    out("-" * 112)
    for row in rows:
        single, batch = row.single(), row.batch()
        ok_bytes = single.hex() == row.expected_hex and batch.hex() == row.expected_hex
        ok_round = row.decode(single) == row.decoded
        failed += not (ok_bytes and ok_round)
        status = (
            "ok"
            if ok_bytes and ok_round
            else ("BYTES DIFFER" if not ok_bytes else "DECODE DIFFERS")
        )
        same = "same" if ok_bytes else "DIFF"
        out(f"{row.codec:<19} {row.case:<32} {single.hex():<42} {same:<6} {status}")
    out("-" * 112)
    out(f"{len(rows) - failed} of {len(rows)} codec checks match Kafka's bytes and round-trip")

    n = 100_000
    keys = [b"user-%010d" % i for i in range(n)]
    tss = [1_700_000_000_000 + i for i in range(n)]
    t0 = time.perf_counter()
    single_keys = [codecs.window_key(k, t, 0) for k, t in zip(keys, tss, strict=True)]
    t1 = time.perf_counter()
    batch_keys = codecs.window_keys(keys, tss)
    t2 = time.perf_counter()
    identical = single_keys == batch_keys
    failed += not identical
    out(
        f"{n:,} window keys: single path {1e9 * (t1 - t0) / n:.0f} ns/key, "
        f"C batch {1e9 * (t2 - t1) / n:.0f} ns/key, identical output: {identical}"
    )
    return failed


def main(argv: list[str] | None = None) -> int:
    failed = run_codec_demo()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
