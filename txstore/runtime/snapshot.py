"""Consistent snapshots: an immutable copy of partitions at one commit each, plus a manifest.

A snapshot is what a Spark cluster (or a backup, or another host) reads: the live LMDB
environment of a partition may only be read on its own host, by processes that can write its
lock file, and its content moves with every commit. A snapshot directory has the layout of a
state directory (:mod:`txstore.runtime.statedir`) plus a manifest::

    <dest>/
        manifest.json       stores, configurations, committed offsets, partitions (JSON)
        0/data/data.mdb     partition 0, compacted LMDB copy (read-only file)
        0/data/lock.mdb     its own lock file, created at snapshot time
        1/data/...

A snapshot of a single partition (:func:`snapshot_partition`, ``Database.snapshot``) is a
partition directory itself (``<dest>/data/data.mdb`` and ``<dest>/manifest.json``), so
``txstore.open(dest, readonly=True)`` opens it.

**Consistency.** Each partition is copied with LMDB's compacting copy *inside one read
transaction* (``env.copy(dst, compact=True, txn=t)``); the store metadata, committed offsets and
entry counts written to the manifest are read in that same transaction, so the manifest
describes the copy exactly: the copy holds every commit up to the recorded offsets and nothing
after. Partitions are independent environments and are cut one after another (as Kafka tasks
commit independently); each partition's cut is exact. The copy never blocks the writer, which
keeps committing while it runs (the read transaction pins the pages it copies).

**Atomicity.** A snapshot is built in a hidden sibling directory, checked (every copy is opened
read-only and its offsets and entry counts compared with the manifest), synced to disk, and
renamed to ``dest`` at the end: a crash or an error never leaves a partial snapshot at ``dest``.

**Opening.** A snapshot is immutable: ``data.mdb`` and ``manifest.json`` are made read-only
(mode 0444), so an accidental writable open fails. Readers open it read-only; LMDB then writes
only the snapshot's own ``lock.mdb``, which the snapshot ships, already created and writable.
No process ever writes a snapshot, so reading it from several hosts (a shared filesystem) is
safe.

>>> import tempfile, os, txstore
>>> src, dst = tempfile.mkdtemp(), os.path.join(tempfile.mkdtemp(), "snap")
>>> with txstore.open(src) as db:
...     kv = db.key_value_store("kv", txstore.Serdes.string(), txstore.Serdes.long())
...     kv.put("a", 1)
...     db.commit({"kv": 7})
...     m = snapshot_partition(db.partition, dst)
>>> m.partitions[0].stores["kv"].committed_offset, m.partitions[0].stores["kv"].entries
(7, 1)
>>> with txstore.open(dst, readonly=True) as snap:
...     snap.store_names()
['kv']
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import stat
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from txstore.engine.base import PartitionBase, Snapshot
from txstore.engine.iterators import KeyRange
from txstore.engine.partition import Partition
from txstore.engine.replayed import ReplayedPartition, write_tail
from txstore.errors import InvalidArgumentError, InvalidTypeError, StorageError
from txstore.runtime.committed import open_committed
from txstore.runtime.statedir import partition_dirs
from txstore.version import __version__

__all__ = [
    "MANIFEST_NAME",
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_VERSION",
    "Manifest",
    "PartitionCut",
    "SnapshotProgress",
    "StoreCut",
    "begin_cut",
    "is_snapshot",
    "read_manifest",
    "remove_snapshot",
    "snapshot_partition",
    "snapshot_state_dir",
    "store_databases",
]

MANIFEST_NAME: Final = "manifest.json"
SNAPSHOT_FORMAT: Final = "txstore-snapshot"
SNAPSHOT_VERSION: Final = 1

_SEGMENT_ID: Final = struct.Struct(">q")

#: How often :func:`begin_cut` retries when the store metadata changes while it begins.
_CUT_ATTEMPTS: Final = 50


# -- cuts: what one read transaction of a partition holds -----------------------------------------


@dataclass(frozen=True)
class StoreCut:
    """One store of one partition at one commit: its metadata, offset and entry count."""

    meta: Mapping[str, Any]
    committed_offset: int | None
    entries: int

    def to_json(self) -> dict[str, Any]:
        return {
            "meta": dict(self.meta),
            "committed_offset": self.committed_offset,
            "entries": self.entries,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> StoreCut:
        offset = obj["committed_offset"]
        return cls(dict(obj["meta"]), None if offset is None else int(offset), int(obj["entries"]))


@dataclass(frozen=True)
class PartitionCut:
    """A partition at one LMDB transaction: every store's :class:`StoreCut`.

    ``lmdb_txnid`` is the id of the LMDB transaction the cut was read in (of the *source*
    environment for a snapshot): two read transactions of one environment with the same id see
    the same bytes. ``path`` is the partition directory (relative to the snapshot root inside a
    manifest: ``"0"``, or ``"."`` for a single-partition snapshot); ``data_bytes`` is the size
    of the copied ``data.mdb`` (0 for a live cut).
    """

    partition: int
    path: str
    lmdb_txnid: int
    stores: Mapping[str, StoreCut]
    data_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "path": self.path,
            "lmdb_txnid": self.lmdb_txnid,
            "data_bytes": self.data_bytes,
            "stores": {name: cut.to_json() for name, cut in sorted(self.stores.items())},
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> PartitionCut:
        return cls(
            partition=int(obj["partition"]),
            path=str(obj["path"]),
            lmdb_txnid=int(obj["lmdb_txnid"]),
            stores={name: StoreCut.from_json(s) for name, s in obj["stores"].items()},
            data_bytes=int(obj.get("data_bytes", 0)),
        )


@dataclass(frozen=True)
class Manifest:
    """What a snapshot holds; written as ``manifest.json`` at its root.

    ``kind`` is ``"state_dir"`` (one subdirectory per partition) or ``"partition"`` (the
    snapshot is itself a partition directory). ``source`` is the absolute path that was copied.
    """

    kind: str
    snapshot_id: str
    created_at: str
    source: str
    partitions: tuple[PartitionCut, ...]
    txstore_version: str = ""
    root: str = field(default="", compare=False)

    def store_names(self) -> list[str]:
        """Every store name found in any partition, sorted."""
        return sorted({name for p in self.partitions for name in p.stores})

    def partition(self, number: int) -> PartitionCut:
        """The cut of partition ``number``; ``InvalidArgumentError`` if the snapshot lacks it."""
        for p in self.partitions:
            if p.partition == number:
                return p
        have = ", ".join(str(p.partition) for p in self.partitions) or "none"
        raise InvalidArgumentError(f"snapshot has no partition {number} (partitions: {have})")

    def partition_path(self, cut: PartitionCut) -> Path:
        """The absolute directory of ``cut`` inside the snapshot at :attr:`root`."""
        return Path(self.root) / cut.path

    def to_json(self) -> dict[str, Any]:
        return {
            "format": SNAPSHOT_FORMAT,
            "version": SNAPSHOT_VERSION,
            "kind": self.kind,
            "snapshot_id": self.snapshot_id,
            "created_at": self.created_at,
            "txstore_version": self.txstore_version,
            "source": self.source,
            "partitions": [p.to_json() for p in self.partitions],
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], root: str = "") -> Manifest:
        if obj.get("format") != SNAPSHOT_FORMAT:
            raise StorageError(f"{root or 'manifest'}: not a txstore snapshot manifest")
        version = obj.get("version")
        if version != SNAPSHOT_VERSION:
            raise StorageError(
                f"{root or 'manifest'}: snapshot format version {version!r} is not supported "
                f"by this txstore (it reads version {SNAPSHOT_VERSION})"
            )
        return cls(
            kind=str(obj["kind"]),
            snapshot_id=str(obj["snapshot_id"]),
            created_at=str(obj["created_at"]),
            source=str(obj["source"]),
            partitions=tuple(PartitionCut.from_json(p) for p in obj["partitions"]),
            txstore_version=str(obj.get("txstore_version", "")),
            root=root,
        )


# -- engine access ---------------------------------------------------------------------------------
# What a cut needs beyond the engine's generic Snapshot (the LMDB transaction id, the compacting
# copy) is offered by the LMDB snapshot itself (``LmdbSnapshot.txn_id`` and ``copy_env``); both
# run inside the snapshot's own gate, so a map resize in this process cannot interleave.


def _txn_id(snap: Any) -> int:
    """The LMDB transaction id the snapshot reads (equal ids: equal bytes)."""
    txnid: int = snap.txn_id()
    return txnid


def _copy_env(partition: PartitionBase, snap: Any, dest_data: str) -> None:
    """LMDB compacting copy of exactly the transaction ``snap`` (of ``partition``) reads, into
    ``dest_data``."""
    snap.copy_env(dest_data)


def store_databases(
    partition: PartitionBase, snap: Snapshot, name: str, meta: Mapping[str, Any]
) -> list[bytes]:
    """The named databases holding the committed data of store ``name`` in ``snap``.

    From the store's metadata, as the stores record them: a key-value store has its data
    database (``<store>``, or ``<store>.<db>`` after a format upgrade) and the legacy tiers
    of an upgrade (``legacy``); a window or session store has one database per segment,
    ``<store>.<id * segment_interval>``, listed in its main database (8-byte big-endian
    segment ids, :mod:`txstore.bytestores.segments`).
    """
    kind = meta.get("kind")
    if kind in ("window", "session") and "segment_interval" in meta:
        interval = int(meta["segment_interval"])
        registry = snap.source(partition.db_name(name))
        rng = KeyRange()
        out: list[bytes] = []
        while True:
            rows, frontier = registry.read_chunk(rng, False, 1024)
            out += [
                partition.db_name(name, str(_SEGMENT_ID.unpack(k)[0] * interval)) for k, _ in rows
            ]
            if frontier is None:
                return out
            rng = rng.after(frontier, False)
    dbs = [partition.db_name(name, meta.get("db"))]
    for tier in meta.get("legacy") or ():
        dbs.append(partition.db_name(name, tier[0]))
    return dbs


def begin_cut(
    partition: Partition | ReplayedPartition, *, number: int = 0, path: str = ""
) -> tuple[Any, PartitionCut]:
    """Begin a read snapshot of ``partition`` and describe it exactly: O(stores).

    Store metadata is read just before and just after the snapshot's transaction begins; it
    only grows (new stores) or moves forward (format upgrades), so when both reads agree they
    hold the metadata of the snapshot itself. Otherwise the snapshot is discarded and the cut
    retried. Offsets and entry counts are read inside the snapshot. The caller closes the
    returned snapshot (an LMDB snapshot, with the replayed tail laid over it for a partition
    opened with :func:`~txstore.runtime.committed.open_committed`).
    """
    for _ in range(_CUT_ATTEMPTS):
        names = partition.store_names()
        metas = {n: partition.store_meta(n) for n in names}
        snap = partition.snapshot()
        try:
            if partition.store_names() != names or any(
                partition.store_meta(n) != metas[n] for n in names
            ):
                snap.close()
                continue
            stores = {}
            for n in names:
                meta = metas[n]
                if meta is None:  # pragma: no cover - names come from the metadata
                    continue
                entries = sum(snap.count(db) for db in store_databases(partition, snap, n, meta))
                stores[n] = StoreCut(meta, snap.committed_offset(n), entries)
            cut = PartitionCut(number, path or str(partition.path), _txn_id(snap), stores)
        except BaseException:
            snap.close()
            raise
        return snap, cut
    raise StorageError(
        f"store metadata of {partition.path!r} kept changing while a snapshot began "
        f"({_CUT_ATTEMPTS} attempts)"
    )


# -- snapshots -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SnapshotProgress:
    """One step of a snapshot, for progress display: partition ``index`` of ``total`` done."""

    index: int
    total: int
    partition: int
    data_bytes: int
    seconds: float


ProgressFn = Callable[[SnapshotProgress], None]


def is_snapshot(path: str | os.PathLike[str]) -> bool:
    """True if ``path`` is a snapshot directory (it holds a manifest)."""
    return os.path.isfile(os.path.join(path, MANIFEST_NAME))


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """The manifest of the snapshot at ``path``.

    ``InvalidArgumentError`` if ``path`` is not a snapshot; ``StorageError`` if its manifest is
    unreadable or of an unknown version.
    """
    root = os.path.abspath(path)
    file = os.path.join(root, MANIFEST_NAME)
    if not os.path.isfile(file):
        raise InvalidArgumentError(f"{root!r} is not a txstore snapshot (no {MANIFEST_NAME})")
    try:
        with open(file, encoding="utf-8") as f:
            obj = json.load(f)
        return Manifest.from_json(obj, root)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StorageError(f"cannot read snapshot manifest {file!r}: {exc}") from exc


def _now() -> str:
    return (
        datetime.datetime.now(datetime.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def _check_dest(dest: str | os.PathLike[str]) -> Path:
    if not isinstance(dest, (str, os.PathLike)):
        raise InvalidTypeError(f"snapshot destination must be a path, got {type(dest).__name__}")
    d = Path(os.path.abspath(dest))
    if d.exists() and (not d.is_dir() or any(d.iterdir())):
        raise InvalidArgumentError(
            f"snapshot destination {str(d)!r} exists and is not an empty directory"
        )
    if not d.parent.is_dir():
        raise InvalidArgumentError(f"parent directory of {str(d)!r} does not exist")
    return d


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_partition(
    partition: Partition | ReplayedPartition, number: int, rel: str, work: Path
) -> PartitionCut:
    """Cut ``partition`` and copy exactly that cut into ``work/rel/data``."""
    data = work / rel / "data"
    data.mkdir(parents=True)
    snap, cut = begin_cut(partition, number=number, path=rel)
    try:
        _copy_env(partition, snap, str(data))
        # A partition read as committed: the changelog tail it replayed goes into the copy.
        write_tail(snap, str(data))
    finally:
        snap.close()
    size = (data / "data.mdb").stat().st_size
    return PartitionCut(cut.partition, rel, cut.lmdb_txnid, cut.stores, size)


def _verify_copy(work: Path, cut: PartitionCut) -> None:
    """Open the copy read-only (creating its lock file) and compare it with the cut."""
    where = work / cut.path
    with Partition(where, readonly=True) as p:
        snap, copied = begin_cut(p, number=cut.partition, path=cut.path)
        snap.close()
    if dict(copied.stores) != dict(cut.stores):
        raise StorageError(
            f"snapshot copy of partition {cut.partition} does not match its source: "
            f"{copied.stores!r} != {cut.stores!r}"
        )
    data = where / "data"
    _fsync(data / "data.mdb")
    os.chmod(data / "data.mdb", stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    _fsync(data)


def _finish(work: Path, dest: Path, manifest: Manifest) -> Manifest:
    file = work / MANIFEST_NAME
    raw = json.dumps(manifest.to_json(), indent=1, sort_keys=True) + "\n"
    with open(file, "w", encoding="utf-8") as f:
        f.write(raw)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(file, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    for sub in sorted({c.path for c in manifest.partitions} - {"."}):
        _fsync(work / sub)
    _fsync(work)
    if dest.exists():
        dest.rmdir()  # empty (checked); rename cannot replace a directory on every platform
    os.rename(work, dest)
    _fsync(dest.parent)
    return Manifest(
        manifest.kind,
        manifest.snapshot_id,
        manifest.created_at,
        manifest.source,
        manifest.partitions,
        manifest.txstore_version,
        root=str(dest),
    )


@contextlib.contextmanager
def _workdir(dest: Path) -> Any:
    work = dest.parent / f".{dest.name}.tmp-{uuid.uuid4().hex[:12]}"
    work.mkdir()
    try:
        yield work
    except BaseException:
        _remove_tree(work)
        raise


def _remove_tree(path: Path) -> None:
    """Remove a snapshot tree (read-only files go with their writable directory)."""
    if path.exists():
        shutil.rmtree(path)


def _partition_number(path: str | os.PathLike[str], partition: int | None) -> int:
    if partition is not None:
        if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
            raise InvalidArgumentError(f"partition must be an int >= 0, got {partition!r}")
        return partition
    name = os.path.basename(os.path.abspath(path))
    return int(name) if name.isdigit() and name == str(int(name)) else 0


def snapshot_partition(
    source: PartitionBase | str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    partition: int | None = None,
) -> Manifest:
    """Snapshot one partition into the new directory ``dest`` (see the module docstring).

    ``source`` is an open :class:`~txstore.engine.partition.Partition` (``Database.partition``; the
    writer may keep committing meanwhile) or a partition directory, opened read-only.
    ``partition`` is the number recorded in the manifest (default: the directory name when it
    is a number, else 0). Cost: one compacting copy of the environment, O(its live pages).
    Returns the manifest (with :attr:`Manifest.root` set to ``dest``).
    """
    d = _check_dest(dest)
    p: Partition | ReplayedPartition
    if isinstance(source, PartitionBase):
        if not isinstance(source, (Partition, ReplayedPartition)):
            raise InvalidArgumentError("in-memory partitions have nothing to snapshot")
        opened: PartitionBase | None = None
        p = source
    else:
        opened, _ = open_committed(source)
        assert isinstance(opened, (Partition, ReplayedPartition))
        p = opened
    try:
        number = _partition_number(p.path or "", partition)
        with _workdir(d) as work:
            cut = _copy_partition(p, number, ".", work)
            _verify_copy(work, cut)
            manifest = Manifest(
                "partition",
                uuid.uuid4().hex,
                _now(),
                os.path.abspath(p.path or ""),
                (cut,),
                __version__,
            )
            return _finish(work, d, manifest)
    finally:
        if opened is not None:
            opened.close()


def snapshot_state_dir(
    state_dir: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    partitions: Iterable[int] | None = None,
    progress: ProgressFn | None = None,
) -> Manifest:
    """Snapshot every partition of ``state_dir`` (or those in ``partitions``) into ``dest``.

    Each partition is cut and copied in its own read transaction, one after another, while
    writers keep running. ``progress`` is called after each partition. Cost: one compacting
    copy per partition. Returns the manifest (with :attr:`Manifest.root` set to ``dest``).
    """
    found = partition_dirs(state_dir)
    if partitions is not None:
        wanted = sorted(set(partitions))
        missing = [n for n in wanted if n not in found]
        if missing:
            have = ", ".join(map(str, found)) or "none"
            raise InvalidArgumentError(
                f"no partition {', '.join(map(str, missing))} in {str(state_dir)!r} "
                f"(partitions: {have})"
            )
        found = {n: found[n] for n in wanted}
    if not found:
        raise InvalidArgumentError(f"no txstore partitions in {str(state_dir)!r}")
    d = _check_dest(dest)
    cuts: list[PartitionCut] = []
    with _workdir(d) as work:
        for i, (number, path) in enumerate(found.items()):
            t0 = time.perf_counter()
            part, _ = open_committed(path)
            with part:
                assert isinstance(part, (Partition, ReplayedPartition))
                cut = _copy_partition(part, number, str(number), work)
            _verify_copy(work, cut)
            cuts.append(cut)
            if progress is not None:
                progress(
                    SnapshotProgress(
                        i + 1, len(found), number, cut.data_bytes, time.perf_counter() - t0
                    )
                )
        manifest = Manifest(
            "state_dir",
            uuid.uuid4().hex,
            _now(),
            os.path.abspath(state_dir),
            tuple(cuts),
            __version__,
        )
        return _finish(work, d, manifest)


def remove_snapshot(path: str | os.PathLike[str]) -> None:
    """Delete the snapshot at ``path`` (its files are read-only, so ``rm -r`` asks)."""
    read_manifest(path)
    _remove_tree(Path(path))
