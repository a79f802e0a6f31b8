"""``Task(changelog_dir=...)``: stores on local disk, changelogs elsewhere (no Spark needed)."""

from __future__ import annotations

from pathlib import Path

from txstore.runtime.task import Task
from txstore.stores.factories import Stores
from txstore.stores.serdes import Serdes


def open_counts(path: Path, changelogs: Path) -> Task:
    task = Task(path, changelog_dir=changelogs)
    task.key_value_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
        )
    )
    task.initialize()
    return task


def test_a_task_on_another_local_dir_restores_from_the_shared_changelogs(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    with open_counts(tmp_path / "host-a", shared) as task:
        assert task.changelog_root == shared
        for i in range(50):
            task.store("counts").put(f"k{i % 7}", i)
        task.commit(1)
        task.store("counts").put("uncommitted", 1)  # lost with the close: never committed
    assert (shared / "counts").is_dir()
    assert not (tmp_path / "host-a" / "changelog").exists()
    with open_counts(tmp_path / "host-b", shared) as task:  # empty local dir: a restore
        assert task.input_position == 1
        with task.store("counts").all() as it:
            moved = {kv.key: kv.value for kv in it}
        assert moved == {f"k{j}": max(i for i in range(50) if i % 7 == j) for j in range(7)}
        task.store("counts").put("k0", -1)
        task.commit(2)
    with open_counts(tmp_path / "host-a", shared) as task:  # stale local files catch up
        assert task.input_position == 2
        assert task.store("counts").get("k0") == -1
        assert task.store("counts").get("uncommitted") is None
    with Task(tmp_path / "default") as task:
        assert task.changelog_root == tmp_path / "default" / "changelog"
