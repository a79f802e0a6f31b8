"""A writer process that rolls window segments on command, for the dbi-table tests.

Run as ``python tests/_segment_roll_child.py PATH KEYS``. It creates the partition (``sync=False``)
and a window store ``w`` (retention 60 s, so one 60 s segment per generation and two live ones),
commits offset 0 and prints ``READY``. Then, for each line ``step`` read from stdin, it writes
generation ``g`` (``g`` = 1, 2, ...): ``KEYS`` keys ``k00000``... with value ``g<g>`` at time
``g * 60_000``, which creates segment ``g`` and drops segment ``g - 2``; commits offset ``g``; and
prints ``C <g> <segment ids>``. ``quit`` (or end of input) closes the partition.
"""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.abspath(__file__)
RETENTION = 60_000
STEP = 60_000


def spawn(path: object, keys: int) -> subprocess.Popen[str]:
    """Start the writer (warnings as errors, this checkout importable)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("TXSTORE_FAULTS", None)
    return subprocess.Popen(
        [sys.executable, "-W", "error", SCRIPT, str(path), str(keys)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


class Writer:
    """The parent's handle on the child: ``step()`` runs one generation and returns it."""

    def __init__(self, path: object, keys: int) -> None:
        self.proc = spawn(path, keys)
        self._expect("READY")

    def _expect(self, prefix: str) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith(prefix):
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"writer said {line!r}, expected {prefix!r}: {err}")
        return line

    def step(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        return int(self._expect("C ").split()[1])

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        assert self.proc.returncode == 0, f"writer exited with {self.proc.returncode}"


def main(argv: list[str]) -> None:
    import txstore
    from txstore import Serdes

    path, keys = argv[0], int(argv[1])
    with txstore.open(path, sync=False) as db:
        w = db.window_store(
            "w", Serdes.string(), Serdes.string(), retention_period=RETENTION, window_size=1
        )
        w.commit(0)
        print("READY", flush=True)
        for gen, line in enumerate(sys.stdin, 1):
            if line.strip() != "step":
                break
            for j in range(keys):
                w.put(f"k{j:05d}", f"g{gen}", gen * STEP)
            w.commit(gen)
            print(f"C {gen} {w.bytes_store.segment_ids()}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
