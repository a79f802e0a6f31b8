"""What a newcomer meets on the command line: ``--version``, an example in every ``--help``,
JSON lines that ``jq`` reads, one exit code per kind of outcome, one line (no traceback) when
an optional dependency or Java is missing, and an export that checks its arguments before
Spark starts and leaves nothing half-written (docs/cli.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli import ROOT, txstore
from tests.runtime.test_check_deep import lmdb_put, make_task_dir
from txstore import __version__

COMMANDS = ("demo", "stat", "dump", "get", "offsets", "check", "snapshot", "export", "serve",
            "crashtest")  # fmt: skip


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two partitions, each with every store kind and value format (tests/runtime)."""
    root = tmp_path_factory.mktemp("ux") / "state"
    make_task_dir(root / "0", total=120)
    make_task_dir(root / "1", total=60)
    return root


def json_lines(text: str) -> list[Any]:
    return [json.loads(line) for line in text.splitlines()]


def test_version_and_an_example_in_every_help() -> None:
    for flag in ("--version", "-V"):
        assert txstore(flag).stdout.strip() == f"txstore, version {__version__}"
    assert "Example:" in txstore("--help").stdout
    for cmd in COMMANDS:
        out = txstore(cmd, "--help").stdout
        assert out.startswith(f"Usage: txstore {cmd} "), cmd
        assert "Example:" in out and f"txstore {cmd}" in out.split("Example:")[1], cmd


def test_dump_json_is_json_lines_of_plain_values_for_every_store_kind(state: Path) -> None:
    stat = txstore("stat", str(state), "--json-lines").stdout
    stores = sorted({r["store"] for r in json_lines(stat)})
    assert len(stores) == 10
    jq = shutil.which("jq")
    for store in stores:
        for raw in ((), ("--raw",)):
            text = txstore("dump", str(state), store, "--json-lines", *raw).stdout
            records = json_lines(text)  # every line is one JSON document
            assert records and {r["partition"] for r in records} == {0, 1}
            for r in records:
                assert set(r) == {"partition_id", "partition", "key", "value"}
                if store.startswith(("win", "ses")):  # windowed keys: key and window object
                    assert set(r["key"]) == {"key", "window"}
                    assert set(r["key"]["window"]) == {"start", "end"}
                    assert r["key"]["window"]["start"] <= r["key"]["window"]["end"]
                if raw:  # bytes as hex
                    key = r["key"]["key"] if isinstance(r["key"], dict) else r["key"]
                    assert bytes.fromhex(key)
            if jq is not None:  # `txstore dump --json | jq .` works
                piped = subprocess.run(
                    [jq, "-c", "."], input=text, capture_output=True, text=True, check=True
                )
                assert json_lines(piped.stdout) == records
    if jq is None:
        pytest.skip("jq is not installed (apt-get install -y jq): the pipe through jq was skipped")


def test_values_keys_and_headers_decode_to_json_values(state: Path) -> None:
    one = txstore("dump", str(state / "0"), "kv_headers", "--json-lines", "--limit", "1")
    [kv] = json_lines(one.stdout)
    assert kv["partition"] is None  # a partition directory
    assert isinstance(kv["key"], str) and isinstance(kv["value"]["value"], str)
    assert isinstance(kv["value"]["timestamp"], int)
    assert all(set(h) == {"key", "value"} for h in kv["value"]["headers"])
    [ts] = json_lines(txstore("dump", str(state), "win_ts", "--json-lines", "--limit", "1").stdout)
    assert isinstance(ts["value"]["value"], int) and isinstance(ts["value"]["timestamp"], int)
    [got] = json_lines(txstore("get", str(state), "kv_plain", "k1", "--json-lines").stdout)
    assert set(got) == {"partition_id", "partition", "store", "key", "value"} and isinstance(
        got["value"], int
    )
    text = txstore("dump", str(state), "win_plain", "--limit", "1").stdout  # text: compact JSON
    partition, key, value = text.rstrip("\n").split("\t")
    assert partition == "0" and json.loads(key)["window"]["start"] == 0 and int(value) >= 0


