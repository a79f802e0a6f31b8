"""``txstore crashtest --damage N``: the damage itself, the classification, the healthy-store
rule, the report, and a short real pass (the harness mechanics; docs/crashtest.md, "Damage").

The pass asserts what the harness does (it runs, classifies every trial, the figures add up)
and, in short, issue 15's target (``txstore crashtest --damage 300 --seed 7`` with 0 silent
divergence, 0 signals and 0 healthy stores changed): the same three at 0 over its trials, among
them zeroed pages of ``data.mdb``.
"""

from __future__ import annotations

import json
import random
import shlex
import shutil
from pathlib import Path

import pytest

from txstore import crashtest
from txstore.cli.crashtest import config_from_args
from txstore.crashtest.common import POSITION_KEY, RunConfig, open_task
from txstore.crashtest.damage import (
    ALL_KINDS,
    FILE_TYPES,
    KINDS,
    LIVE_KINDS,
    PAGE,
    Damage,
    Target,
    apply_damage,
    damage_targets,
    hash_files,
    live_entries,
    plan_damage,
    store_files,
)
from txstore.crashtest.damage_pass import CLASSES, DamagePass, DamageTrial, names_damage
from txstore.crashtest.damage_report import damage_counts, damage_figures, damage_lines
from txstore.crashtest.driver import CrashtestConfig
from txstore.crashtest.model import Model
from txstore.crashtest.replay import replay_command
from txstore.crashtest.state import StateReader
from txstore.crashtest.workload import DEFAULT_WORKLOAD

TRIALS = 20


def _partition(tmp_path: Path, records: int = 300) -> tuple[RunConfig, Model]:
    """A small task of the standard workload (no window or session stores), committed."""
    config = RunConfig(
        path=str(tmp_path / "task"),
        workload=DEFAULT_WORKLOAD,
        seed=2,
        params={"keys": 20, "segmented": False},
        segment_bytes=4096,
        sync=False,
    )
    workload = config.build_workload()
    config.params = workload.params()
    task, stores, position = open_task(config, workload)
    with task:
        task.initialize()
        for i in range(records):
            task.context.timestamp = workload.record(i).ts
            workload.process(stores, workload.record(i))
            if workload.commit_after(i):
                position.put(POSITION_KEY, i + 1)
                task.commit(i + 1)
    model = Model(workload)
    return config, model


# ---- the damage ------------------------------------------------------------------------------


def test_targets_are_the_data_files_of_every_store_never_the_locks(tmp_path: Path) -> None:
    config, _ = _partition(tmp_path)
    part = Path(config.path)
    (part / "changelog" / "counts" / "00000000000000000000.log.cleaned").write_bytes(b"x")
    targets = damage_targets(part)
    names = [t.file for t in targets]
    assert names[0] == "data/data.mdb" and targets[0].store is None
    assert not any(n.endswith(("writer.lock", "lock.mdb")) for n in names)
    types = {t.file_type for t in targets}
    assert types == {"data.mdb", "active segment", "segment", "changelog.json", "temporary"}
    for store in ("latest", "counts", "crashtest_position"):
        mine = [t for t in targets if t.store == store]
        assert sum(t.file_type == "active segment" for t in mine) == 1
        assert any(t.file_type == "changelog.json" for t in mine)
        active = next(t for t in mine if t.file_type == "active segment")
        segments = [t.file for t in mine if t.file_type.endswith("segment")]
        assert active.file == max(segments)  # the last segment is the active one
    assert store_files(part, ["counts"]) == sorted(t.file for t in targets if t.store == "counts")


def test_damage_is_seeded_and_applied_exactly(tmp_path: Path) -> None:
    targets = [Target(f"f{i}", t, None) for i, t in enumerate(FILE_TYPES)]
    sizes = {t.file: 10 * PAGE + 7 for t in targets}
    plans = [plan_damage(random.Random(f"1:damage:{i}"), targets, sizes) for i in range(200)]
    again = [plan_damage(random.Random(f"1:damage:{i}"), targets, sizes) for i in range(200)]
    assert plans == again
    assert {d.kind for d in plans} == set(KINDS)
    assert {d.file_type for d in plans} == set(FILE_TYPES)
    # An empty file can only be deleted.
    empty = plan_damage(random.Random(0), targets[:1], {"f0": 0})
    assert empty.kind == "delete"

    content = bytes(range(256)) * 200 + b"tail"
    for d in plans:
        if d.file_type != "data.mdb":
            continue
        path = tmp_path / d.file
        path.write_bytes(content[: d.size])
        apply_damage(tmp_path, d)
        if d.kind == "delete":
            assert not path.exists()
            continue
        after = path.read_bytes()
        if d.kind == "truncate":
            assert after == content[: d.offset]
        elif d.kind == "zero_page":
            start = (d.offset or 0) // PAGE * PAGE
            assert after[start : start + PAGE] == bytes(min(PAGE, d.size - start))
            assert after[:start] == content[:start] and len(after) == d.size
        else:
            assert 1 <= len(d.flips) <= 4 and d.flips[0][0] == d.offset
            diff = [i for i in range(d.size) if after[i] != content[i]]
            assert diff == [p for p, _ in d.flips]
        assert d.changed
    # Zeroing zeros changes nothing, and says so.
    (tmp_path / "z").write_bytes(bytes(PAGE))
    zero = Damage("z", "spill", None, "zero_page", 5, PAGE, PAGE)
    apply_damage(tmp_path, zero)
    assert not zero.changed and "no change" in zero.describe()


