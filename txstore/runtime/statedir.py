"""State directories: where the partitions of an application live.

A *state directory* holds one partition directory per partition, named by the partition number
in decimal (``0``, ``1``, ... ``11``), each a :func:`txstore.open`-able directory::

    <state_dir>/
        0/    data/ spill/ writer.lock ...
        1/
        ...

Tasks, interactive queries, snapshots and the Spark reader all find partitions this way.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> for p in (2, 0, 10):
...     (partition_path(d, p) / "data").mkdir(parents=True)
>>> sorted(partition_dirs(d))
[0, 2, 10]
"""

from __future__ import annotations

import os
from pathlib import Path

from txstore.engine.checksums import clear_damage, recorded_damage
from txstore.engine.partition import Partition
from txstore.errors import (
    DamagedFileError,
    InvalidArgumentError,
    InvalidTypeError,
    PartitionDataLostError,
)

__all__ = [
    "changelog_stores",
    "check_data_not_lost",
    "drop_damaged_stores",
    "held_data_evidence",
    "partition_dirs",
    "partition_path",
]


def partition_path(state_dir: str | os.PathLike[str], partition: int) -> Path:
    """The directory of ``partition`` inside ``state_dir`` (it need not exist)."""
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise InvalidTypeError(f"partition must be an int, got {type(partition).__name__}")
    if partition < 0:
        raise InvalidArgumentError(f"partition must be >= 0, got {partition}")
    return Path(state_dir) / str(partition)


def partition_dirs(state_dir: str | os.PathLike[str]) -> dict[int, Path]:
    """Every partition directory under ``state_dir``, by partition number.

    A directory counts when its name is a decimal number and it holds a ``data`` environment,
    or shows that it held one (:func:`held_data_evidence`: a partition that lost ``data/`` is
    listed, so that opening it refuses with a typed error instead of leaving it out); anything
    else (snapshot manifests, lock files, stray directories) is ignored. A missing
    ``state_dir`` raises :class:`~txstore.errors.InvalidArgumentError`.
    """
    root = Path(state_dir)
    if not root.is_dir():
        raise InvalidArgumentError(f"state directory {str(root)!r} does not exist")
    found: dict[int, Path] = {}
    for entry in root.iterdir():
        name = entry.name
        if (
            name.isdigit()
            and name == str(int(name))
            and ((entry / "data").is_dir() or held_data_evidence(entry))
        ):
            found[int(name)] = entry
    return dict(sorted(found.items()))


def changelog_stores(path: str | os.PathLike[str]) -> list[str]:
    """The stores of the partition directory ``path`` whose changelog directory holds a file,
    sorted."""
    return sorted(
        entry.name
        for entry in _scandir(os.path.join(path, "changelog"))
        if entry.is_dir() and any(files for _, _, files in os.walk(entry.path))
    )


def held_data_evidence(path: str | os.PathLike[str], stores: list[str] | None = None) -> list[str]:
    """What in the directory ``path`` shows that a partition held data there, whatever its
    ``data/`` holds now (see :func:`check_data_not_lost`); empty: nothing."""
    if stores is None:
        stores = changelog_stores(path)
    evidence: list[str] = []
    if stores:
        evidence.append(f"the changelogs of {', '.join(map(repr, stores))} (changelog/)")
    if os.path.isdir(os.path.join(path, "spill")):
        evidence.append("a writer's spill directory (spill/)")
    if os.path.isfile(os.path.join(path, "manifest.json")):
        evidence.append("a snapshot manifest (manifest.json)")
    if os.path.isfile(os.path.join(path, "writer.lock")):
        evidence.append("the lock file of a writer, created after its data (writer.lock)")
    return evidence


def check_data_not_lost(path: str) -> None:
    """Refuse a partition directory that lost its data: raise
    :class:`~txstore.errors.PartitionDataLostError` when ``data/data.mdb`` is missing or empty
    although the directory shows that the partition held data. Evidence of that (see
    docs/engine.md, "Damaged and lost files"): a ``changelog/`` directory holding a file (a
    task's changelogs), a ``spill/`` directory (a writer's spilled uncommitted writes, only ever
    next to its data), ``manifest.json`` (a snapshot copy) or ``writer.lock`` (a writer opened
    it, after it created ``data/``). Without this check, opening it creates an empty
    environment and serves empty stores as if nothing had ever been written.

    A :class:`~txstore.runtime.task.Task` skips it: it restores every store from its
    changelog. Cost: one ``stat`` when the data file is there; a walk of ``changelog/`` (up to
    its first file) only when it is not."""
    data = os.path.join(path, "data", "data.mdb")
    try:
        if os.stat(data).st_size > 0:
            return
        missing = "data/data.mdb is empty (0 bytes)"
    except FileNotFoundError:
        where = "data/data.mdb" if os.path.isdir(os.path.join(path, "data")) else "data/"
        missing = f"{where} is missing"
    except OSError:
        return  # unreadable: the partition's own open reports why
    stores = changelog_stores(path)
    evidence = held_data_evidence(path, stores)
    if not evidence:
        return
    if stores:
        advice = (
            "Open it as a txstore.runtime.task.Task, which restores every store from its "
            "changelog; or delete the whole directory to start empty"
        )
    else:
        advice = (
            "No changelog here can restore it: put data/ back from a snapshot or backup, or "
            "delete the whole directory to start empty"
        )
    raise PartitionDataLostError(path, missing, evidence, advice)


def _scandir(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except OSError:
        return []


def drop_damaged_stores(
    partition: Partition, path: Path, changelog_root: Path | None = None
) -> list[str]:
    """Kafka's TaskCorruptedException path, for a task opening partition directory ``path``:
    the stores in which the partition's writer found an entry whose checksum did not match
    (recorded by the engine, :func:`~txstore.engine.checksums.record_damage`) are deleted,
    before any is opened, and the task's ``initialize()`` restores them from their changelogs,
    from the start: nothing committed is lost, the changelog holds it. Returns their names.
    A damaged store without a changelog cannot be rebuilt: :class:`~txstore.errors.
    DamagedFileError`, nothing changed. Changelogs are looked for in ``changelog_root``
    (default ``path/changelog``). O(databases of the partition)."""
    root = path / "changelog" if changelog_root is None else changelog_root
    damaged = recorded_damage(str(path))
    if not damaged:
        return []
    stores = sorted({s for s in map(partition.store_of_db, damaged) if s is not None})
    lost = [s for s in stores if not (root / s).is_dir()]
    if lost:
        raise DamagedFileError(
            str(path / "data" / "data.mdb"),
            f"an entry of store(s) {', '.join(map(repr, lost))} failed its checksum and "
            "they have no changelog to rebuild them from",
            database=lost[0],
        )
    if stores:
        partition.drop_stores(set(stores))
    clear_damage(str(path))
    return stores
