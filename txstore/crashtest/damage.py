"""Damage to a partition's files: which files, which kinds of damage, and the file hashes the
healthy-store rule compares.

A partition directory (a task's) holds the LMDB environment of every store (``data/data.mdb``;
``data/lock.mdb`` is not damaged: LMDB rebuilds it), one changelog directory per store
(``changelog/<store>/``: segment files ``<base>.log`` and the metadata ``changelog.json``, plus
what a crash can leave: compaction outputs ``*.cleaned`` and ``changelog.json.tmp``) and, while
uncommitted writes are spilled, the disposable spill environment (``spill/data.mdb``). Lock
files (``writer.lock``, ``lock.mdb``) hold no data and are left alone.

:func:`damage_targets` lists the files that can be damaged, each with its **file type**:

============== ===============================================================
file type      files
============== ===============================================================
data.mdb       ``data/data.mdb``: every store's committed data and offsets
active segment the last segment of a store's changelog (the one appended to)
segment        the other segments of a store's changelog
changelog.json a changelog's metadata
temporary      ``*.cleaned``, ``changelog.json.tmp`` (left by a crash)
spill          ``spill/data.mdb`` (uncommitted writes, discarded at open)
============== ===============================================================

:func:`plan_damage` draws one damage: a file type (uniformly among the types present: a long
run has thousands of segments and one ``data.mdb``), a file of that type, a kind and a byte:

* ``flip``: XOR one byte at the offset (sometimes up to three more within the next 64 bytes)
  with a random non-zero mask;
* ``truncate``: cut the file at the offset (a random length shorter than the file);
* ``zero_page``: overwrite the 4 KiB page holding the offset with zeros (LMDB's page size);
* ``delete``: remove the file.

Half the damages drawn for ``data.mdb`` go inside a *live entry* instead (:data:`LIVE_KINDS`,
given the entries :func:`live_entries` lists): a store is drawn uniformly (so every store kind
is hit: key-value, window and session segments and registries, the position store), then one
of its committed entries, then one byte of its key (``flip_key``) or of its stored value,
checksum trailer included (``flip_value``), XOR-ed with a random non-zero mask at every place
the file holds that entry (LMDB keeps copies of pages it freed; the live one is among them).

The damage is recorded exactly (positions and masks), so :func:`apply_damage` can repeat it.

>>> import random
>>> d = plan_damage(random.Random(1), [Target("changelog/a/00000000000000000000.log",
...                 "active segment", "a")], {"changelog/a/00000000000000000000.log": 10_000})
>>> d.file, d.kind in KINDS, 0 <= (d.offset or 0) < 10_000
('changelog/a/00000000000000000000.log', True, True)
"""

from __future__ import annotations

import hashlib
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "ALL_KINDS",
    "FILE_TYPES",
    "KINDS",
    "LIVE_KINDS",
    "PAGE",
    "Damage",
    "Entry",
    "Target",
    "apply_damage",
    "damage_targets",
    "hash_files",
    "live_entries",
    "plan_damage",
    "store_files",
]

#: The file types, in report order.
FILE_TYPES = ("data.mdb", "active segment", "segment", "changelog.json", "temporary", "spill")
#: The kinds of damage, in report order.
KINDS = ("flip", "truncate", "zero_page", "delete")
#: The kinds of damage inside a live entry of ``data.mdb``.
LIVE_KINDS = ("flip_value", "flip_key")
#: Every kind, in report order.
ALL_KINDS = KINDS + LIVE_KINDS
#: The page ``zero_page`` zeroes (LMDB's page size on Linux and macOS).
PAGE = 4096

_LOCKS = ("writer.lock", "lock.mdb")


@dataclass(frozen=True)
class Target:
    """A file that can be damaged: its path relative to the partition, its file type and the
    store whose file it is (``None``: the shared LMDB environment or the spill)."""

    file: str
    file_type: str
    store: str | None


