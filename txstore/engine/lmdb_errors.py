"""LMDB's exceptions as txstore's: :func:`lmdb_error` turns an ``lmdb.Error`` into the
:class:`~txstore.errors.TxStoreError` subclass that says what went wrong, so that no raw
py-lmdb exception leaves the engine.

The engine calls it where it catches ``lmdb.Error`` at its boundaries (the partition's reads,
writes, snapshots, its spill environment, the opening of an environment), in ``except``
clauses only: a ``try`` costs nothing in CPython 3.11 until something is raised, so the
per-operation paths gain no call.

=====================================  ===========================================================
LMDB                                   txstore
=====================================  ===========================================================
``MapFullError``                       :class:`~txstore.errors.StorageFullError` (with a hint)
``ReadonlyError``                      :class:`~txstore.errors.ReadOnlyError`
``BadValsizeError``                    :class:`~txstore.errors.InvalidArgumentError` (a key,
                                       value or database name of a size LMDB refuses)
``CorruptedError``,                    :class:`~txstore.errors.DamagedFileError` naming the
                                       ``data.mdb`` file (:func:`data_file`)
``PageNotFoundError``,
``InvalidError``,
``VersionMismatchError``
``ReadersFullError``, ``DbsFullError``  :class:`~txstore.errors.StorageError` with the setting
                                       to raise (``max_readers``, ``max_dbs``)
a plain ``lmdb.Error`` about a closed  :class:`~txstore.errors.InvalidStateStoreError`
object (an environment or transaction
used after it was closed)
anything else                          :class:`~txstore.errors.StorageError` with LMDB's message
=====================================  ===========================================================
"""

from __future__ import annotations

import os

import lmdb

from txstore.errors import (
    DamagedFileError,
    InvalidArgumentError,
    InvalidStateStoreError,
    ReadOnlyError,
    StorageError,
    StorageFullError,
    TxStoreError,
)

__all__ = ["DAMAGE", "LMDBError", "data_file", "lmdb_error"]

#: py-lmdb's base exception, for layers above the engine that read through a transaction the
#: engine hands them (the typed store's get) and wrap what it raises with :func:`lmdb_error`.
LMDBError = lmdb.Error

#: The LMDB errors that mean a damaged file.
DAMAGE = (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError)


def data_file(where: str) -> str:
    """The LMDB data file ``where`` stands for: the ``data.mdb`` of a partition directory's
    ``data/`` or of the environment directory ``where``, else ``where`` itself (a file, or a
    directory without one). Called on errors only (it looks at the file system)."""
    for candidate in (os.path.join(where, "data", "data.mdb"), os.path.join(where, "data.mdb")):
        if os.path.isfile(candidate):
            return candidate
    return where


def lmdb_error(exc: lmdb.Error, where: str) -> TxStoreError:
    """The txstore error for the LMDB error ``exc``, raised while working on ``where`` (a
    partition directory or an environment path); raise it ``from exc``."""
    if isinstance(exc, lmdb.MapFullError):
        return StorageFullError(
            f"LMDB map of {where!r} is full and could not grow ({exc}): free disk space, raise "
            "the process's address-space limit, or commit smaller batches"
        )
    if isinstance(exc, lmdb.ReadonlyError):
        return ReadOnlyError(f"{where!r} is open read-only: {exc}")
    if isinstance(exc, lmdb.BadValsizeError):
        return InvalidArgumentError(
            f"LMDB refused a key, value or database name of that size in {where!r} (keys and "
            f"database names are 1 to 511 bytes): {exc}"
        )
    if isinstance(exc, DAMAGE):
        return DamagedFileError(data_file(where), f"LMDB found it damaged ({exc})")
    if isinstance(exc, lmdb.VersionMismatchError):
        return DamagedFileError(
            data_file(where), f"written by an LMDB this build cannot read ({exc})"
        )
    if isinstance(exc, lmdb.ReadersFullError):
        return StorageError(
            f"LMDB reader table of {where!r} is full ({exc}): close idle iterators and "
            "snapshots, or open the partition first with a larger max_readers"
        )
    if isinstance(exc, lmdb.DbsFullError):
        return StorageError(
            f"{where!r} needs more named databases at once than its max_dbs allows ({exc}): "
            "open it with a larger max_dbs"
        )
    if type(exc) is lmdb.Error and "closed" in str(exc):
        return InvalidStateStoreError(
            f"the LMDB environment of {where!r} (or a transaction on it) was closed: {exc}; "
            "open the partition again"
        )
    return StorageError(f"LMDB failed on {where!r}: {exc}")
