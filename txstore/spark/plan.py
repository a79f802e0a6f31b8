"""Planning a Spark read on the driver: source, store, one committed cut, one task a partition.

Everything here is plain txstore and picklable data; no PySpark. The data source
(:mod:`txstore.spark.datasource`) calls :func:`resolve` when the DataFrame is created (to learn
its schema) and :func:`plan` when Spark plans a query; each :class:`ReadTask` travels to an
executor inside an ``InputPartition``.

**The cut, and why a query never mixes commits.**

* A *snapshot* (a directory with ``manifest.json``) is immutable: the cut is its manifest. A
  task checks that its partition copy still matches the manifest (committed offset, entries,
  file size) and reads it.
* A *live* state directory: at planning, each partition is opened read-only and one LMDB read
  transaction records the cut (its transaction id, the store's committed offset and metadata).
  The task opens the partition read-only (after Spark's fork) and reads it in *one* read
  transaction (LMDB MVCC: a reader sees one committed transaction, whole, whatever the writer
  does meanwhile; it never blocks the writer nor sees its uncommitted pages). When that
  transaction is the planned one, the task reads byte for byte the planned state. When the
  partition committed since planning, the task reads its newer commit instead: a later cut of
  that partition, whole. This is still one consistent cut of the store: a txstore ``Task`` owns
  one partition and partitions commit independently (as Kafka tasks do), so planning itself
  cuts them one after another; a partition cut a little later is a cut planning could have
  taken. A live read is therefore never refused because a writer commits; only a change of the
  store's configuration in between (a different format: the planned schema would be wrong)
  raises :class:`CutMovedError`. The limit: a query that reads one live partition *twice* (a
  self-join of one DataFrame, a recomputed stage) may read two commits of it.
* ``snapshot=true`` or ``snapshot=<dir>`` takes a snapshot of the live directory at planning
  (:func:`txstore.runtime.snapshot.snapshot_state_dir`) and plans on it: every task, and every
  re-read of the same DataFrame, reads exactly the plan-time cut, at the cost of one compacting
  copy of the store's partitions per planning.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from txstore.codecs import ValueFormat
from txstore.engine.iterators import KeyRange
from txstore.engine.partition import Partition
from txstore.errors import InvalidArgumentError, InvalidStateStoreError, StorageError
from txstore.runtime.committed import open_served
from txstore.runtime.snapshot import (
    Manifest,
    PartitionCut,
    begin_cut,
    is_snapshot,
    read_manifest,
    snapshot_partition,
    snapshot_state_dir,
)
from txstore.runtime.statedir import partition_dirs
from txstore.spark.options import ReadOptions
from txstore.spark.pushdown import Pushdown

__all__ = [
    "CutMovedError",
    "ReadTask",
    "SnapshotMismatchError",
    "Source",
    "StoreSpec",
    "check_cut",
    "open_source",
    "plan",
    "resolve",
    "store_metas",
]

_SEGMENTED: Final = frozenset(
    {"kind", "format", "retention", "segment_interval", "key_serde", "value_serde"}
) | {"format_version"}

#: Metadata fields this reader understands, per store kind: (required, optional). Anything
#: else is refused rather than read wrongly.
SUPPORTED_META: Final[dict[str, tuple[frozenset[str], frozenset[str]]]] = {
    "key_value": (
        frozenset({"kind", "format", "key_serde", "value_serde", "format_version"}),
        frozenset(
            {"db", "legacy"}
        ),  # a lazy format upgrade in progress (txstore.bytestores.upgrade)
    ),
    "window": (_SEGMENTED | {"window_size", "retain_duplicates"}, frozenset()),
    "session": (_SEGMENTED, frozenset()),
}
SUPPORTED_FORMATS: Final[dict[str, frozenset[str]]] = {
    "key_value": frozenset({"PLAIN", "TIMESTAMPED", "HEADERS"}),
    "window": frozenset({"PLAIN", "TIMESTAMPED", "HEADERS", "PLAIN_HEADERS"}),
    "session": frozenset({"PLAIN", "TIMESTAMPED", "HEADERS", "PLAIN_HEADERS"}),
}
SUPPORTED_FORMAT_VERSIONS: Final = frozenset({1})


class CutMovedError(InvalidStateStoreError):
    """A store's configuration changed between planning and reading a live partition: its
    rows no longer fit the planned schema. Create the DataFrame again."""


class SnapshotMismatchError(StorageError):
    """A snapshot partition no longer matches its manifest (modified, or mixed with another)."""


@dataclass(frozen=True)
class Source:
    """What ``load(path)`` points at: a snapshot or live partitions, by partition number."""

    path: str
    manifest: Manifest | None
    partitions: Mapping[int, str]

    @property
    def is_snapshot(self) -> bool:
        return self.manifest is not None

    @property
    def label(self) -> str:
        return f"snapshot {self.path!r}" if self.manifest is not None else repr(self.path)


def open_source(path: str) -> Source:
    """Classify ``path``: a snapshot, a single partition directory, or a state directory."""
    root = os.path.abspath(path)
    if not os.path.isdir(root):
        raise InvalidArgumentError(f"{root!r} does not exist or is not a directory")
    if is_snapshot(root):
        manifest = read_manifest(root)
        return Source(
            root,
            manifest,
            {c.partition: str(manifest.partition_path(c)) for c in manifest.partitions},
        )
    if os.path.isfile(os.path.join(root, "data", "data.mdb")):
        name = os.path.basename(root)
        number = int(name) if name.isdigit() and name == str(int(name)) else 0
        return Source(root, None, {number: root})
    found = partition_dirs(root)
    if not found:
        raise InvalidArgumentError(
            f"{root!r} holds no txstore partitions: expected a state directory (<dir>/<n>/data),"
            " a partition directory (<dir>/data) or a snapshot (<dir>/manifest.json)"
        )
    return Source(root, None, {n: str(p) for n, p in found.items()})


def store_metas(source: Source) -> dict[str, dict[int, dict[str, Any]]]:
    """Every store's metadata by partition (live: read now, not a cut; snapshot: manifest)."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    if source.manifest is not None:
        for cut in source.manifest.partitions:
            for name, sc in cut.stores.items():
                out.setdefault(name, {})[cut.partition] = dict(sc.meta)
        return out
    for number, path in source.partitions.items():
        with open_served(path) as p:
            for name in p.store_names():
                meta = p.store_meta(name)
                if meta is not None:
                    out.setdefault(name, {})[number] = meta
    return out