@dataclass
class Damage:
    """One damage, exactly: ``offset`` is the byte drawn (``None`` for ``delete``), ``length``
    the bytes it touched (``truncate``: the bytes cut off), ``size`` the file's size before,
    ``flips`` the ``(position, mask)`` pairs XOR-ed, ``changed`` whether the file differs
    afterwards (zeroing a page of zeros changes nothing)."""

    file: str
    file_type: str
    store: str | None
    kind: str
    offset: int | None
    length: int
    size: int
    flips: list[tuple[int, int]] = field(default_factory=list)
    changed: bool = True
    entry: str | None = None  # a live-entry damage: the database and key (hex) it hit

    def describe(self) -> str:
        where = "" if self.offset is None else f" at byte {self.offset:,}"
        what = {
            "flip": f"{len(self.flips)} byte(s) flipped",
            "truncate": f"truncated to {self.offset or 0:,} of {self.size:,} bytes",
            "zero_page": f"{self.length:,} bytes zeroed",
            "delete": "deleted",
            "flip_value": f"{len(self.flips)} copies of a value byte flipped ({self.entry})",
            "flip_key": f"{len(self.flips)} copies of a key byte flipped ({self.entry})",
        }[self.kind]
        note = "" if self.changed else " (no change: the bytes were already so)"
        return f"{self.file} ({self.file_type}): {self.kind}{where}, {what}{note}"


def damage_targets(partition: Path) -> list[Target]:
    """Every file of ``partition`` that :func:`plan_damage` may damage (see the module
    docstring), sorted by path."""
    out: list[Target] = []
    data = partition / "data" / "data.mdb"
    if data.is_file():
        out.append(Target("data/data.mdb", "data.mdb", None))
    spill = partition / "spill"
    if spill.is_dir():
        out += [
            Target(f"spill/{f.name}", "spill", None)
            for f in sorted(spill.iterdir())
            if f.is_file() and f.name not in _LOCKS
        ]
    changelogs = partition / "changelog"
    if changelogs.is_dir():
        for store_dir in sorted(p for p in changelogs.iterdir() if p.is_dir()):
            out += _changelog_targets(store_dir, f"changelog/{store_dir.name}")
    return out


def _changelog_targets(store_dir: Path, rel: str) -> list[Target]:
    store = store_dir.name
    names = sorted(f.name for f in store_dir.iterdir() if f.is_file() and f.name not in _LOCKS)
    segments = [n for n in names if n.endswith(".log") and n[:-4].isdigit()]
    out = []
    for name in names:
        if name in segments:
            kind = "active segment" if name == segments[-1] else "segment"
        elif name == "changelog.json":
            kind = "changelog.json"
        else:
            kind = "temporary"
        out.append(Target(f"{rel}/{name}", kind, store))
    return out


@dataclass(frozen=True)
class Entry:
    """A committed entry of ``data.mdb`` as LMDB stores it: database, key, stored value."""

    db: bytes
    key: bytes
    value: bytes


def live_entries(partition: Path) -> list[Entry]:
    """Every entry of every store database of ``partition``'s ``data.mdb`` (the metadata
    database aside), read with py-lmdb (read-only, no lock: a copy no one else opens); empty
    when it cannot be read."""
    import lmdb  # only here: the rest of the harness goes through txstore

    out: list[Entry] = []
    try:
        env = lmdb.open(
            str(partition / "data"), readonly=True, lock=False, max_dbs=4096, subdir=True
        )
    except lmdb.Error:
        return out
    try:
        with env.begin() as txn:
            names = [k for k in txn.cursor().iternext(values=False) if k != b"__txstore_meta__"]
            for name in names:
                db = env.open_db(name, txn=txn, create=False)
                out += [Entry(name, k, v) for k, v in txn.cursor(db).iternext()]
    except lmdb.Error:
        return []
    finally:
        env.close()
    return out


def _store_of(db: bytes) -> bytes:
    """The store of a database name: ``<store>`` or ``<store>.<segment id>``."""
    store, dot, rest = db.rpartition(b".")
    return store if dot and rest.isdigit() else db


