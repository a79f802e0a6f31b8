"""Sequence numbers of window stores that retain duplicates, kept across restarts.

A window store with ``retain_duplicates`` stores every put of a ``(key, window)`` under its own
sequence number, ``[key][start][seq]`` (1, 2, ... wrapping at 2^31 - 1). Kafka's stores keep
that counter in memory only: it restarts at 0 when a store reopens, so a put after a restart
overwrites the duplicate of the same window written first before it (a join buffer loses a
buffered record). txstore keeps it:

* the counter is **committed with the store**: one row, ``b"last"`` -> the last number used
  (4 bytes, big-endian), in the store's database ``<store>.seq``, staged by the partition's
  commit hook (:meth:`~txstore.engine.base.PartitionBase.on_before_commit`) and written in the
  same LMDB transaction as the store's rows and changelog offset. A reopened store continues
  after it;
* a **restore** continues after the number of the last record it replayed (changelog keys carry
  their sequence number, as Kafka's), so a store rebuilt from its changelog (an in-memory store
  on every start, a persistent one behind its changelog) never reuses a number its changelog
  holds.

Two counters number a store's keys, as in Kafka: the typed store's (``WindowStore.seqnum``, not
advanced by ``put(key, None, t)``) and its change-logging layer's (advanced by every put). Both
continue after the largest of them. The changelog is unchanged: the same records, readable as
Kafka's. Numbers still wrap at 2^31 - 1, as Kafka's.
"""

from __future__ import annotations

import struct
import weakref
from collections.abc import Sequence
from typing import Any, Final, Protocol

from txstore.bytestores.segments import SegmentedBytesStore

__all__ = ["SEQ_DB_SUFFIX", "Counter", "SequenceNumbers", "sequence_numbers"]

#: The suffix of the database holding a store's last sequence number (``<store>.seq``).
SEQ_DB_SUFFIX: Final = "seq"
_KEY: Final = b"last"
_I: Final = struct.Struct(">I")

_BY_STORE: weakref.WeakKeyDictionary[SegmentedBytesStore, SequenceNumbers] = (
    weakref.WeakKeyDictionary()
)


class Counter(Protocol):
    """A layer that numbers duplicates: its ``seqnum`` is the last number it used."""

    seqnum: int


class SequenceNumbers:
    """The committed sequence number of the retain-duplicates window store ``store``, and the
    counters (:class:`Counter`) that number its keys. O(1) to make: one LMDB read."""

    def __init__(self, store: SegmentedBytesStore) -> None:
        self.store = store
        self.db = store.partition.db_name(store.name, SEQ_DB_SUFFIX)
        raw = store.partition.get(self.db, _KEY)
        #: the last sequence number as of the last commit when opened, or of a restore (0: none)
        self.committed = 0 if raw is None else int(_I.unpack(raw)[0])
        self.counters: list[Counter] = []
        self._overlay = None
        overlay = store.partition.overlay
        if store.transactional and overlay is not None and not store.partition.readonly:
            self._overlay = overlay.db(store.name, self.db)
        if not store.partition.readonly:
            store.partition.on_before_commit(store.name, self.before_commit)
        _BY_STORE[store] = self
        # the entry holds its store (through self.store and the counters): a weak key alone
        # would never let it go, so it goes when the store closes
        store.partition.on_detach(_forget)

    def register(self, counter: Counter) -> None:
        """Number ``counter``'s next keys after the committed number."""
        counter.seqnum = max(counter.seqnum, self.committed)
        self.counters.append(counter)

    @property
    def last(self) -> int:
        """The last number any counter used (the committed one if none did since)."""
        return max([self.committed, *(c.seqnum for c in self.counters)])

    def restored(self, keys: Sequence[bytes]) -> None:
        """Restore replayed the changelog records ``keys`` (``[key][start][seq]``, in changelog
        order): the counters continue after the last one's number. O(1)."""
        if not keys or len(keys[-1]) < 12:
            return
        last = keys[-1]
        seq = int(_I.unpack_from(last, len(last) - 4)[0])
        self.committed = max(self.committed, seq)
        for counter in self.counters:
            counter.seqnum = max(counter.seqnum, seq)
        self.before_commit()

    def before_commit(self) -> None:
        """Stage the last number used, to commit with the store's rows (the partition's
        commit hook; every commit, so that a commit that failed or was aborted after staging
        it cannot leave an older number on disk than the rows of the next commit use). O(1).
        """
        row = (_KEY, _I.pack(self.last))
        if self._overlay is not None:
            self._overlay.put(*row)
        else:
            self.store.partition.write_through(self.db, [row])


def _forget(name: str, store: Any) -> None:
    """Drop the entry of a store that closed (the partition's detach hook)."""
    _BY_STORE.pop(store, None)


def sequence_numbers(store: Any) -> SequenceNumbers | None:
    """The :class:`SequenceNumbers` of the bytes store ``store`` (None: not a window store
    that retains duplicates, or opened read-only)."""
    return _BY_STORE.get(store) if isinstance(store, SegmentedBytesStore) else None
