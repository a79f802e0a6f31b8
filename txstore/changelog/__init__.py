"""The durable changelog (record format, segment files, writer, reader, cleaner) and the
change-logging layer that appends every write of a byte store to it.

May import: ``txstore.bytestores`` (the byte-store interface the layer wraps) and below.
"""

from txstore.changelog.log import (
    BatchIterator,
    Changelog,
    ChangelogRecord,
    CleanResult,
    CleanupPolicy,
    CloseableIterator,
    CommitInfo,
    FileChangelog,
    RecordBatch,
    RecordIterator,
)

__all__ = [
    "BatchIterator",
    "Changelog",
    "ChangelogRecord",
    "CleanResult",
    "CleanupPolicy",
    "CloseableIterator",
    "CommitInfo",
    "FileChangelog",
    "RecordBatch",
    "RecordIterator",
]
