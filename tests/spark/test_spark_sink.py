"""``writeStream.format("txstore")``: a streaming query killed in the middle of a micro-batch
and restarted from its checkpoint applies every batch exactly once.

The query runs in a child process (``_spark_write_child.py sink``) reading one JSON file per
micro-batch. The first run arms ``TXSTORE_FAULTS`` so that the driver's commit of a batch is
SIGKILLed after one partition committed it and while a second had committed only its
changelog; the test then SIGKILLs the whole query (driver JVM and workers). The second run
restarts from the checkpoint: Spark replays the batch, the partitions that hold it skip it,
the others apply it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from txstore.changelog.log import FileChangelog
from txstore.codecs import partition_for_key
from txstore.engine.partition import Partition
from txstore.runtime.catalog import open_view

pytest.importorskip("pyspark")

pytestmark = pytest.mark.filterwarnings("error")

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("_spark_write_child.py")
PARTS, BATCHES, KEYS = 3, 4, 10


def _start(args: list[str], out: Path, faults: str | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TXSTORE_FAULTS", None)
    if faults:
        env["TXSTORE_FAULTS"] = faults
    with out.open("wb") as f:
        return subprocess.Popen(
            [sys.executable, str(CHILD), "sink", *args],
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_for(out: Path, proc: subprocess.Popen[bytes], words: tuple[str, ...]) -> str:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        text = out.read_text(errors="replace")
        for word in words:
            if word in text:
                return word
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"the query printed none of {words}:\n{out.read_text()[-3000:]}")


def _log(state: Path, p: int) -> tuple[int, int | None]:
    with (
        FileChangelog(state / str(p) / "changelog" / "s", readonly=True) as log,
        log.read_committed() as it,
    ):
        return sum(1 for _ in it), log.last_committed_input_position


def test_killed_query_restarts_from_its_checkpoint_exactly_once(tmp_path: Path) -> None:
    source, state, checkpoint = tmp_path / "in", tmp_path / "state", tmp_path / "checkpoint"
    source.mkdir()
    for b in range(BATCHES):
        lines = [json.dumps({"key": f"k{i}", "value": b * 100 + i}) for i in range(KEYS)]
        path = source / f"batch-{b}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_000_000 + b, 1_000_000 + b))  # the file source goes by mtime
    args = [str(state), str(source), str(checkpoint)]

    # run 1: the commit of batch 0 dies at its second partition's commit; then kill it all
    out1 = tmp_path / "run1.txt"
    proc = _start(args, out1, "task.after_changelog_commit=2")
    try:
        assert _wait_for(out1, proc, ("QUERY FAILED", "DONE")) == "QUERY FAILED"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not list((checkpoint / "commits").glob("[0-9]*"))  # Spark never saw it committed
    positions = [_log(state, p)[1] for p in range(PARTS)]
    assert positions.count(1) == 2 and positions.count(None) == 1, positions  # mid-batch

    # run 2: restart from the checkpoint, no faults
    out2 = tmp_path / "run2.txt"
    proc = _start(args, out2, None)
    try:
        assert _wait_for(out2, proc, ("DONE", "QUERY FAILED")) == "DONE"
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    routed = [0] * PARTS
    for i in range(KEYS):
        routed[partition_for_key(f"k{i}".encode(), PARTS)] += 1
    for p in range(PARTS):
        records, position = _log(state, p)
        assert records == routed[p] * BATCHES  # every row of every batch once
        assert position == BATCHES  # input position = next micro-batch id
    values = {}
    for p in range(PARTS):
        with (
            Partition(state / str(p), readonly=True) as part,
            open_view(part, "s") as view,
            view.rows() as it,
        ):
            values.update({k.decode(): int.from_bytes(v, "big") for k, v in it})
    assert values == {f"k{i}": (BATCHES - 1) * 100 + i for i in range(KEYS)}
    assert not any((state / "_spark_staging").iterdir())