def test_a_refusal_names_the_file_or_its_store() -> None:
    copy = Path("/w/damage/trial-0001/task")
    seg = Damage("changelog/counts/00000000000000000042.log", "segment", "counts", "flip", 3, 1, 9)
    assert names_damage(f"checksum mismatch in {copy / seg.file} at byte 3", seg, copy)
    assert names_damage(f"changelog {copy}/changelog/counts ends at 13", seg, copy)
    assert names_damage("store 'counts' is at changelog offset 17", seg, copy)
    assert not names_damage("the counts differ", seg, copy)
    assert not names_damage("checksum mismatch in 00000000000000000042.log", seg, copy)
    data = Damage("data/data.mdb", "data.mdb", None, "truncate", 5, 5, 10)
    assert names_damage(f"{copy}/data: MDB_CORRUPTED", data, copy)
    assert names_damage("data.mdb is shorter than its last page", data, copy)
    assert not names_damage("MDB_CORRUPTED: Located page was wrong type", data, copy)


# ---- the healthy-store rule, and a signal caught as a signal ---------------------------------


def _pass(tmp_path: Path, config: RunConfig, module: str = "") -> DamagePass:
    workload = config.build_workload()
    p = DamagePass(1, 3, tmp_path / "work", config, workload, timeout=60)
    if module:
        p.child_module = module
    return p


def test_a_healthy_file_may_stay_or_become_what_the_undamaged_recovery_made_of_it(
    tmp_path: Path,
) -> None:
    config, _ = _partition(tmp_path)
    p = _pass(tmp_path, config)
    p.after_kill(0, "random")
    pending = p.pending[0]
    assert pending.healthy == [s for s in p.stores if s != pending.trial.damage.store]
    healthy = next(f for f in store_files(pending.copy, pending.healthy) if f.endswith(".log"))
    original = Path(config.path) / healthy
    copy = pending.copy / healthy
    copy.write_bytes(copy.read_bytes() + b"junk")  # as if recovery had rewritten it
    p._check_files(pending)
    assert pending.trial.healthy_changed == [
        f"{healthy}: rewritten by the reopen (the undamaged recovery left it different)"
    ]
    pending.trial.healthy_changed.clear()
    original.write_bytes(copy.read_bytes())  # the undamaged recovery did the same
    p._check_files(pending)
    assert pending.trial.healthy_changed == []
    assert hash_files(pending.copy, [healthy]) == hash_files(Path(config.path), [healthy])


def test_a_child_killed_by_a_signal_is_classified_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, model = _partition(tmp_path)
    module = tmp_path / "mods" / "segv_child.py"
    module.parent.mkdir()
    module.write_text(
        "import os, signal, json, sys\n"
        "print(json.dumps({'ev': 'phase', 'phase': 'reopen'}), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGSEGV)\n"
    )
    monkeypatch.syspath_prepend(str(module.parent))
    p = _pass(tmp_path, config, "segv_child")
    p.after_kill(0, "random")
    p.run_pending(0, model, {})
    (trial,) = p.trials
    assert (trial.outcome, trial.signal, trial.phase) == ("signal", "SIGSEGV", "reopen")
    assert trial.kept is not None and Path(trial.kept, "task").is_dir()
    assert not Path(p.dir, "trial-0000").exists()


_RAISING_CHILD = """
import json, pickle, sys
error = {"type": "KeyError", "module": "builtins", "typed": False, "message": "'x'",
         "where": "txstore/somewhere.py:12 in f", "traceback": ""}
result = {"outcome": {"ok": False, "error": error, "phase": "reopen"}, "before": None,
          "before_error": None, "after": None, "after_error": None}
with open(sys.argv[2], "wb") as f:
    pickle.dump(result, f)
"""


