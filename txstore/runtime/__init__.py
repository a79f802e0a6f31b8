"""The runtime: partitions opened as a :class:`Database`, tasks with changelogs and recovery,
materialization of windowed changelogs, snapshots, state directories and their inspection.

May import: ``txstore.stores`` and below.
"""
