"""The build: a machine without a C compiler gets a clear install error; the sdist carries what
builds and tests txstore; the wheel built from it is a stable-ABI (abi3) wheel with the full
metadata, and it imports."""

from __future__ import annotations

import email.message
import email.parser
import os
import pathlib
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from dataclasses import dataclass

import pytest

import txstore

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD_SCRIPT = ROOT / "csrc" / "build_ffi.py"
SDIST_ROOT = f"txstore-{txstore.__version__}/"
#: The wheel is tagged abi3 on the CPython builds that allow the limited API (see setup.py).
STABLE_ABI = (
    sys.implementation.name == "cpython"
    and not hasattr(sys, "gettotalrefcount")
    and not sysconfig.get_config_var("Py_GIL_DISABLED")
)


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


@dataclass(frozen=True)
class Dists:
    sdist: pathlib.Path
    wheel: pathlib.Path

    def sdist_names(self) -> set[str]:
        """The sdist's files, relative to its top folder."""
        with tarfile.open(self.sdist) as tar:
            return {m.name.removeprefix(SDIST_ROOT) for m in tar.getmembers() if m.isfile()}

    def wheel_text(self, name: str) -> str:
        with zipfile.ZipFile(self.wheel) as whl:
            return whl.read(name).decode("utf-8")

    def metadata(self) -> email.message.Message:
        text = self.wheel_text(f"txstore-{txstore.__version__}.dist-info/METADATA")
        return email.parser.Parser().parsestr(text)


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    """``python -m build`` of this checkout, once for the module: the sdist, then the wheel built
    from the unpacked sdist (which proves the sdist builds). No isolation: the build uses this
    environment's setuptools and cffi, and needs no network."""
    pytest.importorskip("build", reason="needs the build package (the dev extra)")
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return Dists(sdist, wheel)


@pytest.mark.skipif(not STABLE_ABI, reason="no limited API on this Python build")
def test_wheel_is_tagged_abi3_for_python_3_11_and_later(dists: Dists) -> None:
    assert dists.wheel.name.startswith(f"txstore-{txstore.__version__}-cp311-abi3-")
    wheel_info = dists.wheel_text(f"txstore-{txstore.__version__}.dist-info/WHEEL")
    tags = [line.split(": ", 1)[1] for line in wheel_info.splitlines() if line.startswith("Tag:")]
    assert tags and all(tag.startswith("cp311-abi3-") for tag in tags), wheel_info
    with zipfile.ZipFile(dists.wheel) as whl:
        names = set(whl.namelist())
    assert "txstore/_codecs.abi3.so" in names
    assert {"txstore/py.typed", "txstore/codecs/__init__.py"} <= names
    assert f"txstore-{txstore.__version__}.dist-info/licenses/LICENSE" in names
    assert not [n for n in names if n.startswith(("tests/", "perf/", "csrc/"))]


def test_wheel_imports_and_its_c_codecs_work(dists: Dists, tmp_path: pathlib.Path) -> None:
    """The wheel's own files, first on sys.path (this environment supplies the dependencies)."""
    with zipfile.ZipFile(dists.wheel) as whl:
        whl.extractall(tmp_path / "site")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import txstore, txstore._codecs\n"
        "from txstore import codecs\n"
        "assert txstore.__file__.startswith(sys.argv[1]), txstore.__file__\n"
        "keys = codecs.window_keys([b'a', b'bc'], [1000, 2000], [0, 7])\n"
        "assert codecs.extract_window_keys(keys) == [(b'a', 1000, 0), (b'bc', 2000, 7)]\n"
        "assert codecs.decode_varints(codecs.encode_varints([1, -1, 300])) == [1, -1, 300]\n"
        "print(codecs.murmur2(b'21'), txstore._codecs.__file__.rsplit('/', 1)[1])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "site")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    suffix = "_codecs.abi3.so" if STABLE_ABI else "_codecs."
    assert proc.stdout.startswith("-973932308 ") and suffix in proc.stdout


def test_sdist_carries_what_builds_and_tests_txstore(dists: Dists) -> None:
    names = dists.sdist_names()
    top = {
        "LICENSE",
        "README.md",
        "Makefile",
        "MANIFEST.in",
        "pyproject.toml",
        "setup.py",
        "PKG-INFO",
        "csrc/build_ffi.py",
        "csrc/txcodecs.c",
        "csrc/txcodecs.h",
        "txstore/py.typed",
        "tests/conftest.py",
        "docs/tour.md",
        "perf/report.py",
    }
    assert top <= names, sorted(top - names)
    assert any(n.startswith("tests/changelog/data/") for n in names)  # data files, not only .py
    assert any(n.startswith("docs/img/") for n in names)  # the pages' images
    assert not [n for n in names if n.endswith((".so", ".pyc", ".o")) or "__pycache__" in n]
    # Every tracked file of the folders the tests read (when this is a git checkout).
    proc = subprocess.run(
        ["git", "ls-files", "csrc", "tests", "docs", "perf"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode == 0:
        tracked = {n for n in proc.stdout.splitlines() if (ROOT / n).is_file()}
        assert tracked <= names, sorted(tracked - names)


def test_metadata_has_license_classifiers_urls_and_extras(dists: Dists) -> None:
    meta = dists.metadata()
    assert meta["Name"] == "txstore"
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["Author"] == "txstore developers"
    assert "kafka-streams" in meta["Keywords"].split(",")
    classifiers = set(meta.get_all("Classifier") or [])
    assert {
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: Implementation :: CPython",
        "Operating System :: POSIX :: Linux",
        "Topic :: Database",
        "Typing :: Typed",
    } <= classifiers
    assert any(c.startswith("Development Status :: ") for c in classifiers)
    assert not [c for c in classifiers if c.startswith("License ::")]  # the SPDX field says it
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert set(urls) == {"Homepage", "Documentation", "Source", "Issues"}
    assert all(u.startswith("https://github.com/txstore/txstore") for u in urls.values())
    assert {"spark", "queries", "plot", "bench", "dev"} <= set(meta.get_all("Provides-Extra") or [])
    description = meta.get_payload()
    assert isinstance(description, str) and description.startswith("# txstore")  # the README
    license_text = dists.wheel_text(f"txstore-{txstore.__version__}.dist-info/licenses/LICENSE")
    assert license_text.split()[:5] == ["Apache", "License", "Version", "2.0,", "January"]
    assert "END OF TERMS AND CONDITIONS" in license_text
    # The sdist's PKG-INFO says the same.
    with tarfile.open(dists.sdist) as tar:
        member = tar.extractfile(f"{SDIST_ROOT}PKG-INFO")
        assert member is not None
        pkg_info = member.read().decode("utf-8")
    assert all(f"Classifier: {c}\n" in pkg_info for c in classifiers)
