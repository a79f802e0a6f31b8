"""Child-process scripts for the engine tests, and helpers to run them.

Run as ``python tests/_engine_child.py MODE PATH [ARGS...]``. A child prints ``READY`` (flushed)
when the parent may act (kill it, read, ...), and JSON results on its last line.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.abspath(__file__)


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


def wait_line(proc: subprocess.Popen[str], expected: str, timeout: float = 60.0) -> None:
    """Wait until the child prints ``expected`` on a line of its own."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            proc.kill()
            raise AssertionError(f"child did not print {expected!r} within {timeout}s")
        ready, _, _ = select.select([proc.stdout], [], [], remaining)
        if ready:
            line = proc.stdout.readline()
            if not line:
                err = proc.stderr.read() if proc.stderr else ""
                raise AssertionError(f"child exited before {expected!r}: {err}")
            if line.strip() == expected:
                return


def kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL a child from :func:`spawn`, reap it and close its pipes."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stderr.close()


def run(mode: str, *args: object, timeout: float = 60.0) -> Any:
    """Run ``mode`` to completion and return the JSON it printed last."""
    proc = spawn(mode, *args)
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"child {mode} failed ({proc.returncode}): {err}"
    return json.loads(out.strip().splitlines()[-1])


def _ready() -> None:
    print("READY", flush=True)


def _sleep_forever() -> None:
    while True:
        time.sleep(1)


def main(argv: list[str]) -> None:
    from txstore.bytestores.kv import BytesKeyValueStore
    from txstore.engine.partition import Partition

    mode, path = argv[0], argv[1]
    if mode == "read-once":
        # read-only open from another process: committed data and offset of one store
        with Partition(path, readonly=True) as p:
            store = BytesKeyValueStore(argv[2], p)
            view = store.read_committed()
            with view.snapshot() as snap:
                items = [[k.hex(), v.hex()] for k, v in snap.all()]
                offset = snap.committed_offset
            try:
                store.put(b"k", b"v")
                write = "allowed"
            except Exception as exc:  # the parent checks the type name
                write = type(exc).__name__
        print(json.dumps({"items": items, "offset": offset, "write": write}))
    elif mode == "hold-writer":
        with Partition(path):
            _ready()
            _sleep_forever()
    elif mode == "open-then-hold-writer":
        # says OPENING, then opens for writing (it may have to wait), says READY, holds it
        print("OPENING", flush=True)
        time.sleep(0.2)  # the parent reads OPENING alone, not with READY in one buffer
        with Partition(path):
            _ready()
            _sleep_forever()
    elif mode == "hold-spill":
        # commit some data, then hold spilled uncommitted writes until SIGKILLed
        n_committed, n_uncommitted = int(argv[2]), int(argv[3])
        p = Partition(path, overlay_budget_bytes=64 * 1024, map_size=1 << 20)
        store = BytesKeyValueStore("kv", p)
        store.put_all((b"c%06d" % i, b"committed") for i in range(n_committed))
        store.commit(7)
        for i in range(n_uncommitted):
            store.put(b"u%07d" % i, b"uncommitted")
        for i in range(0, n_committed, 2):
            store.put(b"c%06d" % i, b"overwritten")
        for i in range(1, n_committed, 4):
            store.delete(b"c%06d" % i)
        assert os.path.isdir(os.path.join(path, "spill")), "expected a spill directory"
        assert store.approximate_num_uncommitted_bytes() > 64 * 1024
        _ready()
        _sleep_forever()
    elif mode == "hold-typed-spill":
        # a typed store (readable by txstore check) with spilled uncommitted writes, held open
        import txstore
        from txstore import Serdes

        db = txstore.open(path, overlay_budget_bytes=64 * 1024)
        typed = db.key_value_store("kv", Serdes.string(), Serdes.string())
        typed.put("committed", "yes")
        typed.commit(1)
        for i in range(int(argv[2])):
            typed.put(f"u{i:07d}", "uncommitted" * 8)
        assert os.listdir(os.path.join(path, "spill")), "expected a non-empty spill directory"
        _ready()
        _sleep_forever()
    elif mode == "writer-loop":
        # each commit sets every key of "state" to the commit number; "bulk" grows the map
        n_keys, commits = int(argv[2]), int(argv[3])
        with Partition(path, map_size=1 << 20, sync=False) as p:
            state = BytesKeyValueStore("state", p)
            bulk = BytesKeyValueStore("bulk", p)
            for c in range(1, commits + 1):
                value = b"%08d" % c
                state.put_all((b"key%04d" % i, value) for i in range(n_keys))
                bulk.put(b"b%08d" % c, os.urandom(4096))
                p.commit_stores({"state": c, "bulk": c})
                if c == 1:
                    _ready()
            print(json.dumps({"map_size": p.info()["map_size"], "commits": commits}))
    elif mode == "atomic-loop":
        # two stores committed together forever, until SIGKILLed
        with Partition(path, sync=False) as p:
            a = BytesKeyValueStore("a", p)
            b = BytesKeyValueStore("b", p)
            start = c = a.committed_offset or 0  # continue after an earlier run was killed
            while True:
                c += 1
                a.put(b"x", b"%d" % c)
                b.put(b"y", b"%d" % c)
                b.put(b"n%08d" % c, b"%d" % c)
                p.commit_stores({"a": c, "b": c})
                if c == start + 1:
                    _ready()
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