def test_an_exception_that_is_no_txstore_error_is_untyped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, model = _partition(tmp_path)
    module = tmp_path / "mods" / "raising_child.py"
    module.parent.mkdir()
    module.write_text(_RAISING_CHILD)
    monkeypatch.syspath_prepend(str(module.parent))
    p = _pass(tmp_path, config, "raising_child")
    p.after_kill(0, "random")
    p.run_pending(0, model, {})
    (trial,) = p.trials
    assert (trial.outcome, trial.error_type, trial.phase) == ("untyped", "KeyError", "reopen")
    assert trial.note == "not a TxStoreError, raised at txstore/somewhere.py:12 in f"


def test_an_undamaged_looking_trial_is_exact(tmp_path: Path) -> None:
    """A trial whose damaged file is put back reopens exactly: the classification's base
    case, and the rule's (the reopen of an undamaged copy changes no healthy file)."""
    config, model = _partition(tmp_path)
    p = _pass(tmp_path, config)
    p.after_kill(0, "random")
    pending = p.pending[0]
    # Undo the damage: the copy is the original again (lock files apart).
    rel = pending.trial.damage.file
    (pending.copy / rel).write_bytes((Path(config.path) / rel).read_bytes())
    workload = config.build_workload()
    position = max(i + 1 for i in range(300) if workload.commit_after(i))
    model.advance(position)
    p.run_pending(position, model, _offsets(config))
    (trial,) = p.trials
    assert trial.outcome == "exact", trial
    assert trial.position == position and not trial.healthy_changed and trial.kept is None


def _offsets(config: RunConfig) -> dict[str, int | None]:
    with StateReader(config, config.build_workload()) as reader:
        return reader.offsets()


# ---- report and command line -----------------------------------------------------------------


def test_report_section_and_figures_add_up() -> None:
    d = Damage("changelog/counts/00000000000000000000.log", "segment", "counts", "flip", 3, 1, 9)
    trials = [DamageTrial(i, i, "random", d, outcome=c) for i, c in enumerate(CLASSES)]
    trials[1].error_type, trials[1].error = "ChangelogCorruptionError", "checksum mismatch"
    trials[0].healthy_changed = ["changelog/latest/x.log: rewritten by the reopen"]
    counts = damage_counts(trials)
    assert [counts[c] for c in CLASSES] == [1] * 5 and counts["healthy_store_changed"] == 1
    figures = damage_figures(trials)
    assert figures[0] == "figure: damage_trials = 5"
    assert "figure: damage_silent_divergence = 1" in figures
    assert "figure: damage_signals = 1" in figures
    assert "figure: damage_healthy_store_changed = 1" in figures
    text = "\n".join(damage_lines(trials))
    assert "segment" in text and "checksum mismatch" in text and "rewritten by the reopen" in text


def test_damage_on_the_command_line() -> None:
    c = config_from_args(["--damage", "7"])
    assert (c.damage, c.kills, c.wipe_sizes) == (7, 7, [])
    c = config_from_args(["--damage", "7", "--kills", "9"])
    assert (c.damage, c.kills) == (7, 9)
    c = config_from_args([])
    assert (c.damage, c.kills, c.wipe_sizes) == (0, 50, [10_000, 100_000])
    argv = shlex.split(replay_command(CrashtestConfig(seed=4, kills=9, damage=7), 3))
    assert argv[:2] == ["txstore", "crashtest"]
    back = config_from_args(argv[2:])
    assert (back.damage, back.kills, back.replay, back.seed) == (7, 9, 3, 4)


# ---- a short real pass ---------------------------------------------------------------------


