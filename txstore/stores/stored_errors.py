"""Stored bytes a typed store cannot decode: the error that says where they are.

A value serde or a value format that fails on bytes read *from a store* (not on a caller's
argument) means one of two things: the LMDB file holding them was damaged (a flipped byte in a
value or its headers, which LMDB keeps no checksum of), or the store is read with other serdes
or another format than it was written with. The decoder's own
:class:`~txstore.errors.SerializationError` says what is wrong with the bytes but not where they
are; :func:`stored_bytes_error` makes one that names the store, the file (the partition's
``data/data.mdb``) and the key, chained to the decoder's.

The typed stores call it in ``except`` clauses only, around their decodes: the read paths do no
extra work while the bytes decode (a ``try`` costs nothing in CPython 3.11 until something is
raised).

>>> err = stored_bytes_error(None, b"k1", SerializationError("bytes are not valid UTF-8"))
>>> str(err)[:73]
"cannot decode the bytes stored under key b'k1' of a store (bytes are not "
"""

from __future__ import annotations

import os
from typing import Any

from txstore.engine.lmdb_errors import data_file
from txstore.errors import SerializationError

__all__ = ["stored_bytes_error"]

#: Characters of a key's ``repr`` kept in a message.
_KEY_REPR = 80


def _file_of(bytes_store: Any) -> str | None:
    """The LMDB file under a bytes store, a read-committed or snapshot view, or a layer over
    one (change logging, a format adapter); ``None`` for an in-memory store."""
    obj = bytes_store
    for _ in range(8):
        if obj is None:
            return None
        partition = getattr(obj, "partition", None)
        if partition is not None:
            path = getattr(partition, "path", None)
            return data_file(os.fspath(path)) if isinstance(path, str | os.PathLike) else None
        obj = getattr(obj, "store", None) or getattr(obj, "inner", None)
    return None


def _key_text(key: object) -> str:
    text = repr(key)
    return text if len(text) <= _KEY_REPR else text[: _KEY_REPR - 3] + "..."


def stored_bytes_error(store: Any, key: object, exc: SerializationError) -> SerializationError:
    """The :class:`~txstore.errors.SerializationError` to raise ``from exc`` when the bytes
    stored under ``key`` (the caller's key, or the stored key bytes) in the typed store
    ``store`` do not decode: it names the store, its LMDB file and the key. ``store`` is
    the typed store or view, or ``None`` if unknown; its file is found from its
    ``_damage_origin`` (a view's: the store it was taken from) or else its bytes store."""
    name = getattr(store, "name", None) if store is not None else None
    origin = getattr(store, "_damage_origin", None) or getattr(store, "_inner", None)
    file = _file_of(origin)
    where = "in memory" if file is None else f"in {file!r}"
    what = "a store" if name is None else f"store {name!r}"
    err = SerializationError(
        f"cannot decode the bytes stored under key {_key_text(key)} of {what} ({exc}): "
        f"{where}, either damaged (LMDB keeps no checksum of values) or written with other "
        "serdes or another value format than the store is read with"
    )
    err.store = name  # type: ignore[attr-defined]
    err.path = file  # type: ignore[attr-defined]
    return err