def test_every_data_command_prints_json_lines(state: Path, tmp_path: Path) -> None:
    for cmd in ("stat", "offsets", "check"):
        rows = json_lines(txstore(cmd, str(state), "--json-lines").stdout)
        assert rows and all(isinstance(r, dict) for r in rows), cmd
    [report] = json_lines(txstore("check", str(state), "--deep", "--json-lines", "-q").stdout)
    assert report["ok"] is True and report["partitions"] == 2
    snap = txstore("snapshot", str(state), str(tmp_path / "snap"), "--json-lines", "-q")
    [manifest] = json_lines(snap.stdout)
    assert manifest["partitions"] == [0, 1] and len(manifest["stores"]) == 10
    assert snap.stderr == ""  # -q: no chatter
    quick = ["--kills", "1", "--wipe-sizes", "", "--out", "", "-q", "--no-reader", "--keys", "20"]
    ct = txstore("crashtest", "--points", "task.after_store_commit", "--json-lines", *quick)
    [summary] = json_lines(ct.stdout)
    assert summary["ok"] is True and summary["totals"]["kills"] == 1 and ct.stderr == ""


def test_progress_bars_go_to_stderr_on_a_terminal_or_when_asked(state: Path) -> None:
    plain = txstore("check", str(state))
    assert plain.stderr == ""  # stderr is not a terminal here, and no bar was asked for
    asked = txstore("check", str(state), "--progress", "--json-lines")
    [report] = json_lines(asked.stdout)  # stdout: the JSON only
    assert report["ok"] is True and "2/2" in asked.stderr
    assert txstore("check", str(state), "--progress", "-q").stderr == ""  # -q wins


def test_partitions_means_the_same_in_every_command(state: Path, tmp_path: Path) -> None:
    for args in (("dump", str(state), "kv_plain"), ("check", str(state)),
                 ("snapshot", str(state), str(tmp_path / "s"))):  # fmt: skip
        last = "-q" if args[0] != "dump" else "--raw"
        only = txstore(*args, "--partitions", "1", "--json-lines", last)
        rows = json_lines(only.stdout)
        if args[0] == "dump":
            assert {r["partition"] for r in rows} == {1}
        elif args[0] == "check":
            assert rows[0]["partitions"] == 1
        else:
            assert rows[0]["partitions"] == [1]
        bad = txstore(*args, "--partitions", "1-x", check=False)
        assert bad.returncode == 2 and "--partitions" in bad.stderr, args
    assert "--partitions" not in txstore("serve", "--help").stdout
    assert "--num-partitions" in txstore("serve", "--help").stdout


def test_exit_codes(state: Path, tmp_path: Path) -> None:
    # 0: success
    assert txstore("stat", str(state)).returncode == 0
    # 1: a negative answer: a check found a problem, a key has no value
    assert txstore("get", str(state), "kv_plain", "nope", check=False).returncode == 1
    broken = tmp_path / "broken"
    make_task_dir(broken / "0", total=60)
    lmdb_put(broken / "0", b"kv_headers", b"k1", b"\x7f")
    assert txstore("check", "--deep", str(broken), check=False).returncode == 1
    # 2: usage: unknown command or option, a missing path, store or partition
    for args in (("frobnicate",), ("stat", "--frob", str(state)), ("stat",),
                 ("stat", str(tmp_path / "missing")), ("dump", str(state), "no-such-store"),
                 ("dump", str(state), "kv_plain", "--limit", "-1"),
                 ("snapshot", str(state), str(state)),  # not an empty directory
                 ("dump", str(tmp_path), "kv_plain")):  # fmt: skip
        proc = txstore(*args, check=False)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
    # 3: a txstore error: a damaged file, a partition that lost its data
    damaged = tmp_path / "damaged"
    shutil.copytree(state / "0", damaged)
    with open(damaged / "data" / "data.mdb", "r+b") as f:
        f.write(b"\xa5" * 8192)
    proc = txstore("stat", str(damaged), check=False)
    assert proc.returncode == 3 and proc.stderr.startswith("txstore stat: error: damaged file")
    assert len(proc.stderr.splitlines()) == 1
    lost = tmp_path / "lost"
    shutil.copytree(state, lost)
    shutil.rmtree(lost / "1" / "data")
    proc = txstore("offsets", str(lost), check=False)
    assert proc.returncode == 3 and "txstore offsets: error: no txstore partition" in proc.stderr
    # ... which check reports as a problem (exit 1)
    proc = txstore("check", str(lost), check=False)
    assert proc.returncode == 1 and "PROBLEM partition 1: cannot open" in proc.stdout
    # 4: a missing optional dependency or Java: test_missing_* below


# ---- missing optional dependencies and Java -----------------------------------------------


