"""The stores of an existing state directory, as builders (what ``txstore serve`` hosts).

Every partition records each store's kind, format, serdes and configuration; the builders made
from that metadata reopen the stores exactly as they were written. Serdes are found by name
(:func:`~txstore.stores.serdes.serde_by_name`): a user serde must be registered in the serving
process
(``txstore serve --import my.serdes``).
"""

from __future__ import annotations

import os
from typing import Any

from txstore.engine.partition import Partition
from txstore.errors import InvalidArgumentError, TxStoreError
from txstore.runtime import catalog
from txstore.runtime.statedir import partition_dirs
from txstore.stores.serdes import Serde, serde_by_name

__all__ = ["builder_from_meta", "builders_from_state_dir"]


def _serde(meta: dict[str, Any], field: str, store: str) -> Serde[Any]:
    name = meta.get(field, "bytes")
    try:
        return serde_by_name(name)
    except TxStoreError:
        raise InvalidArgumentError(
            f"store {store!r} was written with serde {name!r}, unknown in this process: "
            "register it (txstore.register_serde) before serving"
        ) from None


def builder_from_meta(name: str, meta: dict[str, Any]) -> Any:
    """The builder of store ``name`` from its recorded metadata, with its recorded serdes."""
    key, value = _serde(meta, "key_serde", name), _serde(meta, "value_serde", name)
    return catalog.builder_from_meta(name, meta, key, value)


def builders_from_state_dir(state_dir: str | os.PathLike[str]) -> list[Any]:
    """Builders of every store found in the partitions of ``state_dir`` (read-only opens;
    stores missing from some partitions are taken from the others)."""
    found: dict[str, dict[str, Any]] = {}
    for path in partition_dirs(state_dir).values():
        if not (path / "data" / "data.mdb").is_file():
            continue
        p = Partition(path, readonly=True)
        try:
            for name in p.store_names():
                meta = p.store_meta(name)
                if meta is not None and name not in found:
                    found[name] = meta
        finally:
            p.close()
    if not found:
        raise InvalidArgumentError(f"no stores found in the partitions of {str(state_dir)!r}")
    return [builder_from_meta(name, meta) for name, meta in sorted(found.items())]
