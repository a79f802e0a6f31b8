"""A Structured Streaming query of the counting step, run as a real child process by
test_driver_kill.py: ``python -m tests.spark.pipeline._query_child ROOT``.

JSON files in ``ROOT/input`` (one per micro-batch), state in ``ROOT/state``, checkpoint in
``ROOT/checkpoint``; every micro-batch's summary rows are appended to ``ROOT/summaries.jsonl``.
Runs with ``local[2,2]`` (a failed Spark task is retried once) until the input is consumed
(``availableNow``), then releases the Tasks and prints ``done``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tests.spark.pipeline.common import counting_step

SCHEMA = "user string, v long, sleep_ms long, fail_once boolean"


def main(root: Path) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2,2]")
        .appName("txstore-pipeline-child")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    step = counting_step(root)

    def apply(df: Any, batch_id: int) -> None:
        step.foreach_batch(df, batch_id)
        with open(root / "summaries.jsonl", "a", encoding="utf-8") as f:
            for row in step.last_batch:
                f.write(json.dumps(row) + "\n")

    events = (
        spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(root / "input"))
    )
    query = (
        events.writeStream.foreachBatch(apply)
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    step.release()
    spark.stop()
    print("done", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