def run_blocked(
    blocked: list[str], argv: list[str], **env: str
) -> subprocess.CompletedProcess[str]:
    """``txstore ARGV`` in a child whose imports of ``blocked`` fail as if not installed."""
    code = (
        "import sys\n"
        f"for m in {blocked!r}: sys.modules[m] = None\n"
        "from txstore.cli.main import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, PYTHONPATH=str(ROOT), **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_line(proc: subprocess.CompletedProcess[str], code: int, *parts: str) -> None:
    assert proc.returncode == code, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for part in parts:
        assert part in proc.stderr, proc.stderr


def test_missing_extras_are_one_line_and_exit_4(state: Path, tmp_path: Path) -> None:
    """The fast variant of the real-venv test below: the modules are blocked in the child."""
    spark = ["pyspark", "pyarrow", "py4j"]
    proc = run_blocked(spark, ["export", str(state), str(tmp_path / "o"), "--store", "kv_plain"])
    assert_one_line(proc, 4, "txstore export needs the spark extra", "pip install '.[spark]'")
    proc = run_blocked(["matplotlib"], ["demo", "--no-spark", "--out", str(tmp_path / "d")])
    assert_one_line(proc, 4, "txstore demo needs the plot extra", "pip install '.[plot]'")
    proc = run_blocked(spark, ["demo", "--no-plot", "--out", str(tmp_path / "d")])
    assert_one_line(proc, 4, "txstore demo needs the spark extra", "--no-spark")
    assert not (tmp_path / "d").exists()  # checked before anything starts


def test_missing_java_is_one_line_and_exit_4_after_the_arguments_are_checked(
    state: Path, tmp_path: Path
) -> None:
    pytest.importorskip("pyspark")
    nojava = {"JAVA_HOME": str(tmp_path / "no-java")}
    dest = tmp_path / "out"
    proc = run_blocked([], ["export", str(state), str(dest), "--store", "kv_plain"], **nojava)
    assert_one_line(proc, 4, "Java 17 is needed for Spark: apt-get install openjdk-17-jre")
    proc = run_blocked([], ["demo", "--out", str(tmp_path / "d")], **nojava)
    assert_one_line(proc, 4, "Java 17 is needed for Spark", "or pass --no-spark")
    # arguments are checked before Java is looked for (and long before a JVM starts)
    for args, message in (
        (["--store", "nope"], "no store 'nope'"),
        ([], "option store is required"),
        (["--store", "kv_plain", "--partitions", "4"], "has no partition 4"),
        (["--store", "kv_plain", "--format", "csv"], "Invalid value for '--format'"),
    ):
        proc = run_blocked([], ["export", str(state), str(dest), *args], **nojava)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    dest.mkdir()
    proc = run_blocked([], ["export", str(state), str(dest), "--store", "kv_plain"], **nojava)
    assert proc.returncode == 2 and "exists (--overwrite replaces it)" in proc.stderr
    assert set(tmp_path.iterdir()) == {dest}  # nothing else was written


def _cached_venv(tmp_path: Path) -> Path:
    """A venv with txstore (editable, no extras) and only its core dependencies."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    deps = ["lmdb", "sortedcontainers", "cffi", "click", "rich"]
    subprocess.run([*pip, *deps], check=True, capture_output=True, timeout=600)
    subprocess.run([*pip, "--no-deps", "-e", str(ROOT)], check=True, capture_output=True,
                   timeout=600)  # fmt: skip
    return venv


def test_missing_extras_in_a_real_venv_without_them(state: Path, tmp_path: Path) -> None:
    """A plain install (core dependencies only, from the local pip cache or PyPI): export and
    the demo say in one line what to install; --no-plot --no-spark runs the demo."""
    try:
        venv = _cached_venv(tmp_path)
    except subprocess.CalledProcessError as exc:  # pragma: no cover - no cache and no network
        pytest.skip(f"cannot build a venv with the core dependencies: {exc.stderr[-300:]}")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    py = str(venv / "bin" / "python")
    check = subprocess.run([py, "-c", "import pyspark"], capture_output=True, env=env)
    assert check.returncode != 0, "the venv must not see pyspark"

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=300,
                              cwd=tmp_path)  # fmt: skip

    proc = run(py, "-m", "txstore", "export", str(state), str(tmp_path / "o"), "--store", "kv_ts")
    assert_one_line(proc, 4, "txstore export needs the spark extra", "pip install '.[spark]'")
    proc = run(str(venv / "bin" / "txstore"), "demo", "--no-spark", "--out", str(tmp_path / "d"))
    assert_one_line(proc, 4, "txstore demo needs the plot extra", "pip install '.[plot]'")
    proc = run(str(venv / "bin" / "txstore"), "--version")
    assert proc.returncode == 0 and __version__ in proc.stdout
    demo = tmp_path / "demo"  # what a plain install can run: the demo without chart and Spark
    proc = run(str(venv / "bin" / "txstore"), "demo", "--no-spark", "--no-plot", "--events",
               "1000", "--num-partitions", "2", "--out", str(demo))  # fmt: skip
    assert proc.returncode == 0 and "all checks passed" in proc.stdout, proc.stdout[-2000:]
    assert not (demo / "analytics.png").exists()


@pytest.mark.slow  # two JVM start-ups, ~50 s; test_export_writes_a_temporary_sibling... is fast
def test_export_through_a_real_jvm_keeps_quiet_and_leaves_only_dest(
    state: Path, tmp_path: Path
) -> None:
    """-q: nothing on stderr (the JVM's log lines and stack traces included). A Spark job that
    fails is one line, and leaves no temporary directory behind."""
    pytest.importorskip("pyspark")
    from txstore.spark.export import java_problem

    if java_problem() is not None:
        pytest.skip(f"no Java for Spark: {java_problem()}")
    out = tmp_path / "out"
    proc = txstore("export", str(state / "0"), str(out), "--store", "win_th", "-q", "--json-lines")
    assert proc.stderr == ""
    [result] = json_lines(proc.stdout)
    assert result["rows"] == 10 and result["dest"] == str(out)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    bad = txstore("export", str(state / "0"), str(tmp_path / "bad"), "--store", "kv_plain", "-q",
                  "--value-schema", "x INT", check=False)  # fmt: skip
    assert_one_line(bad, 2, "txstore export: error: InvalidArgumentError: option valueSchema")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


# ---- export: nothing half-written ---------------------------------------------------------


class _FakeWriter:
    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def mode(self, mode: str) -> _FakeWriter:
        assert mode == "errorifexists"  # always a new temporary directory
        return self

    def format(self, fmt: str) -> _FakeWriter:
        return self

    def save(self, path: str) -> None:
        assert not os.path.exists(path) and Path(path).name.startswith(".out.txstore-export-")
        os.makedirs(path)
        (Path(path) / "part-0.parquet").write_bytes(b"rows")
        if self.fail:
            raise RuntimeError("executor lost")


class _FakeSpark:
    """Just enough of a SparkSession for export_store: the write creates files, then fails
    (or not)."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.dataSource = self
        self.read = self
        self.write = _FakeWriter(fail)

    def register(self, source: Any) -> None:
        pass

    def format(self, fmt: str) -> _FakeSpark:
        return self

    def option(self, key: str, value: str) -> _FakeSpark:
        return self

    def load(self, path: str) -> _FakeSpark:
        return self

    def count(self) -> int:
        return 7


def test_export_writes_a_temporary_sibling_and_renames_it_or_removes_it(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from txstore.errors import InvalidArgumentError
    from txstore.spark.export import export_store

    dest = tmp_path / "out"
    with pytest.raises(RuntimeError, match="executor lost"):
        export_store(_FakeSpark(fail=True), str(tmp_path), str(dest), store="s")
    assert list(tmp_path.iterdir()) == []  # the half-written temporary directory is gone
    result = export_store(_FakeSpark(fail=False), str(tmp_path), str(dest), store="s")
    assert result.rows == 7 and result.dest == str(dest)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert (dest / "part-0.parquet").read_bytes() == b"rows"
    with pytest.raises(InvalidArgumentError, match="exists"):
        export_store(_FakeSpark(fail=False), str(tmp_path), str(dest), store="s")
    (dest / "old-file").write_bytes(b"")
    with pytest.raises(RuntimeError):  # overwrite: the old files stay until the new are whole
        export_store(_FakeSpark(fail=True), str(tmp_path), str(dest), store="s", mode="overwrite")
    assert sorted(p.name for p in dest.iterdir()) == ["old-file", "part-0.parquet"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    export_store(_FakeSpark(fail=False), str(tmp_path), str(dest), store="s", mode="overwrite")
    assert [p.name for p in dest.iterdir()] == ["part-0.parquet"]
