"""The per-record columns of a changelog batch, as ``decode_batch`` cuts them in C
(``decode_columns``, csrc/changelog_columns.c): what ``batch_frame`` encoded comes back item
for item, and columns that do not add up to the body raise ``ValueError`` (which the readers
report as a ``ChangelogCorruptionError`` naming the file and offset)."""

from __future__ import annotations

import os
import random
import struct
import zlib
from pathlib import Path

import pytest

from txstore.changelog.format import (
    BATCH_FIXED_SIZE,
    F_HEADERS,
    F_SPARSE,
    HEADER_SIZE,
    T_BATCH,
    Frame,
    FrameReader,
    batch_frame,
    decode_batch,
)
from txstore.changelog.log import FileChangelog
from txstore.errors import ChangelogCorruptionError


def frame_of(
    keys: list[bytes],
    values: list[bytes | None],
    stamps: list[int],
    headers: list[bytes],
    offsets: list[int] | None = None,
    base: int = 7,
) -> Frame:
    parts = batch_frame(
        3,
        base,
        keys,
        values,
        stamps,
        headers,
        tombstones=None in values,
        has_headers=any(headers),
        max_timestamp=max(stamps),
        offsets=offsets,
    )
    flags = (F_SPARSE if offsets is not None else 0) | (F_HEADERS if any(headers) else 0)
    body = b"".join(parts[1:])
    pad = b"\xee" * 5  # the body sits inside a larger read buffer
    return Frame(0, T_BATCH, flags, 3, pad + body + pad, len(pad), len(body), True)


def records(
    seed: int, n: int, *, tombstones: bool, headers: bool
) -> tuple[list[bytes], list[bytes | None], list[int], list[bytes]]:
    rng = random.Random(seed)
    keys = [rng.randbytes(rng.randrange(1, 40)) for _ in range(n)]
    values: list[bytes | None] = [rng.randbytes(rng.randrange(0, 300)) for _ in range(n)]
    if tombstones:
        for i in rng.sample(range(n), n // 3):
            values[i] = None
    stamps = [rng.randrange(-(2**63), 2**63) for _ in range(n)]
    stamps[0] = -1
    hdrs = [rng.randbytes(rng.randrange(0, 20)) if headers else b"" for _ in range(n)]
    if headers:
        hdrs[0] = b"\x01h"  # at least one non-empty: the batch has a headers column
    return keys, values, stamps, hdrs


@pytest.mark.parametrize("tombstones", [False, True])
@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize("n", [1, 2, 333])
def test_columns_come_back_as_encoded(n: int, tombstones: bool, headers: bool) -> None:
    keys, values, stamps, hdrs = records(
        n * 4 + tombstones * 2 + headers, n, tombstones=tombstones, headers=headers
    )
    cols = decode_batch(frame_of(keys, values, stamps, hdrs))
    assert list(cols.offsets) == list(range(7, 7 + n))
    assert cols.keys == keys
    assert cols.values == values
    assert list(cols.timestamps) == stamps
    assert list(cols.headers) == hdrs
    live = [v for v in values if v is not None]
    assert cols.nbytes == sum(map(len, keys)) + sum(map(len, live)) + sum(map(len, hdrs))
    only = decode_batch(frame_of(keys, values, stamps, hdrs), keys_only=True)
    assert (only.keys, only.values, list(only.headers), only.nbytes) == (keys, [], [], 0)


def test_sparse_batch_and_empty_values() -> None:
    keys = [b"a", b"b", b"a"]
    values: list[bytes | None] = [b"", None, b"xyz"]
    cols = decode_batch(frame_of(keys, values, [1, 2, 3], [b""] * 3, offsets=[10, 12, 19], base=10))
    assert list(cols.offsets) == [10, 12, 19]
    assert (cols.keys, cols.values, list(cols.timestamps)) == (keys, values, [1, 2, 3])


def patched(frame: Frame, column: int, index: int, fmt: str, value: int) -> Frame:
    """``frame`` with item ``index`` of length column ``column`` (0 keys, 1 values, 2 headers)
    replaced."""
    n = struct.unpack_from("<i", frame.buf, frame.boff + 8)[0]
    pos = frame.boff + BATCH_FIXED_SIZE + 8 * n + 4 * n * column + 4 * index
    buf = bytearray(frame.buf)
    struct.pack_into(fmt, buf, pos, value)
    return Frame(0, T_BATCH, frame.flags, 3, bytes(buf), frame.boff, frame.blen, True)


@pytest.mark.parametrize(
    ("column", "fmt", "value"),
    [
        (1, "<i", -2),  # a value length below -1
        (1, "<i", -(2**31)),
        (0, "<I", 2**32 - 1),  # a key length running past the body (and overflowing 32 bits)
        (0, "<I", 0),  # the keys short of the body
        (2, "<I", 2**31),  # a headers length past the body
    ],
)
def test_columns_not_adding_up_raise_value_error(column: int, fmt: str, value: int) -> None:
    keys, values, stamps, hdrs = records(5, 40, tombstones=True, headers=True)
    frame = patched(frame_of(keys, values, stamps, hdrs), column, 17, fmt, value)
    with pytest.raises(ValueError, match="do not add up"):
        decode_batch(frame)
    with pytest.raises(ValueError, match="do not add up"):
        decode_batch(frame, keys_only=True)


@pytest.mark.parametrize("read", ["read_committed", "read_committed_frames"])
def test_a_batch_with_a_valid_checksum_but_bad_columns_is_corruption(
    tmp_path: Path, read: str
) -> None:
    """A record batch whose checksum matches but whose value lengths do not add up (a writer
    bug, a crafted file): reading the records, or the restore's frames of them (checked by
    ``column_bytes`` without decoding), raises ChangelogCorruptionError naming the segment
    and the batch, and the file is not changed."""
    log_dir = tmp_path / "log"
    with FileChangelog(log_dir, fsync=False) as log:
        log.append_many([(b"k%d" % i, None if i % 3 else b"v" * i, 10 + i) for i in range(9)])
        log.commit(1)
    seg = log_dir / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    fd = os.open(seg, os.O_RDONLY)
    try:
        reader = FrameReader(fd)
        frame = reader.next()
        while isinstance(frame, Frame) and frame.ftype != T_BATCH:
            frame = reader.next()
    finally:
        os.close(fd)
    assert isinstance(frame, Frame)
    start = frame.pos + HEADER_SIZE + BATCH_FIXED_SIZE + 8 * 9 + 4 * 9  # the value lengths
    struct.pack_into("<i", data, start + 4 * 4, -2)
    end = frame.pos + HEADER_SIZE + frame.blen
    data[frame.pos + 4 : frame.pos + 8] = zlib.crc32(data[frame.pos + 8 : end]).to_bytes(
        4, "little"
    )
    seg.write_bytes(bytes(data))
    with (
        FileChangelog(log_dir, fsync=False, readonly=True) as log,
        pytest.raises(ChangelogCorruptionError, match="malformed record batch") as err,
        getattr(log, read)(0) as it,
    ):
        list(it)
    assert err.value.path == str(seg)
    assert seg.read_bytes() == bytes(data)
