"""``txstore demo``: the project's main job, run by ``make demo``.

Today it checks every codec against Kafka's own test vectors and the worked examples of
``docs/formats.md``: each row encodes the input with the C batch path and with the single-item
path, compares both with the bytes Kafka Streams produces, decodes them back and prints the
outcome. It then times the batch path against the single-item path on 100,000 window keys.
It exits non-zero if any row fails.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from txstore import codecs
from txstore.codecs import ValueFormat
from txstore.types import Headers


@dataclass(frozen=True)
class Row:
    codec: str
    case: str
    expected_hex: str
    single: Callable[[], bytes]
    batch: Callable[[], bytes]
    decode: Callable[[bytes], object]
    decoded: object


def _first(xs: list[bytes | None]) -> bytes:
    x = xs[0]
    assert x is not None
    return x


def _rows() -> list[Row]:
    rows: list[Row] = []
    # Kafka ByteUtilsTest.assertVarintSerde vectors.
    for value, hx in [(0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"),
                      (-65, "8101"), (8191, "fe7f"), (-8192, "ff7f"), (8192, "808001"),
                      (-8193, "818001"), (1048575, "feff7f"), (-1048576, "ffff7f"),
                      (1048576, "80808001"), (-1048577, "81808001"), (134217727, "feffff7f")]:  # fmt: skip
        rows.append(
            Row("varint", str(value), hx,
                lambda v=value: codecs.encode_varint(v),
                lambda v=value: codecs.encode_varints([v]),
                lambda b: codecs.decode_varint(b)[0], value)
        )  # fmt: skip
    hs = Headers([("a", None), ("bc", b"\x01\x02")])
    rows.append(
        Row("headers", "[a=null, bc=0102]", "04026101046263040102",
            lambda: codecs.encode_headers(hs), lambda: codecs.encode_headers(hs),
            codecs.decode_headers, hs)
    )  # fmt: skip
    hv = codecs.encode_headers([("k", b"v")])
    cases = [
        ("timestamped", ValueFormat.TIMESTAMPED, b"val", 1000, b"", "00000000000003e876616c"),
        ("ts+headers", ValueFormat.HEADERS, b"val", 1000, hv, "0a02026b027600000000000003e876616c"),
        ("ts+headers", ValueFormat.HEADERS, b"v", 100, b"", "00000000000000006476"),
        ("plain+headers", ValueFormat.PLAIN_HEADERS, b"\x00\x00\x00\x05",
         -1, codecs.encode_headers([("a", None)]), "080202610100000005"),
    ]  # fmt: skip
    for name, fmt, value, ts, hb, hx in cases:
        rows.append(
            Row("value " + name, f"{value.hex()} ts={ts}", hx,
                lambda f=fmt, v=value, t=ts, h=hb: codecs.pack_value(f, v, t, h),
                lambda f=fmt, v=value, t=ts, h=hb: _first(codecs.records_to_values(f, [v], [t], [h])),
                lambda b, f=fmt: codecs.split_value(f, b), (value, None if fmt == ValueFormat.PLAIN_HEADERS else ts, hb))
        )  # fmt: skip
    rows.append(
        Row("convert", "plain -> ts+headers", "00ffffffffffffffff76",
            lambda: codecs.convert_value(b"v", ValueFormat.PLAIN, ValueFormat.HEADERS) or b"",
            lambda: _first(codecs.convert_values([b"v"], ValueFormat.PLAIN, ValueFormat.HEADERS)),
            lambda b: codecs.convert_value(b, ValueFormat.HEADERS, ValueFormat.PLAIN), b"v")
    )  # fmt: skip
    for key, ts, seq, hx in [(b"a", 1000, 1, "6100000000000003e800000001"),
                             (b"key", 1700000000000, 7, "6b65790000018bcfe5680000000007"),
                             (b"\x00\x00\x00\x01", 60000, 0, "00000001000000000000ea6000000000")]:  # fmt: skip
        rows.append(
            Row("window key", f"{key.hex()} ts={ts} seq={seq}", hx,
                lambda k=key, t=ts, s=seq: codecs.window_key(k, t, s),
                lambda k=key, t=ts, s=seq: codecs.window_keys([k], [t], [s])[0],
                codecs.extract_window_key, (key, ts, seq))
        )  # fmt: skip
    rows.append(
        Row("window bound", "upperRange('ab', MAX)", "617fffffffffffffff7fffffff",
            lambda: codecs.window_upper_range(b"ab", 2**63 - 1),
            lambda: codecs.window_upper_range(b"ab", 2**63 - 1),
            lambda b: b[:1], b"a")
    )  # fmt: skip
    rows.append(
        Row("session key", "'key' [1000,5000]", "6b6579000000000000138800000000000003e8",
            lambda: codecs.session_key(b"key", 1000, 5000),
            lambda: codecs.session_keys([b"key"], [1000], [5000])[0],
            codecs.extract_session_key, (b"key", 1000, 5000))
    )  # fmt: skip
    # Kafka UtilsTest.testMurmur2 vectors (the hash as 4 big-endian bytes).
    for text, h in [("21", -973932308), ("foobar", -790332482),
                    ("a-little-bit-long-string", -985981536),
                    ("a-little-bit-longer-string", -1486304829),
                    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
                    ("abc", 479470107)]:  # fmt: skip
        data = text.encode()
        rows.append(
            Row("murmur2", text[:24], (h & 0xFFFFFFFF).to_bytes(4, "big").hex(),
                lambda d=data: (codecs.murmur2(d) & 0xFFFFFFFF).to_bytes(4, "big"),
                lambda d=data: (codecs.murmur2(d) & 0xFFFFFFFF).to_bytes(4, "big"),
                lambda b, d=data: codecs.partitions_for_keys([d], 1 << 30)[0] == (int.from_bytes(b, "big") & 0x7FFFFFFF) % (1 << 30),
                True)
        )  # fmt: skip
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
        status = "ok" if ok_bytes and ok_round else ("BYTES DIFFER" if not ok_bytes else "DECODE DIFFERS")
        out(f"{row.codec:<19} {row.case:<32} {single.hex():<42} {'same' if ok_bytes else 'DIFF':<6} {status}")  # fmt: skip
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
    same = single_keys == batch_keys
    failed += not same
    out(
        f"{n:,} window keys: single path {1e9 * (t1 - t0) / n:.0f} ns/key, "
        f"C batch {1e9 * (t2 - t1) / n:.0f} ns/key, identical output: {same}"
    )
    return failed


def main(argv: list[str] | None = None) -> int:
    failed = run_codec_demo()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