@dataclass(frozen=True)
class StoreSpec:
    """The store a read resolved to, and how to decode it (picklable)."""

    name: str
    meta: Mapping[str, Any]
    kind: str
    format: ValueFormat
    key_serde: str
    value_serde: str
    partitions: tuple[int, ...]
    """Partitions of the source that hold the store (after the ``partitions`` option)."""
    window_size: int | None = None
    """Window stores: the window size in milliseconds (a window's end is start + size)."""


#: The metadata of a store opened at the bytes layer (``BytesKeyValueStore`` without a typed
#: store above it): plain values, no serdes, read as ``binary``.
BYTES_STORE_META: Final[Mapping[str, Any]] = {"kind": "key_value", "format": "bytes"}


def _check_meta(name: str, meta: Mapping[str, Any], where: str) -> StoreSpec:
    if dict(meta) == dict(BYTES_STORE_META):
        return StoreSpec(name, dict(meta), "key_value", ValueFormat.PLAIN, "bytes", "bytes", ())
    kind = meta.get("kind")
    if kind not in SUPPORTED_META:
        kinds = ", ".join(sorted(SUPPORTED_META))
        raise InvalidArgumentError(
            f"store {name!r} in {where} is a {kind!r} store; this reader reads {kinds} stores"
        )
    required, optional = SUPPORTED_META[kind]
    unknown = sorted(set(meta) - required - optional)
    missing = sorted(required - set(meta))
    if unknown or missing:
        raise InvalidArgumentError(
            f"store {name!r} in {where} has metadata this reader does not understand "
            f"(unknown fields {unknown}, missing fields {missing}): {dict(meta)!r}. "
            "Stores opened below the typed layer cannot be read; a newer txstore may have "
            "written it"
        )
    fmt = meta["format"]
    if fmt not in SUPPORTED_FORMATS[kind]:
        raise InvalidArgumentError(f"store {name!r} in {where} has unknown format {fmt!r}")
    version = meta["format_version"]
    if version not in SUPPORTED_FORMAT_VERSIONS:
        raise InvalidArgumentError(
            f"store {name!r} in {where} has format_version {version!r}; this reader reads "
            f"{sorted(SUPPORTED_FORMAT_VERSIONS)}"
        )
    return StoreSpec(
        name,
        dict(meta),
        kind,
        ValueFormat[fmt],
        str(meta["key_serde"]),
        str(meta["value_serde"]),
        (),
        int(meta["window_size"]) if kind == "window" else None,
    )


