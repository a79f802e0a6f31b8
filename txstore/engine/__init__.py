"""The engine: one LMDB environment per partition, its overlay of uncommitted writes, spill,
commit, recover, merge iterators, read-committed views and snapshots; speaks only ``bytes``.

May import: ``txstore.errors``, ``txstore.faults``, ``txstore.types`` and ``txstore.codecs``.
"""
