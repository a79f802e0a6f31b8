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

from txstore.errors import InvalidArgumentError, InvalidTypeError

__all__ = ["partition_dirs", "partition_path"]


def partition_path(state_dir: str | os.PathLike[str], partition: int) -> Path:
    """The directory of ``partition`` inside ``state_dir`` (it need not exist)."""
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise InvalidTypeError(f"partition must be an int, got {type(partition).__name__}")
    if partition < 0:
        raise InvalidArgumentError(f"partition must be >= 0, got {partition}")
    return Path(state_dir) / str(partition)


def partition_dirs(state_dir: str | os.PathLike[str]) -> dict[int, Path]:
    """Every partition directory under ``state_dir``, by partition number.

    A directory counts when its name is a decimal number and it holds a ``data`` environment;
    anything else (snapshot manifests, lock files, stray directories) is ignored. A missing
    ``state_dir`` raises :class:`~txstore.errors.InvalidArgumentError`.
    """
    root = Path(state_dir)
    if not root.is_dir():
        raise InvalidArgumentError(f"state directory {str(root)!r} does not exist")
    found: dict[int, Path] = {}
    for entry in root.iterdir():
        name = entry.name
        if name.isdigit() and name == str(int(name)) and (entry / "data").is_dir():
            found[int(name)] = entry
    return dict(sorted(found.items()))