def _ranges(numbers: list[int]) -> str:
    out: list[str] = []
    for n in sorted(numbers):
        if out and "-" not in out[-1] and int(out[-1]) == n - 1:
            out[-1] = f"{out[-1]}-{n}"
        elif out and "-" in out[-1] and int(out[-1].split("-")[1]) == n - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ",".join(out) or "none"


def resolve(options: ReadOptions) -> tuple[Source, StoreSpec]:
    """Find the source and the store ``options`` name, with clear errors. O(partitions)."""
    source = open_source(options.path)
    snap_dir = options.snapshot_dir
    if source.is_snapshot and snap_dir is not None:
        raise InvalidArgumentError(
            f"{source.path!r} is already a snapshot: option snapshot={snap_dir!r} applies to "
            "live state directories"
        )
    if snap_dir is not None and is_snapshot(snap_dir):
        _check_snapshot_source(read_manifest(snap_dir), source)
        source = open_source(snap_dir)
    elif snap_dir is not None:
        _check_snapshot_dest(snap_dir, source)
    selected = dict(source.partitions)
    if options.partitions is not None:
        missing = sorted(options.partitions - set(selected))
        if missing:
            raise InvalidArgumentError(
                f"option partitions: {source.label} has no partition {_ranges(missing)} "
                f"(it has {_ranges(list(selected))})"
            )
        selected = {n: p for n, p in selected.items() if n in options.partitions}
    metas = store_metas(Source(source.path, source.manifest, selected))
    all_names = sorted(store_metas(source)) if options.partitions is not None else sorted(metas)
    if options.store is None:
        if len(metas) == 1:
            name = next(iter(metas))
        elif not metas:
            raise InvalidArgumentError(f"{source.label} holds no stores")
        else:
            raise InvalidArgumentError(
                f"option store is required: {source.label} holds {len(metas)} stores: "
                + ", ".join(sorted(metas))
            )
    else:
        name = options.store
        if name not in metas:
            where = (
                f"partitions {_ranges(list(selected))} of {source.label}"
                if options.partitions is not None
                else source.label
            )
            raise InvalidArgumentError(
                f"no store {name!r} in {where}; stores: {', '.join(all_names) or 'none'}"
            )
    by_partition = metas[name]
    distinct: dict[str, list[int]] = {}
    for number, meta in by_partition.items():
        distinct.setdefault(_meta_key(meta), []).append(number)
    if len(distinct) > 1:
        described = "; ".join(f"partitions {_ranges(ps)}: {k}" for k, ps in distinct.items())
        raise InvalidArgumentError(
            f"store {name!r} has different configurations across partitions of {source.label} "
            f"({described}); read the partitions separately with option partitions"
        )
    first = next(iter(by_partition.values()))
    spec = _check_meta(name, first, source.label)
    return source, dataclasses.replace(spec, partitions=tuple(sorted(by_partition)))


