"""What each writable LMDB environment of this process costs in memory, and the two choices that
keep it small: the size of its table of named-database handles, and where the C allocator puts
LMDB's two large per-environment arrays.

**The dbi table of a writable environment.** LMDB allocates per-slot state for the environment
(~110 bytes a slot) and again for every read transaction (~45 bytes a slot), so the default
table of 256 slots costs ~40 KiB per open partition, most of it for slots a partition never
uses (a key-value partition holds 2 databases: the metadata and its store). A writable
environment therefore opens with a table sized from the named databases already in its file
(:func:`initial_dbi_table`: at least :data:`MIN_DBI_TABLE`) and is reopened with a larger one
(:func:`grown_dbi_table`, never past the partition's ``max_dbs``) when its writer creates more
(see ``PartitionWrites._grow_table``). A table never holds fewer slots than the databases that
exist: every database created in this process took a slot when it was created, a drop frees
its slot, so a reader in this process always finds a slot for an existing database.

**The allocator.** A writable environment ``calloc``s a 2 MiB dirty-page list and ``malloc``s a
1 MiB free-page list when it opens, and frees both when it closes. glibc serves allocations from
128 KiB up with ``mmap`` (untouched pages cost nothing) but raises that threshold to the size of
any mapped block freed: after the first writable environment closed, every later one got its
2 MiB list from the heap, where ``calloc`` clears the heap's spare top (~140 KiB a time, measured:
184 KiB of heap per environment opened after one was closed, 40 KiB before).
:func:`tune_malloc` fixes the threshold at 1 MiB (and the heap's trim threshold at twice that,
as glibc's own adjustment would) before the first writable environment opens.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading
from typing import Final

__all__ = [
    "DBI_HEADROOM",
    "MALLOC_MMAP_THRESHOLD",
    "MIN_DBI_TABLE",
    "SNAPSHOT_WAIT_S",
    "grown_dbi_table",
    "initial_dbi_table",
    "table_needs_growth",
    "tune_malloc",
]

MIN_DBI_TABLE: Final = 16
"""Slots a writable environment opens with at least (the metadata database and a few stores)."""
DBI_HEADROOM: Final = 4
"""Free slots a writable environment keeps: past ``table - DBI_HEADROOM`` databases, the writer
reopens it with a larger table after its next commit (no snapshot open) or when a write finds
it full."""
SNAPSHOT_WAIT_S: Final = 1.0
"""How long a writer whose write found the dbi table full waits for the snapshots open on its
environment to close before it reopens the environment anyway (invalidating them)."""
MALLOC_MMAP_THRESHOLD: Final = 1 << 20
"""glibc's ``M_MMAP_THRESHOLD`` set by :func:`tune_malloc`: LMDB's 1 MiB and 2 MiB lists mapped."""

_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3
_tuned: list[bool | None] = [None]
_tune_lock = threading.Lock()


def _pow2_at_least(n: int) -> int:
    size = MIN_DBI_TABLE
    while size < n:
        size *= 2
    return size


def initial_dbi_table(named: int, cap: int) -> int:
    """Slots of the dbi table a writable environment holding ``named`` named databases opens
    with, for a partition whose ``max_dbs`` is ``cap``.

    >>> initial_dbi_table(0, 256), initial_dbi_table(20, 256), initial_dbi_table(20, 12)
    (16, 32, 12)
    """
    return min(cap, _pow2_at_least(named + 2 * DBI_HEADROOM))


def table_needs_growth(named: int, table: int, cap: int) -> bool:
    """Whether ``named`` databases leave too little room in a table of ``table`` slots.

    >>> table_needs_growth(12, 16, 256), table_needs_growth(13, 16, 256)
    (False, True)
    >>> table_needs_growth(16, 16, 16)  # at the limit: nothing to grow to
    False
    """
    return table < cap and named + DBI_HEADROOM > table


def grown_dbi_table(named: int, table: int, cap: int) -> int:
    """The next table for ``named`` databases in a table of ``table`` slots (doubled at least).

    >>> grown_dbi_table(13, 16, 256), grown_dbi_table(100, 16, 256), grown_dbi_table(13, 16, 20)
    (32, 128, 20)
    """
    return min(cap, _pow2_at_least(max(2 * table, named + 2 * DBI_HEADROOM)))


def tune_malloc() -> bool:
    """Fix glibc's mmap threshold at :data:`MALLOC_MMAP_THRESHOLD` (see the module docstring),
    once per process; returns whether the process's allocator is tuned. Nothing is done off
    glibc, when ``TXSTORE_MALLOC_TUNING=0``, or when the user tuned malloc already
    (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, ``glibc.malloc`` tunables)."""
    with _tune_lock:
        if _tuned[0] is None:
            _tuned[0] = _apply_tuning()
        return bool(_tuned[0])


def _apply_tuning() -> bool:
    env = os.environ
    if (
        env.get("TXSTORE_MALLOC_TUNING", "1") == "0"
        or "MALLOC_MMAP_THRESHOLD_" in env
        or "MALLOC_TRIM_THRESHOLD_" in env
        or "glibc.malloc" in env.get("GLIBC_TUNABLES", "")
        or platform.libc_ver()[0] != "glibc"
    ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # pragma: no cover - glibc always has it
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(
        mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD)
        and mallopt(_M_TRIM_THRESHOLD, 2 * MALLOC_MMAP_THRESHOLD)
    )
