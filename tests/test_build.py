"""The build script: a machine without a C compiler gets a clear install error."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

BUILD_SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "csrc" / "build_ffi.py"


def test_missing_compiler_is_a_clear_error() -> None:
    env = dict(os.environ, CC="no-such-compiler-txstore")
    proc = subprocess.run(
        [sys.executable, "-c", f"import runpy; runpy.run_path({str(BUILD_SCRIPT)!r})"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "txstore needs a C compiler" in proc.stderr
    assert "no-such-compiler-txstore" in proc.stderr


def test_build_script_declares_every_header_function() -> None:
    env = dict(os.environ)
    code = (
        f"import runpy; ns = runpy.run_path({str(BUILD_SCRIPT)!r}); "
        "print(len([l for l in ns['_cdef_text']().splitlines() if 'txc_' in l and '(' in l]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) >= 20
