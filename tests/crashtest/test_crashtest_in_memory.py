"""The crash harness's in-memory stores (issue 17): the writer reports their restored state,
the driver checks it against the model like any other store's."""

from __future__ import annotations

from pathlib import Path

from txstore.crashtest.common import POSITION_KEY, RunConfig, open_task
from txstore.crashtest.driver import CrashtestConfig, Driver
from txstore.crashtest.model import Check, Model
from txstore.crashtest.report import CrashtestReport
from txstore.crashtest.state import (
    StateReader,
    add_in_memory,
    check_changelogs,
    check_state,
    encode_in_memory,
)
from txstore.crashtest.workload import DEFAULT_WORKLOAD


def test_restored_in_memory_stores_are_checked_against_the_model(tmp_path: Path) -> None:
    config = RunConfig(
        path=str(tmp_path / "task"),
        workload=DEFAULT_WORKLOAD,
        seed=4,
        params={"keys": 20, "in_memory": True},
        segment_bytes=4096,
        sync=False,
    )
    workload = config.build_workload()
    assert {"mem_latest", "mem_counts", "ts_sessions"} <= {s.name for s in workload.stores()}
    task, stores, position_store = open_task(config, workload)
    with task:
        task.initialize()
        committed = 0
        for i in range(400):
            rec = workload.record(i)
            task.context.timestamp = rec.ts
            workload.process(stores, rec)
            if workload.commit_after(i):
                committed = i + 1
                position_store.put(POSITION_KEY, committed)
                task.commit(committed)
    assert 0 < committed < 400  # records after the last commit were processed, not committed
    task, stores, _ = open_task(config, workload)
    with task:
        report = task.initialize()
        assert report.restored["mem_counts"] > 0 and report.restored["mem_latest"] > 0
        encoded = encode_in_memory(workload, stores)
        seq = task.commit_sequence
    with StateReader(config, workload) as reader:
        obs = reader.observe()
    assert "mem_counts" not in obs.states  # no other process sees an in-memory store
    add_in_memory(obs, encoded)
    check = Check()
    check_changelogs(config.path, obs, committed, seq, check)
    check_state(workload, Model(workload), obs, check)
    assert check.ok and check.lost == check.leaked == 0, check.findings
    # A key missing from the restored in-memory store is lost; an extra one leaked.
    key = next(iter(obs.states["mem_counts"]))
    obs.states["mem_counts"].pop(key)
    obs.states["mem_latest"]["k99999"] = next(iter(obs.states["mem_latest"].values()))
    check = Check()
    check_state(workload, Model(workload), obs, check)
    assert check.lost == 1 and check.leaked == 1
    assert {f.store for f in check.findings} == {"mem_counts", "mem_latest"}


def test_damage_runs_have_the_in_memory_stores_too(tmp_path: Path) -> None:
    """The damage trial's child reads the in-memory stores in the task it reopened (no other
    process sees them), so every run has them unless the workload is told otherwise."""
    for damage in (0, 2):
        config = CrashtestConfig(damage=damage, progress=False)
        work = tmp_path / str(damage)
        work.mkdir()
        driver = Driver(config, work, CrashtestReport(config={}))
        names = {s.name for s in driver.workload.stores()}
        assert {"mem_counts", "mem_latest"} <= names
    config = CrashtestConfig(damage=2, workload_params={"in_memory": False}, progress=False)
    (tmp_path / "x").mkdir()
    driver = Driver(config, tmp_path / "x", CrashtestReport(config={}))
    assert not any(s.in_memory for s in driver.workload.stores())
