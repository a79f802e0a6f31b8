"""The crash harness's CI pass: about 50 real SIGKILLs covering every crash point.

``make test`` runs this (well under two minutes on two cores). The long pass is
``txstore crashtest --kills 1000`` (docs/crashtest.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from txstore import crashtest
from txstore.crashtest.plan import RANDOM, reachable_points

KILLS = 50


def test_ci_pass_loses_nothing_leaks_nothing_and_hits_every_crash_point(tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = crashtest.run(
        seed=11,
        kills=KILLS,
        workdir=str(tmp_path / "work"),
        out=str(out),
        wipe_sizes=[2_000, 10_000],
        wipe_repeats=1,
        progress=False,
    )
    summary = report.summary()
    assert report.failure is None, summary
    assert (report.lost, report.leaked) == (0, 0), summary
    assert len(report.kills) == KILLS

    # Every crash point the workload can reach was hit (the writer died exactly there), and
    # random-moment kills happened too.
    assert {s["kind"] for s in report.stores} == {"key_value", "window", "session"}
    hit = report.points_hit()
    assert not report.unreachable
    missing = [p for p in reachable_points(segmented=True) if not hit.get(p)]
    assert not missing, summary
    assert hit.get(RANDOM, 0) > 0
    assert any(k.phase == "recovery" for k in report.kills)  # crashes during restore

    # Every kill was followed by a checked recovery (or by a kill during recovery), plus the
    # first start and the final rebuild of every store from its changelog.
    assert len(report.after_kills()) == sum(1 for k in report.kills if k.phase == "processing")
    assert report.recoveries[0].after == "start"
    assert report.recoveries[-1].after == "wipe-restore"
    assert report.recoveries[-1].restored > 0
    assert report.records_verified > 10_000
    assert sum(r.restored for r in report.after_kills()) > 0
    assert sum(r.rolled_back for r in report.after_kills()) > 0

    # The reader saw whole committed states only, moving forward.
    assert report.reader is not None
    assert report.reader["checked_states"] > 0
    assert (report.reader["lost"], report.reader["leaked"]) == (0, 0)

    # Recovery versus wipe-and-replay: the wipe replays the whole changelog.
    assert [w.keys for w in report.wipe] == [2_000, 10_000]
    largest = report.wipe[-1]
    assert largest.wipe_restored >= 10_000 > largest.recover_restored
    assert largest.ratio > 1

    # Outputs: the JSON report, the plot, the closing figures.
    doc = json.loads((out / "crashtest.json").read_text())
    assert doc["ok"] is True
    assert doc["totals"]["kills"] == KILLS
    assert doc["totals"]["lost"] == doc["totals"]["leaked"] == 0
    assert (out / "crashtest.png").stat().st_size > 10_000
    tail = summary.splitlines()[-6:]
    assert tail[0] == f"figure: crashtest_kills = {KILLS}"
    assert tail[1:3] == ["figure: crashtest_lost = 0", "figure: crashtest_leaked = 0"]
    assert tail[3].startswith("figure: recovery_ms_p99 = ") and tail[3].endswith(" ms")
    assert tail[4].startswith("figure: recovery_vs_wipe_at_1m = not measured")
    assert tail[5].startswith("figure: recovery_vs_wipe_at_10k = ")
    # A passing run removes nothing it was not asked to: the given workdir stays.
    assert (tmp_path / "work" / "task").is_dir()