def _plan_live(
    rng: random.Random, target: Target, size: int, entries: list[Entry], data: bytes
) -> Damage | None:
    """A flip inside a live entry (see the module docstring), or None if none can be found."""
    stores = sorted({_store_of(e.db) for e in entries})
    store = rng.choice(stores)
    dbs = sorted({e.db for e in entries if _store_of(e.db) == store})
    db = rng.choice(dbs)
    entry = rng.choice([e for e in entries if e.db == db])
    kind = rng.choice(LIVE_KINDS)
    node = entry.key + entry.value  # an LMDB leaf node holds the key, then the value
    spot = rng.randrange(len(entry.key)) if kind == "flip_key" else len(entry.key)
    if kind == "flip_value":
        if not entry.value:
            return None
        spot += rng.randrange(len(entry.value))
    mask = rng.randrange(1, 256)
    flips = []
    at = data.find(node)
    while at >= 0:
        flips.append((at + spot, mask))
        at = data.find(node, at + 1)
    if not flips:
        return None  # a value on overflow pages: not next to its key
    what = f"{db.decode(errors='replace')} key {entry.key.hex()}"
    return Damage(
        target.file, target.file_type, None, kind, flips[0][0], len(flips), size, flips,
        entry=what,
    )  # fmt: skip


def plan_damage(
    rng: random.Random,
    targets: list[Target],
    sizes: dict[str, int],
    entries: list[Entry] | None = None,
    data: bytes = b"",
) -> Damage:
    """Draw one damage to one of ``targets`` (``sizes``: their sizes in bytes); with the live
    ``entries`` of ``data.mdb`` (and its bytes, ``data``), half the damages to ``data.mdb``
    go inside one of them."""
    present = [t for t in FILE_TYPES if any(x.file_type == t for x in targets)]
    file_type = rng.choice(present)
    target = rng.choice([x for x in targets if x.file_type == file_type])
    size = sizes[target.file]
    if file_type == "data.mdb" and entries and rng.random() < 0.5:
        live = _plan_live(rng, target, size, entries, data)
        if live is not None:
            return live
    kind = rng.choice(KINDS) if size > 0 else "delete"
    if kind == "delete":
        return Damage(target.file, file_type, target.store, kind, None, size, size)
    offset = rng.randrange(size)
    if kind == "truncate":
        return Damage(target.file, file_type, target.store, kind, offset, size - offset, size)
    if kind == "zero_page":
        start = offset - offset % PAGE
        return Damage(
            target.file, file_type, target.store, kind, offset, min(PAGE, size - start), size
        )
    positions = {offset}
    if rng.random() < 0.3:
        positions |= {
            min(offset + rng.randrange(1, 64), size - 1) for _ in range(rng.randint(1, 3))
        }
    flips = [(p, rng.randrange(1, 256)) for p in sorted(positions)]
    return Damage(target.file, file_type, target.store, kind, offset, len(flips), size, flips)


def apply_damage(partition: Path, damage: Damage) -> None:
    """Do ``damage`` to its file in ``partition``; sets :attr:`Damage.changed`."""
    path = partition / damage.file
    if damage.kind == "delete":
        path.unlink()
        return
    if damage.kind == "truncate":
        os.truncate(path, damage.offset or 0)
        return
    with open(path, "r+b") as f:
        if damage.kind == "zero_page":
            start = (damage.offset or 0) - (damage.offset or 0) % PAGE
            f.seek(start)
            old = f.read(damage.length)
            damage.changed = old != bytes(len(old))
            f.seek(start)
            f.write(bytes(len(old)))
        else:  # flip, flip_value, flip_key
            for position, mask in damage.flips:
                f.seek(position)
                byte = f.read(1)[0]
                f.seek(position)
                f.write(bytes([byte ^ mask]))


def store_files(partition: Path, stores: list[str]) -> list[str]:
    """The files of the changelogs of ``stores`` (relative paths; lock files excluded)."""
    out = []
    for store in stores:
        store_dir = partition / "changelog" / store
        if store_dir.is_dir():
            out += [
                f"changelog/{store}/{f.name}"
                for f in sorted(store_dir.iterdir())
                if f.is_file() and f.name not in _LOCKS
            ]
    return out


def hash_files(partition: Path, files: list[str]) -> dict[str, str | None]:
    """The SHA-256 of each of ``files`` in ``partition`` (``None``: absent)."""
    out: dict[str, str | None] = {}
    for rel in files:
        try:
            out[rel] = hashlib.sha256((partition / rel).read_bytes()).hexdigest()
        except FileNotFoundError:
            out[rel] = None
    return out
