"""Child process for the window-store crash tests: ``python tests/_window_child.py MODE PATH``.

``hold-drops``: commit records in segments 0 and 1 at offset 7, then stage (without committing)
a segment drop, a new segment, overwrites and deletes, spilled past a tiny overlay budget;
print ``READY`` and wait to be SIGKILLed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.abspath(__file__)
N = 300


def spawn(mode: str, *args: object) -> subprocess.Popen[str]:
    """Start ``mode`` in a fresh interpreter (warnings as errors, this checkout importable)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen(
        [sys.executable, "-W", "error", SCRIPT, mode, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def main(argv: list[str]) -> None:
    import txstore
    from txstore import Serdes

    mode, path = argv[0], argv[1]
    if mode != "hold-drops":
        raise SystemExit(f"unknown mode {mode!r}")
    db = txstore.open(path, overlay_budget_bytes=16 * 1024)
    w = db.window_store(
        "w", Serdes.string(), Serdes.string(), retention_period=120_000, window_size=1
    )
    for i in range(N):
        w.put(f"k{i:04d}", "seg0", 1_000)
        w.put(f"k{i:04d}", "seg1", 61_000)
    w.commit(7)
    for i in range(N):
        w.put(f"k{i:04d}", "uncommitted", 61_000)
    for i in range(0, N, 3):
        w.put(f"k{i:04d}", None, 61_000)
    w.put("late", "drops segment 0", 180_000)
    assert w.bytes_store.segment_ids() == [1, 3]
    assert os.path.isdir(os.path.join(path, "spill")), "expected spilled uncommitted writes"
    print("READY", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1:])