def test_damage_pass_classifies_every_trial_and_the_figures_add_up(tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = crashtest.run(
        seed=7,
        kills=TRIALS,
        damage=TRIALS,
        reader=False,
        sync=False,
        workdir=str(tmp_path / "work"),
        out=str(out),
        plot=False,
        progress=False,
    )
    summary = report.summary()
    assert (report.lost, report.leaked) == (0, 0), summary
    assert report.failure is None or report.failure["message"].startswith("damage trials"), summary
    assert len(report.damage) == TRIALS, summary
    assert [t.index for t in report.damage] == list(range(TRIALS))
    for t in report.damage:
        assert t.outcome in CLASSES and t.damage.kind in ALL_KINDS, t
        assert t.damage.file_type in FILE_TYPES, t
        assert (t.damage.offset is None) == (t.damage.kind == "delete"), t
        if t.outcome == "refused":
            assert t.error_type and t.error, t
        if t.outcome == "signal":
            assert t.signal and t.signal.startswith("SIG"), t
    counts = damage_counts(report.damage)
    assert sum(counts[c] for c in CLASSES) == TRIALS
    assert counts["exact"] > 0 and counts["refused"] > 0, summary
    figures = dict(
        line.removeprefix("figure: ").split(" = ")
        for line in summary.splitlines()
        if line.startswith("figure: damage_")
    )
    assert int(figures["damage_trials"]) == TRIALS
    parts = ("exact", "refused", "untyped", "silent_divergence", "signals")
    assert sum(int(figures[f"damage_{k}"]) for k in parts) == TRIALS
    assert int(figures["damage_healthy_store_changed"]) == counts["healthy_store_changed"]
    assert report.ok == (
        counts["silent_divergence"] == counts["signal"] == counts["healthy_store_changed"] == 0
    )
    # Issue 15's target, in short: recovery never makes damage worse. Seed 7 zeroes a page of
    # data.mdb in trials 4 and 10 (trial 10 died of SIGABRT in mdb_cursor_next before the page
    # walk, txstore.engine.lmdb_pages).
    zeroed = [
        t for t in report.damage if (t.damage.file_type, t.damage.kind) == ("data.mdb", "zero_page")
    ]
    assert zeroed and all(t.outcome in ("exact", "refused") for t in zeroed), summary
    assert counts["signal"] == 0, summary
    assert counts["silent_divergence"] == 0, summary
    assert counts["healthy_store_changed"] == 0, summary
    assert report.ok, summary
    doc = json.loads((out / "crashtest.json").read_text())
    assert doc["damage"]["totals"] == counts
    assert len(doc["damage"]["trials"]) == TRIALS
    # Trial copies are gone; only kept examples remain.
    left = sorted(p.name for p in (tmp_path / "work" / "damage").iterdir())
    assert all(name.endswith(".damaged") for name in left), left
    assert len(left) == sum(1 for t in report.damage if t.kept)


# ---- damage inside live entries (issue 24) ---------------------------------------------------


def _live_damages(path: Path) -> list[Damage]:
    """One ``flip_value`` and one ``flip_key`` damage per store of ``path``, as drawn."""
    entries = live_entries(path)
    data = (path / "data" / "data.mdb").read_bytes()
    target = [Target("data/data.mdb", "data.mdb", None)]
    sizes = {"data/data.mdb": len(data)}
    found: dict[tuple[str, str], Damage] = {}
    for i in range(2000):
        d = plan_damage(random.Random(f"live:{i}"), target, sizes, entries, data)
        if d.kind in LIVE_KINDS and d.entry is not None:
            store = d.entry.split(" ")[0].split(".")[0]
            found.setdefault((store, d.kind), d)
    return list(found.values())


def test_live_flips_hit_the_values_and_keys_of_every_store(tmp_path: Path) -> None:
    config, _ = _partition(tmp_path)
    path = Path(config.path)
    stores = {e.db.decode().split(".")[0] for e in live_entries(path)}
    assert {"counts", "crashtest_position"} <= stores
    damages = _live_damages(path)
    assert {(d.entry or "").split(" ")[0].split(".")[0] for d in damages} == stores
    assert {d.kind for d in damages} == set(LIVE_KINDS)
    before = (path / "data" / "data.mdb").read_bytes()
    for d in damages:
        assert d.file_type == "data.mdb" and d.store is None and d.flips
        copy = tmp_path / f"copy-{d.kind}-{d.offset}"
        shutil.copytree(path, copy)
        apply_damage(copy, d)
        after = (copy / "data" / "data.mdb").read_bytes()
        assert [i for i in range(len(before)) if before[i] != after[i]] == [p for p, _ in d.flips]


def test_a_live_flip_is_healed_or_refused_never_a_silent_divergence(tmp_path: Path) -> None:
    """Each store's value flip in a damage trial: the reopened task's read finds the checksum
    mismatch, the task is opened again and rebuilds the store from its changelog (exact, with
    a note), or the damage is refused; never a wrong value."""
    config, model = _partition(tmp_path)
    workload = config.build_workload()
    position = max(i + 1 for i in range(300) if workload.commit_after(i))
    model.advance(position)
    damages = [d for d in _live_damages(Path(config.path)) if d.kind == "flip_value"]
    outcomes = []
    for n, d in enumerate(damages):
        p = _pass(tmp_path / f"p{n}", config)
        p.after_kill(0, "random")
        pending = p.pending[0]
        shutil.rmtree(pending.copy)
        shutil.copytree(
            config.path, pending.copy, ignore=shutil.ignore_patterns("writer.lock", "lock.mdb")
        )
        apply_damage(pending.copy, d)
        pending.trial.damage = d
        pending.lmdb_healthy = []  # data.mdb was damaged
        p.run_pending(position, model, _offsets(config))
        (trial,) = p.trials
        assert trial.outcome in ("exact", "refused"), trial
        outcomes.append((trial.outcome, trial.note))
    assert any(o == "exact" and note.startswith("healed") for o, note in outcomes), outcomes
