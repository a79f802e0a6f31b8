"""Only what pyproject.toml cannot say: the cffi extension and the wheel's stable-ABI tag.

cffi builds ``txstore._codecs`` against CPython's limited API (its generated C defines
``Py_LIMITED_API`` and the module is named ``_codecs.abi3.so``) on every CPython that allows it:
not a debug build, not a free-threaded one. On those, the wheel is tagged ``cp311-abi3``: one
wheel per platform for Python 3.11 and later.
"""

import sys
import sysconfig

from setuptools import Extension, setup

STABLE_ABI = (
    sys.implementation.name == "cpython"
    and not hasattr(sys, "gettotalrefcount")  # a debug build
    and not sysconfig.get_config_var("Py_GIL_DISABLED")  # a free-threaded build
)

#: The entry checksums (csrc/checksums.c): a plain CPython extension on the stable ABI, because
#: their hot paths cannot afford a cffi call (see that file).
CHECKSUMS = Extension(
    "txstore._checksums",
    [
        "csrc/checksums.c",
        "csrc/rows.c",
        "csrc/window_reader.c",
        "csrc/restore_rows.c",
        "csrc/restore_frames.c",
        "csrc/restore_runs.c",
        "csrc/changelog_columns.c",
        "csrc/kv_get.c",
        "csrc/scan_rows.c",
    ],
    py_limited_api=STABLE_ABI,
    extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra"],
)

#: Single-item codec fast paths (csrc/fastpaths.c) and the column functions that read a list of
#: bytes in place (csrc/columns.c, with the codecs of csrc/txcodecs.c): C builtins, cheaper to
#: call than Python or cffi.
FASTPATHS = Extension(
    "txstore._fastpaths",
    ["csrc/fastpaths.c", "csrc/columns.c", "csrc/txcodecs.c"],
    py_limited_api=STABLE_ABI,
    extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra"],
)

setup(
    cffi_modules=["csrc/build_ffi.py:ffibuilder"],
    ext_modules=[CHECKSUMS, FASTPATHS],
    options={"bdist_wheel": {"py_limited_api": "cp311"}} if STABLE_ABI else {},
)
