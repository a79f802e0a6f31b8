"""``df.write.format("txstore")`` and ``writeStream.format("txstore")``: PySpark's writer classes.

Both follow :mod:`txstore.spark.writer` (tasks stage, the driver commits or aborts); options
and columns are :mod:`txstore.spark.write_plan`'s.

* :class:`TxStoreBatchWriter` (modes ``append`` and ``overwrite``): the driver's ``commit``
  applies the staged rows with each partition's input position unchanged.
* :class:`TxStoreStreamWriter`: ``commit(messages, batchId)`` applies micro-batch ``batchId``
  with input position ``batchId + 1``, skipping every partition whose input position is past
  ``batchId`` already. Spark replays the last micro-batch after a crash (its offsets were
  logged, its commit was not); the partitions that committed it skip it, the others apply it:
  each row reaches the store once. One streaming query per store.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from txstore.spark.write_plan import WritePlan
from txstore.spark.writer import StagedFile, apply_staged, discard, stage_task, staged_files

__all__ = ["StagedMessage", "TxStoreBatchWriter", "TxStoreStreamWriter"]


@dataclass(frozen=True)
class StagedMessage(WriterCommitMessage):
    """What one task staged (its commit message)."""

    files: tuple[StagedFile, ...]


def _keep(last: int | None) -> int:
    return 0 if last is None else last


class TxStoreBatchWriter(DataSourceArrowWriter):
    """One batch write (see the module docstring)."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        return StagedMessage(tuple(stage_task(self.plan, iterator)))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        try:
            apply_staged(self.plan, list(staged_files(messages)), _keep)
        finally:
            discard(staged_files(messages), self.plan.write_dir())

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        discard(staged_files(messages), self.plan.write_dir())


class TxStoreStreamWriter(DataSourceStreamArrowWriter):
    """The streaming sink (see the module docstring)."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        return StagedMessage(tuple(stage_task(self.plan, iterator)))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        def position(last: int | None) -> int | None:
            return None if last is not None and last > batchId else batchId + 1

        try:
            apply_staged(self.plan, list(staged_files(messages)), position)
        finally:
            discard(staged_files(messages), self.plan.write_dir())

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        discard(staged_files(messages), self.plan.write_dir())