def _check_snapshot_dest(snap_dir: str, source: Source) -> None:
    """Refuse, at ``load()``, a ``snapshot`` directory that planning could not create."""
    if os.path.exists(snap_dir):
        if not os.path.isdir(snap_dir) or os.listdir(snap_dir):
            raise InvalidArgumentError(
                f"option snapshot: {snap_dir!r} exists and is neither a snapshot nor an empty "
                "directory"
            )
        return
    parent = os.path.dirname(snap_dir)
    if not os.path.isdir(parent):
        raise InvalidArgumentError(
            f"option snapshot: the parent directory of {snap_dir!r} does not exist "
            "(the snapshot is created there, its parent is not)"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InvalidArgumentError(
            f"option snapshot: cannot create {snap_dir!r}: {parent!r} is not writable"
        )
    real, src = os.path.realpath(snap_dir), os.path.realpath(source.path)
    if real == src or real.startswith(src + os.sep):
        raise InvalidArgumentError(
            f"option snapshot: {snap_dir!r} is inside the source {source.path!r}; choose a "
            "directory outside it"
        )


#: Metadata fields that say where a store keeps its data, not what it holds: they may differ
#: between partitions (a lazy upgrade progresses per partition) without changing the schema.
_LOCATION_FIELDS: Final = ("db", "legacy")


def _meta_key(meta: Mapping[str, Any]) -> str:
    return json.dumps({k: v for k, v in meta.items() if k not in _LOCATION_FIELDS}, sort_keys=True)


def _check_snapshot_source(manifest: Manifest, live: Source) -> None:
    if os.path.realpath(manifest.source) != os.path.realpath(live.path):
        raise InvalidArgumentError(
            f"snapshot {manifest.root!r} was taken from {manifest.source!r}, not from "
            f"{live.path!r}: choose another snapshot directory"
        )


@dataclass(frozen=True)
class ReadTask:
    """One Spark input partition: one store partition and the cut it must be read at."""

    partition: int
    path: str
    store: str
    snapshot: bool
    lmdb_txnid: int
    committed_offset: int | None
    entries: int
    meta: Mapping[str, Any]
    data_bytes: int = 0


def _snapshot_root() -> str:
    """Where ``snapshot=true`` puts plan-time snapshots: Spark's local directory of this
    application (``SPARK_LOCAL_DIRS``, deleted by Spark when the application stops), else the
    system temporary directory."""
    local = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0].strip()
    base = local if local and os.path.isdir(local) else tempfile.gettempdir()
    root = Path(base) / "txstore-snapshots"
    root.mkdir(parents=True, exist_ok=True)
    return str(root / uuid.uuid4().hex)


def plan(
    options: ReadOptions, spec: StoreSpec, pushdown: Pushdown | None = None
) -> tuple[Source, list[ReadTask]]:
    """Take the cut of ``spec``'s store and make one task per partition holding it.

    Live sources: one read transaction per partition, now (or a snapshot of them, with the
    ``snapshot`` option). Raises if the store's metadata changed since :func:`resolve`.
    ``pushdown`` drops partitions that cannot match: by number, and for key lookups in a
    key-value store, partitions whose cut holds none of the keys (a point read each).
    """
    pushdown = pushdown or Pushdown()
    source = open_source(options.path)
    wanted = [
        n
        for n in source.partitions
        if (options.partitions is None or n in options.partitions) and pushdown.allows_partition(n)
    ]
    if pushdown.empty:
        return source, []
    if not source.is_snapshot and options.snapshot != "false":
        dest = options.snapshot_dir
        if dest is None:
            dest = _snapshot_root()
        if not is_snapshot(dest):
            try:
                if os.path.isfile(os.path.join(source.path, "data", "data.mdb")):
                    (number,) = source.partitions
                    snapshot_partition(source.path, dest, partition=number)
                else:
                    snapshot_state_dir(source.path, dest, partitions=wanted)
            except (OSError, InvalidArgumentError):
                if not is_snapshot(dest):  # else a concurrent planning took it first: use it
                    raise
        manifest = read_manifest(dest)
        _check_snapshot_source(manifest, source)
        source = open_source(dest)
        missing = [n for n in wanted if n not in source.partitions]
        if missing:
            raise InvalidArgumentError(
                f"snapshot {dest!r} has no partition {_ranges(missing)} (it was taken with "
                f"partitions {_ranges(list(source.partitions))}): choose another directory"
            )
    tasks: list[ReadTask] = []
    if source.manifest is not None:
        for number in wanted:
            cut = source.manifest.partition(number)
            task = _task(cut, str(source.manifest.partition_path(cut)), spec, True, source)
            if task is not None:
                tasks.append(task)
        return source, tasks
    for number in wanted:
        path = source.partitions[number]
        with open_served(path) as p:
            snap, cut = begin_cut(p, number=number, path=path)
            try:
                task = _task(cut, path, spec, False, source)
                if task is not None and not _holds_a_key(p, snap, task, pushdown):
                    task = None
            finally:
                snap.close()
        if task is not None:
            tasks.append(task)
    return source, tasks


