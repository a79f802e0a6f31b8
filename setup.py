"""Only what pyproject.toml cannot say: the cffi extension and the wheel's stable-ABI tag.

cffi builds ``txstore._codecs`` against CPython's limited API (its generated C defines
``Py_LIMITED_API`` and the module is named ``_codecs.abi3.so``) on every CPython that allows it:
not a debug build, not a free-threaded one. On those, the wheel is tagged ``cp311-abi3``: one
wheel per platform for Python 3.11 and later.
"""

import sys
import sysconfig

from setuptools import setup

STABLE_ABI = (
    sys.implementation.name == "cpython"
    and not hasattr(sys, "gettotalrefcount")  # a debug build
    and not sysconfig.get_config_var("Py_GIL_DISABLED")  # a free-threaded build
)

setup(
    cffi_modules=["csrc/build_ffi.py:ffibuilder"],
    options={"bdist_wheel": {"py_limited_api": "cp311"}} if STABLE_ABI else {},
)
