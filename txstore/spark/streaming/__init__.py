"""txstore as the state of a Spark Structured Streaming query, exactly once.

::

    from txstore.spark.streaming import StatefulStep

    step = StatefulStep(state_dir="/local/state", num_partitions=4, key="user",
                        processor=count_views, stores=[counts_builder],
                        output_dir="/shared/out")
    query = (events.writeStream.foreachBatch(step.foreach_batch)
             .option("checkpointLocation", "/shared/checkpoint").start())

Every record goes to its Kafka partition (murmur2 of the serialized key,
:mod:`~txstore.spark.streaming.routing`); each partition's records run on an executor in that
partition's :class:`~txstore.runtime.task.Task` (:mod:`~txstore.spark.streaming.worker`), which
commits with the micro-batch id as its input position: a replayed micro-batch is recognised and
skipped, a failed attempt leaves nothing, and the processor's output is committed with the state
and written to one Parquet file per micro-batch and partition. The driver side is
:mod:`~txstore.spark.streaming.step`. The contract is in ``docs/spark.md``.

May import ``txstore.runtime`` and below, and ``txstore.spark``'s own modules; PySpark inside
the functions that run on Spark; pyarrow.
"""

from __future__ import annotations

from txstore.spark.streaming.routing import PARTITION_COLUMN, partitions
from txstore.spark.streaming.step import LAYOUT_FILE, StatefulStep
from txstore.spark.streaming.worker import PartitionContext, output_path

__all__ = [
    "LAYOUT_FILE",
    "PARTITION_COLUMN",
    "PartitionContext",
    "StatefulStep",
    "output_path",
    "partitions",
]
