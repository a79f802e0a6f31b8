"""The options of the ``txstore`` Spark data source, parsed and checked (no PySpark needed).

=================  ==========================================================================
option             meaning
=================  ==========================================================================
``path``           (``load(path)``) a state directory, one partition directory, or a snapshot
``store``          the store to read; required when the source holds several
``partitions``     partition numbers to read: ``"0,2,5-7"`` (default: all)
``decode``         ``true`` (default): keys and values decoded by the store's serdes;
                   ``false``: left as ``binary``
``snapshot``       live sources only. ``false`` (default): read the live environments, each
                   partition at one commit (the planned one, or a later one if it committed
                   since: :mod:`txstore.spark.plan`); ``true``: copy a snapshot at planning
                   time into Spark's local directory and read exactly that cut; an absolute
                   directory: read the snapshot there, taking it first if the directory does
                   not exist yet (its parent must exist)
``keySchema``      Spark schema (DDL such as ``"id BIGINT, tags ARRAY<STRING>"``, or JSON) of
                   keys serialized as JSON or by a registered custom serde
``valueSchema``    the same for values
``batchSize``      rows per Arrow batch (default 65536)
=================  ==========================================================================

>>> o = parse_options({"path": "/state", "store": "users", "partitions": "0,2-3"})
>>> o.store, sorted(o.partitions or ()), o.decode
('users', [0, 2, 3], True)
>>> parse_partitions("3-1")
Traceback (most recent call last):
...
txstore.errors.InvalidArgumentError: option partitions: range '3-1' is empty (3 > 1)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from txstore.errors import InvalidArgumentError

__all__ = ["DEFAULT_BATCH_SIZE", "OPTION_NAMES", "ReadOptions", "parse_options", "parse_partitions"]

DEFAULT_BATCH_SIZE: Final = 65536
MAX_BATCH_SIZE: Final = 1 << 22

#: Every option the data source knows, spelled as documented (Spark passes them lower-cased).
OPTION_NAMES: Final = (
    "path",
    "store",
    "partitions",
    "decode",
    "snapshot",
    "keySchema",
    "valueSchema",
    "batchSize",
)
_BY_LOWER: Final = {name.lower(): name for name in OPTION_NAMES}
_TRUE: Final = frozenset({"true", "1", "yes", "on"})
_FALSE: Final = frozenset({"false", "0", "no", "off"})


@dataclass(frozen=True)
class ReadOptions:
    """Checked options of one read (see the module docstring)."""

    path: str
    store: str | None = None
    partitions: frozenset[int] | None = None
    decode: bool = True
    snapshot: str = "false"
    key_schema: str | None = None
    value_schema: str | None = None
    batch_size: int = DEFAULT_BATCH_SIZE

    @property
    def snapshot_dir(self) -> str | None:
        """The directory of ``snapshot=<dir>``, else None."""
        return None if self.snapshot in ("true", "false") else self.snapshot


def _flag(name: str, text: str) -> bool:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise InvalidArgumentError(f"option {name} must be true or false, got {text!r}")


def parse_partitions(text: str) -> frozenset[int]:
    """Parse ``"0,2,5-7"`` into partition numbers; clear errors for anything else."""
    out: set[int] = set()
    for part in text.split(","):
        item = part.strip()
        if not item:
            raise InvalidArgumentError(
                f"option partitions: empty item in {text!r}; use numbers and ranges like '0,2,5-7'"
            )
        lo_text, sep, hi_text = item.partition("-")
        try:
            lo = int(lo_text)
            hi = int(hi_text) if sep else lo
        except ValueError:
            raise InvalidArgumentError(
                f"option partitions: {item!r} is not a partition number or range "
                "(use numbers and ranges like '0,2,5-7')"
            ) from None
        if lo < 0:
            raise InvalidArgumentError(f"option partitions: {item!r} is negative")
        if lo > hi:
            raise InvalidArgumentError(f"option partitions: range {item!r} is empty ({lo} > {hi})")
        out.update(range(lo, hi + 1))
    return frozenset(out)


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """Check the data source options; ``InvalidArgumentError`` names the bad one."""
    given: dict[str, str] = {}
    for key, value in options.items():
        name = _BY_LOWER.get(key.lower())
        if name is None:
            known = ", ".join(n for n in OPTION_NAMES if n != "path")
            raise InvalidArgumentError(f"unknown option {key!r}; the txstore source knows {known}")
        given[name] = value
    path = given.get("path")
    if not path:
        raise InvalidArgumentError(
            "no path: give the state directory, partition directory or snapshot to read, "
            'as spark.read.format("txstore").load(path)'
        )
    store = given.get("store")
    if store is not None and not store.strip():
        raise InvalidArgumentError("option store is empty")
    partitions = None
    if "partitions" in given:
        partitions = parse_partitions(given["partitions"])
    decode = _flag("decode", given["decode"]) if "decode" in given else True
    snapshot = "false"
    if "snapshot" in given:
        raw = given["snapshot"].strip()
        low = raw.lower()
        if low in _TRUE or low in _FALSE:
            snapshot = "true" if low in _TRUE else "false"
        elif os.path.isabs(raw):
            snapshot = os.path.normpath(raw)
        else:
            raise InvalidArgumentError(
                f"option snapshot must be true, false or an absolute directory, got {raw!r}"
            )
    batch_size = DEFAULT_BATCH_SIZE
    if "batchSize" in given:
        try:
            batch_size = int(given["batchSize"])
        except ValueError:
            batch_size = 0
        if not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise InvalidArgumentError(
                f"option batchSize must be an integer in 1..{MAX_BATCH_SIZE}, "
                f"got {given['batchSize']!r}"
            )
    key_schema = given.get("keySchema")
    value_schema = given.get("valueSchema")
    if not decode and (key_schema or value_schema):
        raise InvalidArgumentError(
            "options keySchema and valueSchema need decode=true (decode=false reads bytes)"
        )
    return ReadOptions(
        path=path,
        store=store.strip() if store is not None else None,
        partitions=partitions,
        decode=decode,
        snapshot=snapshot,
        key_schema=key_schema,
        value_schema=value_schema,
        batch_size=batch_size,
    )
