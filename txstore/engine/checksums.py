"""Entry checksums: every value a checksummed partition stores in LMDB carries a 4-byte CRC32C
trailer over its key and value (``value || LE32(crc32c(key || value))``, ``docs/formats.md``),
so the Kafka-format bytes above it stay byte-for-byte Kafka's.

C does the work (``csrc/checksums.c``, the ``txstore._checksums``
extension): :func:`seal_rows` adds the trailers to the rows a write transaction is about to
put (the write-through path, spilled overlays; :func:`sort_rows` sorts an overlay's memory tier
and seals it in the same pass), and :func:`unseal` / :func:`unseal_rows`
check and strip them on every read of committed data (gets, range reads, scan chunks, in the
writer's read transaction, short shared ones, atomic reads and snapshots). A mismatch raises
:class:`ChecksumError` from C; the engine turns it into :func:`damaged_entry`, a
:class:`~txstore.errors.DamagedFileError` naming the partition, the store's database, the key in
hex and ``data.mdb``. A read never returns a value whose trailer does not match.

Which partitions carry checksums is recorded in their metadata database: the key
:data:`FLAG_KEY` is written in the same transaction that creates a new partition (unless it is
opened with ``checksums=False``). A partition created before checksums existed has no flag and
is read and written as before (*legacy*), until :meth:`Partition.add_checksums
<txstore.engine.partition.Partition.add_checksums>` (``txstore check --repair``) seals every
entry and sets the flag in one write transaction. The metadata database itself (store metadata
JSON and committed offsets) is not sealed: it is read through its own parsers, which refuse
what they cannot read.

>>> stored = seal(b"k", b"value")
>>> stored[:-4], len(stored)
(b'value', 9)
>>> unseal(b"k", stored)
b'value'
>>> unseal(b"j", stored)
Traceback (most recent call last):
...
txstore._checksums.ChecksumError: (b'j', 'checksum mismatch')
>>> hex(crc32c(b"123456789"))  # the CRC32C check value
'0xe3069283'
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Final

from txstore._checksums import (
    ChecksumError,
    crc32c,
    decode_columns,
    hardware,
    kv_getter,
    restore_frames,
    restore_rows,
    seal,
    seal_rows,
    set_hardware,
    sort_columns,
    sort_rows,
    unseal,
    unseal_rows,
)
from txstore.errors import DamagedFileError, InvalidArgumentError

__all__ = [
    "DAMAGE_FILE",
    "FLAG_KEY",
    "FLAG_VALUE",
    "TRAILER",
    "ChecksumError",
    "clear_damage",
    "crc32c",
    "damaged_entry",
    "decode_columns",
    "frame_records",
    "hardware",
    "kv_getter",
    "record_damage",
    "recorded_damage",
    "restore_frames",
    "restore_rows",
    "seal",
    "seal_rows",
    "set_hardware",
    "sort_columns",
    "sort_rows",
    "unseal",
    "unseal_rows",
]

DAMAGE_FILE: Final = "damaged-stores"
"""The file, in a partition directory, listing the databases (one name a line) in which the
writer found an entry whose checksum did not match: a :class:`~txstore.runtime.task.Task`
rebuilds their stores from their changelogs at its next ``initialize()``, then deletes it."""
TRAILER: Final = 4
"""Bytes a checksum adds to each stored value."""
FLAG_KEY: Final = b"format:checksums"
"""The key, in the metadata database, whose presence says every entry carries a trailer."""
FLAG_VALUE: Final = b"crc32c-le32-key-value"
"""Its value: the algorithm and layout (CRC32C of key || value, little-endian, after the value)."""

# What each function does and costs: see the module docstring and txstore/_checksums.pyi;
# seal and unseal cost about 30 ns for a 16-byte key and a 100-byte value.


def damaged_entry(partition: str | None, db: bytes, exc: BaseException) -> DamagedFileError:
    """The error of an entry whose checksum does not match (``exc``: the :class:`ChecksumError`
    of :func:`unseal`), naming the partition, the store's database, the key (hex) and the file."""
    key, reason = exc.args if len(exc.args) == 2 else (b"", str(exc))
    path = os.path.join(partition or "", "data", "data.mdb")
    store = db.decode(errors="replace")
    return DamagedFileError(
        path,
        f"{reason} in partition {partition!r}, store database {store!r}, key "
        f"{bytes(key).hex() or '(empty)'}: the stored entry was changed after it was written",
        database=store,
        key=bytes(key),
    )


def record_damage(partition: str, db: bytes) -> None:
    """Add ``db`` to the partition's :data:`DAMAGE_FILE` (appended and synced: it outlives a
    crash that follows), once. Never raises: the read that found the damage raises its own
    error."""
    if db in recorded_damage(partition):
        return
    try:
        fd = os.open(os.path.join(partition, DAMAGE_FILE), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            os.write(fd, db + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def recorded_damage(partition: str) -> set[bytes]:
    """The databases :func:`record_damage` recorded in ``partition`` (empty: none)."""
    try:
        with open(os.path.join(partition, DAMAGE_FILE), "rb") as f:
            return {line for line in f.read().split(b"\n") if line}
    except FileNotFoundError:
        return set()


def clear_damage(partition: str) -> None:
    """Forget the recorded damage of ``partition`` (after its stores were rebuilt)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(partition, DAMAGE_FILE))


def frame_records(
    frames: list[Any],
) -> tuple[list[bytes], list[bytes | None], list[int], list[bytes]]:
    """The records of ``restore_frames``' frame slices ``(buf, pos, end, n, has_headers, lo,
    hi)``, decoded into columns (keys, values, timestamps, headers): the input of the checked
    path when the C pass refuses an item. A slice that is not one of a changelog batch raises
    :class:`~txstore.errors.InvalidArgumentError`. O(records)."""
    keys: list[bytes] = []
    values: list[bytes | None] = []
    stamps: list[int] = []
    headers: list[bytes] = []
    for frame in frames:
        try:
            if not isinstance(frame, tuple):
                raise TypeError(f"a frame must be a tuple, got {type(frame).__name__}")
            buf, pos, end, n, has_headers, lo, hi = frame
            cols = decode_columns(buf, pos, end, n, has_headers, False)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"restore: not a changelog batch: {exc}") from None
        if not 0 <= lo <= hi <= n:
            raise InvalidArgumentError(f"restore: records [{lo}, {hi}) of {n}")
        keys += cols[1][lo:hi]
        values += cols[2][lo:hi]
        stamps += cols[0][lo:hi]
        headers += cols[3][lo:hi]
    return keys, values, stamps, headers
