"""Child-process scripts for the changelog tests, and the deterministic workload they write.

Run as ``python tests/_changelog_child.py MODE DIR [ARGS...]``. A child prints ``READY``
(flushed) when the parent may act on it (kill it, read, ...), and ``COMMITTED <n> <end>`` after
each commit returns.

The workload is a pure function of the offset and of the commit number, so a parent that
SIGKILLs a writer at any moment can check that a reopened log holds exactly a committed prefix:
commit ``c`` (counting from 1) holds :func:`commit_size` ``(c)`` records and carries input
position ``10 * c``; the record at offset ``o`` is :func:`record` ``(o)``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.abspath(__file__)
if ROOT not in sys.path:  # run as a script: make this checkout importable
    sys.path.insert(0, ROOT)

from txstore.changelog.log import FileChangelog  # noqa: E402
from txstore.codecs import encode_headers  # noqa: E402

_HEADERS = encode_headers([("trace", b"t"), ("n", None)])


def record(offset: int) -> tuple[bytes, bytes | None, int, bytes]:
    """The record the workload writes at ``offset``: 37 keys, a tombstone every 11th."""
    key = b"key-%02d" % (offset % 37)
    value = None if offset % 11 == 0 else (b"v%d-" % offset) * (1 + offset % 5)
    headers = _HEADERS if offset % 3 == 0 else b""
    return key, value, 1_000 + offset, headers


def commit_size(c: int) -> int:
    """How many records commit ``c`` (1-based) holds: 0 to 120, with some empty commits."""
    return (c * 7919) % 121


def boundaries(commits: int) -> list[int]:
    """The committed end offset after each of the first ``commits`` commits (index 0: none)."""
    ends = [0]
    for c in range(1, commits + 1):
        ends.append(ends[-1] + commit_size(c))
    return ends


def spawn(mode: str, *args: object, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``mode`` in a fresh interpreter with warnings as errors."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-W", "error", SCRIPT, mode, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        cwd=ROOT,
    )


def _open(path: str) -> FileChangelog:
    return FileChangelog(path, segment_bytes=8 * 1024, batch_bytes=2 * 1024)


def writer(path: str, commits: int) -> None:
    """Continue the workload from whatever the log committed, for ``commits`` more commits."""
    with _open(path) as log:
        done = (log.last_committed_input_position or 0) // 10
        assert log.committed_end_offset == boundaries(done)[-1], "not a committed prefix"
        print("READY", flush=True)
        for c in range(done + 1, done + 1 + commits):
            start = log.end_offset
            for o in range(start, start + commit_size(c)):
                log.append(*record(o))
            info = log.commit(10 * c)
            print(f"COMMITTED {c} {info.end_offset}", flush=True)


def compactor(path: str, rounds: int) -> None:
    """Write the workload and compact after every commit (compaction is what gets killed)."""
    with FileChangelog(path, segment_bytes=2 * 1024, batch_bytes=512) as log:
        done = (log.last_committed_input_position or 0) // 10
        print("READY", flush=True)
        for c in range(done + 1, done + 1 + rounds):
            start = log.end_offset
            for o in range(start, start + commit_size(c)):
                log.append(*record(o))
            log.commit(10 * c)
            print(f"COMMITTED {c} {log.committed_end_offset}", flush=True)
            log.clean(force=True)


def hold(path: str) -> None:
    """Hold the writer lock until killed."""
    with _open(path):
        print("READY", flush=True)
        time.sleep(120)


def main() -> None:
    mode, path, *args = sys.argv[1:]
    if mode == "writer":
        writer(path, int(args[0]))
    elif mode == "compactor":
        compactor(path, int(args[0]))
    elif mode == "hold":
        hold(path)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
