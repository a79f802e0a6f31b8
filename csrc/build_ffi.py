"""cffi build script for txstore._codecs (out-of-line API mode).

Two C files, two concerns: ``txcodecs.c`` (the Kafka byte formats) and ``lmdbwalk.c`` (the
B-tree page walk of an LMDB data file, :mod:`txstore.engine.lmdb_pages`). The C declarations
come from their headers, ``csrc/txcodecs.h`` and ``csrc/lmdbwalk.h``, the same headers the C
files include, with the preprocessor lines dropped (cffi's ``cdef`` does not run the
preprocessor).

The module is built for CPython's stable ABI: cffi's generated C defines ``Py_LIMITED_API`` and
cffi marks the extension ``py_limited_api`` (file ``_codecs.abi3.so``) on every CPython that
allows it; ``setup.py`` tags the wheel ``cp311-abi3`` to match. ``txcodecs.c`` itself does not
include ``Python.h``.
"""

from __future__ import annotations

import os
import pathlib
import shlex
import shutil
import sysconfig

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent
#: Each C source with the header that declares its functions.
SOURCES = {"txcodecs.c": "txcodecs.h", "lmdbwalk.c": "lmdbwalk.h"}


def _cdef_text() -> str:
    lines = [
        line
        for header in SOURCES.values()
        for line in (HERE / header).read_text(encoding="utf-8").splitlines()
    ]
    return "\n".join(line for line in lines if not line.lstrip().startswith("#"))


def _require_compiler() -> None:
    """Fail the install with a clear message when no C compiler is on the machine."""

    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    exe = shlex.split(cc)[0] if cc.strip() else "cc"
    if shutil.which(exe) is None:
        raise RuntimeError(
            f"txstore needs a C compiler to build its codec extension, and {exe!r} was not "
            "found. Install one (Debian/Ubuntu: apt-get install build-essential; Fedora: "
            "dnf install gcc) or set CC to a compiler, then install txstore again."
        )


_require_compiler()
ffibuilder = FFI()
ffibuilder.cdef(_cdef_text())
ffibuilder.set_source(
    "txstore._codecs",
    "".join(f'#include "{header}"\n' for header in SOURCES.values()),
    sources=[str((HERE / source).relative_to(HERE.parent)) for source in SOURCES],
    include_dirs=[str(HERE.relative_to(HERE.parent))],
    extra_compile_args=[
        "-O2",
        "-std=c99",
        "-Wall",
        "-Wextra",
        "-Werror=implicit-function-declaration",
    ],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
