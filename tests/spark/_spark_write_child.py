"""A child process with its own local Spark session, for the writer tests that need one:

* ``retry STATE MARKER``: ``local[2,2]`` (a failed task is retried once); a UDF fails the first
  attempt of Spark partition 0 after it staged some batches (it creates ``MARKER`` first, so
  the retry passes); the write must still be applied exactly once.
* ``sink STATE INPUT CHECKPOINT``: a streaming query from JSON files (one file per micro-batch)
  into the txstore sink, ``availableNow``; prints ``QUERY FAILED`` and waits to be killed when
  the query dies (the test arms ``TXSTORE_FAULTS`` to kill the commit mid-batch), ``DONE``
  when it finished.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def session(master: str) -> object:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *paths])
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName("txstore-write-child")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
        .config("spark.sql.execution.python.udf.maxRecordsPerBatch", "10")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("OFF")
    import txstore.spark

    txstore.spark.register(spark)
    return spark


def retry(state: str, marker: str) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    spark: object = session("local[2,2]")

    def fail_once(i):
        if i == 75 and not os.path.exists(marker):
            Path(marker).touch()
            raise RuntimeError("first attempt fails on purpose")
        return i

    udf = F.udf(fail_once, LongType())
    df = spark.range(0, 200, numPartitions=2).select(  # type: ignore[attr-defined]
        F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
        udf(F.col("id")).alias("value"),
    )
    df.write.format("txstore").mode("append").option("store", "s").option(
        "numPartitions", "3"
    ).save(state)
    print("DONE", flush=True)
    spark.stop()  # type: ignore[attr-defined]


def sink(state: str, source: str, checkpoint: str) -> None:
    spark: object = session("local[1]")
    stream = (
        spark.readStream.format("json")  # type: ignore[attr-defined]
        .schema("key STRING, value BIGINT")
        .option("maxFilesPerTrigger", "1")
        .load(source)
    )
    query = (
        stream.writeStream.format("txstore")
        .option("store", "s")
        .option("numPartitions", "3")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(state)
    )
    try:
        query.awaitTermination()
    except Exception as exc:  # the commit worker was killed: wait for the test's SIGKILL
        print(f"QUERY FAILED {type(exc).__name__}: {str(exc)[:3000]}", flush=True)
        time.sleep(600)
    print("DONE", flush=True)
    spark.stop()  # type: ignore[attr-defined]


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "retry":
        retry(*args)
    else:
        sink(*args)