def _holds_a_key(partition: Partition, snap: Any, task: ReadTask, pushdown: Pushdown) -> bool:
    """False when a key lookup cannot match in this cut of a plain key-value store."""
    if pushdown.keys is None or task.meta.get("kind") != "key_value" or "db" in task.meta:
        return True
    source = snap.source(partition.db_name(task.store))
    return any(source.read_chunk(KeyRange(k, k), False, 1)[0] for k in pushdown.keys)


def _task(
    cut: PartitionCut, path: str, spec: StoreSpec, snapshot: bool, source: Source
) -> ReadTask | None:
    store = cut.stores.get(spec.name)
    if store is None:
        return None  # the store was never opened in this partition: no rows
    if _meta_key(store.meta) != _meta_key(spec.meta):
        raise InvalidStateStoreError(
            f"store {spec.name!r} in partition {cut.partition} of {source.label} changed its "
            f"configuration since the DataFrame was created ({dict(spec.meta)!r} -> "
            f"{dict(store.meta)!r}): create the DataFrame again"
        )
    return ReadTask(
        partition=cut.partition,
        path=path,
        store=spec.name,
        snapshot=snapshot,
        lmdb_txnid=cut.lmdb_txnid,
        committed_offset=store.committed_offset,
        entries=store.entries,
        meta=dict(store.meta),
        data_bytes=cut.data_bytes,
    )


def check_cut(task: ReadTask, cut: PartitionCut) -> ReadTask:
    """The task to read in ``cut`` (what the task's read transaction sees now).

    Snapshots: ``task`` itself, or :class:`SnapshotMismatchError` unless ``cut`` is exactly the
    planned one. Live partitions: ``task`` when nothing committed since planning, else ``task``
    moved to the newer commit ``cut``; :class:`CutMovedError` only if the store's configuration
    changed (its rows would not fit the planned schema).
    """
    now = cut.stores.get(task.store)
    if task.snapshot:
        size = os.path.getsize(os.path.join(task.path, "data", "data.mdb"))
        if (
            now is None
            or now.committed_offset != task.committed_offset
            or now.entries != task.entries
            or dict(now.meta) != dict(task.meta)
            or size != task.data_bytes
        ):
            raise SnapshotMismatchError(
                f"snapshot partition {task.partition} at {task.path!r} does not match its "
                f"manifest (store {task.store!r}: offset {task.committed_offset}, "
                f"{task.entries} entries, {task.data_bytes} bytes in the manifest; found "
                f"{_describe(now)}, {size} bytes): the snapshot was modified or mixed with "
                "another one"
            )
        return task
    if cut.lmdb_txnid == task.lmdb_txnid:
        return task
    if now is None or _meta_key(now.meta) != _meta_key(task.meta):
        raise CutMovedError(
            f"store {task.store!r} in partition {task.partition} at {task.path!r} changed its "
            f"configuration after the query was planned ({dict(task.meta)!r} -> "
            f"{dict(now.meta) if now is not None else 'no such store'!r}): its rows no longer "
            "fit the planned schema. Create the DataFrame again"
        )
    # The partition committed since planning: read its newer commit, whole (see the module doc).
    return dataclasses.replace(
        task,
        lmdb_txnid=cut.lmdb_txnid,
        committed_offset=now.committed_offset,
        entries=now.entries,
        meta=dict(now.meta),
    )


def _describe(cut: Any) -> str:
    if cut is None:
        return "no such store"
    return f"offset {cut.committed_offset}, {cut.entries} entries"
