"""The driver side of the stateful step: :class:`StatefulStep` and its ``foreachBatch``.

For micro-batch ``batch_id``, :meth:`StatefulStep.foreach_batch`:

1. adds the partition of every record (:mod:`txstore.spark.streaming.routing`, ``mapInArrow``:
   Kafka's murmur2 on the serialized key, a C call per Arrow batch);
2. ``repartitionById`` on it, so that Spark partition ``p`` holds exactly the records of
   Kafka partition ``p``;
3. runs each partition in its Task (``mapInArrow``:
   :func:`~txstore.spark.streaming.worker.run_partition`), committing with ``batch_id + 1``
   as the input position;
4. collects one summary row per partition (:attr:`StatefulStep.last_batch`).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from txstore.errors import ConfigConflictError, InvalidArgumentError, InvalidTypeError
from txstore.runtime.statedir import partition_dirs
from txstore.runtime.task import Task
from txstore.spark.streaming import worker
from txstore.spark.streaming.routing import PARTITION_COLUMN, add_partition_column
from txstore.stores.builders import KeyValueStoreBuilder, SessionStoreBuilder, WindowStoreBuilder
from txstore.stores.factories import Stores
from txstore.stores.serdes import Serdes, serde_by_name

__all__ = ["LAYOUT_FILE", "Processor", "StatefulStep"]

#: The file in the state directory (and the changelog directory) that records the step's
#: partition count and stores; a step with other values is refused.
LAYOUT_FILE = "pipeline.json"

Processor = Callable[[worker.PartitionContext, pa.Table], None]
Builder = (
    KeyValueStoreBuilder[Any, Any] | WindowStoreBuilder[Any, Any] | SessionStoreBuilder[Any, Any]
)


@dataclass
class StatefulStep:
    """A stateful step of a Structured Streaming query, with its state in txstore.

    ``processor(ctx, records)`` gets the records of one partition in one micro-batch (a
    ``pyarrow.Table`` in input order, or sorted by ``order_by``) and the partition's stores
    (``ctx.store(name)``); it may emit output rows (``ctx.emit``). ``stores()`` returns the
    builders of the stores every partition has (a function, so that the step travels to the
    executors without pickling serdes). ``key`` is the input column that decides the partition
    (serialized by the serde registered as ``key_serde``, hashed by Kafka's default
    partitioner).

    Store files live in ``state_dir/<partition>/`` on the executor's local disk; changelogs in
    ``changelog_dir/<partition>/<store>/`` when ``changelog_dir`` is given (storage that every
    executor reaches), else next to the stores. Emitted rows go to Parquet files
    ``output_dir/batch_id=<id>/part-<partition>.parquet``, each written once per micro-batch
    and partition from the outbox store committed with the state.

    Use it as ``df.writeStream.foreachBatch(step.foreach_batch)`` with a checkpoint location;
    the source must replay a micro-batch with the same records (a file source, ``rate``, Kafka).
    """

    state_dir: str
    num_partitions: int
    key: str
    processor: Processor
    stores: Callable[[], Sequence[Builder]]
    key_serde: str = "string"
    changelog_dir: str | None = None
    output_dir: str | None = None
    output_schema: pa.Schema | None = None
    order_by: Sequence[str] = ()
    outbox_store: str = "outbox"
    sync: bool = True
    overlay_budget_bytes: int = 64 * 2**20
    lock_timeout_s: float = 120.0
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    last_batch: list[dict[str, Any]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        n = self.num_partitions
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidArgumentError(f"num_partitions must be an int >= 1, got {n!r}")
        if not callable(self.processor):
            raise InvalidTypeError("processor must be a callable (ctx, records) -> None")
        self.state_dir = os.fspath(self.state_dir)
        if self.changelog_dir is not None:
            self.changelog_dir = os.fspath(self.changelog_dir)
        if self.output_dir is not None:
            self.output_dir = os.fspath(self.output_dir)
        if not callable(self.stores):
            raise InvalidTypeError("stores must be a function returning the store builders")
        serde_by_name(self.key_serde)  # an unknown name raises here, on the driver
        builders = self.builders()
        names = [b.name for b in builders]
        for b in builders:
            if not isinstance(b, KeyValueStoreBuilder | WindowStoreBuilder | SessionStoreBuilder):
                raise InvalidTypeError(f"stores must be store builders, got {type(b).__name__}")
        if len(set(names)) != len(names) or self.outbox_store in names:
            raise InvalidArgumentError(
                f"store names must be distinct and not the outbox's ({self.outbox_store!r}): "
                f"{names}"
            )

    # ---- what every partition opens -------------------------------------------------------

    def builders(self) -> list[Builder]:
        """The builders of the step's stores (``stores()``)."""
        return list(self.stores())

    def open_stores(self, task: Task) -> None:
        """Open the step's stores and its outbox in ``task`` (before ``initialize``)."""
        for b in self.builders():
            if isinstance(b, KeyValueStoreBuilder):
                task.key_value_store(b)
            elif isinstance(b, WindowStoreBuilder):
                task.window_store(b)
            else:
                task.session_store(b)
        task.key_value_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store(self.outbox_store),
                Serdes.bytes(),
                Serdes.bytes(),
            )
        )

    def open_task(self, partition: int) -> Task:
        """The Task of ``partition`` with the step's stores, recovered and restored (for a
        check or a repair after the query stopped; a worker that still holds it makes this
        wait, see :meth:`release`). The caller closes it."""
        worker.check_partition(partition, self.num_partitions)
        return worker.open_task(self, partition)

    def coordination_dir(self, partition: int) -> Path:
        """Where a worker asks the holder of ``partition``'s Task to let go of it: the
        partition's changelog directory (shared when ``changelog_dir`` is)."""
        if self.changelog_dir is not None:
            return Path(self.changelog_dir) / str(partition)
        return Path(self.state_dir) / str(partition) / "changelog"

    def layout(self) -> dict[str, Any]:
        """What :data:`LAYOUT_FILE` records: partition count, key column, store names."""
        return {
            "num_partitions": self.num_partitions,
            "key": self.key,
            "stores": sorted(b.name for b in self.builders()),
        }

    def check_layout(self) -> None:
        """Refuse a state (or changelog) directory made with another partition count, key or
        set of stores (:class:`~txstore.errors.ConfigConflictError`); record the layout in a
        new one. Called by :meth:`foreach_batch` before anything runs."""
        mine = self.layout()
        for root in filter(None, (self.state_dir, self.changelog_dir)):
            path = Path(root) / LAYOUT_FILE
            if path.exists():
                theirs = json.loads(path.read_text())
                if theirs != mine:
                    diff = {k: (theirs.get(k), mine[k]) for k in mine if theirs.get(k) != mine[k]}
                    raise ConfigConflictError(
                        f"{root!r} holds the state of a step with another layout "
                        f"(on disk -> this step: {diff}); the partition of a key depends on "
                        "the partition count, so use a new state directory; nothing was written"
                    )
                continue
            Path(root).mkdir(parents=True, exist_ok=True)
            extra = [p for p in _partitions(root) if p >= self.num_partitions]
            if extra:
                raise ConfigConflictError(
                    f"{root!r} holds partitions {extra}, not below num_partitions="
                    f"{self.num_partitions}; nothing was written"
                )
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(mine))
            os.replace(tmp, path)

    # ---- the micro-batch ------------------------------------------------------------------

    def foreach_batch(self, df: Any, batch_id: int) -> None:
        """Apply micro-batch ``batch_id`` of ``df`` (``writeStream.foreachBatch``)."""
        self.last_batch = [r.asDict() for r in self.plan(df, batch_id).collect()]

    def plan(self, df: Any, batch_id: int) -> Any:
        """The DataFrame of summaries whose collection applies the micro-batch (one row per
        partition that got records: partition, batch_id, records, skipped, outputs...)."""
        from pyspark.sql.types import IntegerType, StructField, StructType

        self.check_layout()
        routed_schema = StructType(
            [*df.schema.fields, StructField(PARTITION_COLUMN, IntegerType(), False)]
        )
        key, serde_name, n = self.key, self.key_serde, self.num_partitions
        if key not in df.columns:
            raise InvalidArgumentError(f"the key column {key!r} is not in {df.columns}")

        def route(batches: Any) -> Any:
            serde = serde_by_name(serde_name)
            for b in batches:
                yield add_partition_column(b, key, serde, n)

        step = self

        def run(batches: Any) -> Any:
            return worker.run_partition(step, batch_id, batches)

        routed = df.mapInArrow(route, routed_schema).repartitionById(n, PARTITION_COLUMN)
        return routed.mapInArrow(run, _spark_schema(worker.SUMMARY_SCHEMA))

    def release(self, timeout_s: float = 1.0) -> int:
        """Ask every worker on this host that holds a Task of the step to close it (call after
        the query stopped); the number of partitions whose holder let go within ``timeout_s``.
        Idle workers that Spark stops instead lose nothing: every batch was committed."""
        asked = []
        for p in range(self.num_partitions):
            d = self.coordination_dir(p)
            if d.is_dir():
                (d / worker.RELEASE_FILE).touch()
                asked.append(d / worker.RELEASE_FILE)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(f.exists() for f in asked):
            time.sleep(worker.POLL_S)
        left = [f for f in asked if f.exists()]
        for f in left:  # nobody held these
            f.unlink(missing_ok=True)
        return len(asked) - len(left)


def _partitions(root: str) -> list[int]:
    try:
        return sorted(partition_dirs(root))
    except InvalidArgumentError:
        return []


def _spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
