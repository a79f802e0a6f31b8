"""``make demo`` / ``txstore demo``: every part of txstore working together on real data.

1. check the codecs against Kafka's own test vectors;
2. generate a page-view stream (JSON files, one per micro-batch);
3. process it as a Spark Structured Streaming job whose state is txstore
   (:mod:`txstore.demo.streaming`: every partition's views in one
   :class:`~txstore.runtime.task.Task` with a timestamped key-value store with headers, a plain
   window store with headers and a session store, committed with the micro-batch id);
4. SIGKILL the job (driver and JVM) mid-stream, restart it from its checkpoint, and let every
   Task recover without a wipe, reading a user's total after every micro-batch meanwhile;
5. check every store of every partition, and every output row, against a model computed
   straight from the events (0 lost, 0 counted twice);
6. serve interactive queries over HTTP from two ``txstore serve`` processes and answer a few
   through the routing client;
7. snapshot the state and run Spark analytics on it (top pages, session lengths), checked
   against a plain-Python computation, and draw a PNG chart.

With ``--no-spark``, steps 3 and 4 run one worker *process* per partition instead (committing
every 2,000 events; one of them is killed), and step 7 computes the analytics in Python.

Everything is real: processes, signals, LMDB files, sockets on 127.0.0.1, a local Spark. The
demo exits non-zero if any check fails. Output goes to ``demo-out/`` (``--out`` to change; an
existing directory is replaced only if an earlier demo made it, or with ``--force``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from txstore.demo import analytics as an
from txstore.demo import pipeline as pl
from txstore.demo import streaming as st
from txstore.demo.codec_checks import run_codec_demo
from txstore.demo.serving import QueryServers
from txstore.runtime import admin
from txstore.runtime.snapshot import snapshot_state_dir

ROOT = Path(__file__).resolve().parents[2]
#: The file that marks an output directory as the demo's (so a rerun may replace it).
MARKER = ".txstore-demo"
STEPS = 7
#: What the demo writes into its output directory (one made before :data:`MARKER` existed
#: holds only these, and may be replaced too).
DEMO_FILES = frozenset(
    {"state", "input", "snapshot", "checkpoint", "output", "assignment.json", "analytics.png"}
    | {"spark-result.json", "jvm.log"}
)


class Demo:
    def __init__(
        self, out: Path, events: int, partitions: int, spark: bool, plot: bool = True
    ) -> None:
        self.out = out
        self.events = events
        self.partitions = partitions
        self.spark = spark
        self.plot = plot
        self.state = out / "state"
        self.batches: list[list[pl.Event]] = []
        self.run: st.SparkRun | None = None
        self.servers: QueryServers | None = None
        self.inputs = out / "input"
        self.failures: list[str] = []
        self._last_bar: tuple[str, int] = ("", -1)
        self.facts: list[tuple[str, str]] = []
        self.env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        )

    # ---- output helpers ---------------------------------------------------------------------

    def step(self, n: int, title: str) -> None:
        print(f"\n[{n}/{STEPS}] {title}", flush=True)

    def say(self, text: str) -> None:
        print(f"      {text}", flush=True)

    def check(self, ok: bool, what: str) -> bool:
        self.say(f"{'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            self.failures.append(what)
        return ok

    def bar(self, label: str, done: int, total: int) -> None:
        """A progress bar: redrawn in place on a terminal, one line per change otherwise."""
        if (label, done) == self._last_bar:
            return
        self._last_bar = (label, done)
        width = 30
        filled = int(width * done / max(total, 1))
        text = f"      {label:<14} [{'#' * filled}{'.' * (width - filled)}] {done:>6,}/{total:,}"
        if sys.stdout.isatty():
            print("\r" + text, end="", flush=True)
        else:
            print(text, flush=True)

    # ---- 2. input ---------------------------------------------------------------------------

    def generate(self) -> list[list[pl.Event]]:
        if self.out.exists():
            shutil.rmtree(self.out)
        self.out.mkdir(parents=True)
        (self.out / MARKER).write_text("made by txstore demo; a rerun replaces this directory\n")
        if self.spark:
            events = pl.events(self.events)
            self.batches = st.write_batches(events, self.inputs, st.batch_files(self.events))
            self.step(
                2,
                f"generating {self.events:,} page views: {len(self.batches)} JSON files, one per "
                f"micro-batch, for {self.partitions} partitions",
            )
            by_partition = pl.by_partition(events, self.partitions)
        else:
            self.step(2, f"generating {self.events:,} page views into {self.partitions} partitions")
            by_partition = pl.generate(self.events, self.partitions, self.inputs)
        for p, evs in enumerate(by_partition):
            users = len({e.user for e in evs})
            span = (evs[-1].ts - evs[0].ts) / 3_600_000 if evs else 0
            self.say(
                f"partition {p}: {len(evs):>6,} events, {users} users, {span:.1f} h of event time"
            )
        return by_partition

    # ---- 3+4. processing, crash, recovery ---------------------------------------------------

    def worker(self, partition: int, pace_ms: float, every: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "txstore.demo.child",
                "worker",
                str(self.state),
                str(partition),
                str(self.inputs),
                str(pace_ms),
                str(every),
            ],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def committed_position(self, partition: int) -> int:
        path = self.state / str(partition)
        if not (path / "data").is_dir():
            return 0
        try:
            rows = admin.offsets(path)
        except Exception:
            return 0
        positions = [r["input_position"] for r in rows if r["input_position"] is not None]
        return min(positions) if positions else 0

    def process_on_spark(self) -> float:
        files = len(self.batches)
        self.step(
            3,
            f"processing: a Structured Streaming job (local[2], one file per micro-batch), "
            f"state in txstore, {self.partitions} partitions",
        )
        self.run = run = st.SparkRun(self.out, self.partitions, self.env, self)
        killed_at = run.crash(files)
        self.step(4, "restart from the checkpoint: each Task recovers (no wipe)")
        self.say(f"{files - killed_at} micro-batch(es) left after the kill")
        user = "user-000"  # the most active one
        final = sum(1 for batch in self.batches for e in batch if e.user == user)
        seconds, lines = run.restart(self.live_query(user, final))
        replayed = [x for x in lines if x["skipped"]]
        self.say(
            f"first micro-batch committed {seconds:.1f} s after the restart (JVM start "
            "included)"
            + (
                f"; micro-batch {replayed[0]['batch_id']} was replayed, and the partitions that "
                "had committed it skipped it"
                if replayed
                else ""
            )
        )
        self.facts.append(("SIGKILL of the job to its next batch", f"{seconds:.1f} s (no wipe)"))
        return 1000 * seconds

    def process(self, by_partition: list[list[pl.Event]]) -> float:
        if self.spark:
            return self.process_on_spark()
        victim = 1 % self.partitions
        totals = [len(e) for e in by_partition]
        # At least 6 commits in the victim's input, so that the kill lands mid-stream.
        every = max(1, min(pl.COMMIT_EVERY, totals[victim] // 6))
        self.step(
            3, f"processing: {self.partitions} worker processes, a commit every {every:,} events"
        )
        procs = {
            p: self.worker(p, 60.0 if p == victim else 0.0, every) for p in range(self.partitions)
        }
        kill_at = totals[victim] // 3
        killed_at = -1
        while procs[victim].poll() is None:
            pos = self.committed_position(victim)
            self.bar(f"partition {victim}", min(pos, totals[victim]), totals[victim])
            if pos >= kill_at:
                time.sleep(random.Random(pos).uniform(0.0, 0.1))  # somewhere in the next batch
                os.kill(procs[victim].pid, signal.SIGKILL)
                procs[victim].wait()
                killed_at = pos
                break
            time.sleep(0.05)
        print(flush=True)
        self.check(
            0 <= killed_at < totals[victim],
            f"worker of partition {victim} SIGKILLed mid-stream "
            f"(committed input position {killed_at:,} of {totals[victim]:,})",
        )
        for p, proc in procs.items():
            if p != victim:
                _, err = proc.communicate(timeout=600)
                self.check(
                    proc.returncode == 0,
                    f"worker of partition {p} finished"
                    + (f": {err[-300:]}" if proc.returncode else ""),
                )
        self.step(4, f"restarting the worker of partition {victim} (no wipe: recover + restore)")
        t0 = time.perf_counter()
        proc = self.worker(victim, 0.0, every)
        out, err = proc.communicate(timeout=600)
        elapsed = time.perf_counter() - t0
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        init = next((x for x in lines if x["event"] == "initialized"), None)
        ok = proc.returncode == 0 and init is not None
        self.check(
            ok,
            f"worker of partition {victim} restarted and finished"
            + ("" if ok else f": {err[-300:]}"),
        )
        recovery_ms = 1000 * init["seconds"] if init else float("nan")
        if init:
            self.say(
                f"recovered at input position {init['position']:,} in {recovery_ms:.1f} ms; "
                f"replayed {sum(init['restored'].values()):,} changelog records, rolled back "
                f"{sum(init['rolled_back'].values()):,}"
            )
        self.facts.append(("recovery after SIGKILL", f"{recovery_ms:.1f} ms (no wipe)"))
        self.say(f"the restarted worker processed the rest of its input in {elapsed:.1f} s")
        return recovery_ms

    # ---- 5. verification --------------------------------------------------------------------

    def open_task(self, partition: int) -> Any:
        """The Task of ``partition``, recovered and restored (the caller closes it)."""
        if self.spark:
            return st.demo_step(self.out, self.partitions).open_task(partition)
        task = pl.open_task(self.state, partition)
        task.initialize()
        return task

    def verify(self, by_partition: list[list[pl.Event]]) -> None:
        self.step(5, "checking every store of every partition against the events")
        print(f"      {'partition':<10}{'store':<13}{'entries':>9}  result")
        checked = 0
        for p, events in enumerate(by_partition):
            expected = pl.expected(events)
            want = st.committed_batches(self.out) if self.spark else len(events)
            with self.open_task(p) as task:
                position = task.input_position
                actual = pl.actual(task)
            self.check(
                position == want,
                f"partition {p}: input position {position} = "
                + (f"{want} committed micro-batches" if self.spark else f"{want} events"),
            )
            for store in ("user-totals", "page-views", "sessions", "ad-results"):
                same = actual[store] == expected[store]
                checked += len(expected[store])
                result = "exact" if same else "DIFFERENT"
                print(f"      {p:<10}{store:<13}{len(actual[store]):>9,}  {result}")
                if not same:
                    self.failures.append(f"partition {p} store {store} differs from the model")
        self.facts.append(("entries verified against the model", f"{checked:,}"))
        if self.spark:
            emitted = st.emitted_totals(self.out)
            totals = {
                u: n for p in by_partition for u, (n, _, _) in pl.expected(p)["user-totals"].items()
            }
            rows = sum(len(v) for v in emitted.values())
            self.check(
                emitted == {u: list(range(1, n + 1)) for u, n in totals.items()},
                f"outputs: {rows:,} rows in Parquet files, each view's running total exactly once",
            )
        report = admin.check(self.state)
        self.check(
            report.ok,
            f"txstore check: {report.partitions} partitions, {report.stores} "
            f"stores, {report.rows_read:,} rows and {report.changelog_records:,} changelog "
            f"records read, no problem",
        )

    # ---- 6. queries -------------------------------------------------------------------------

    def start_servers(self) -> QueryServers:
        """Start the two query servers (once) and wait until they run."""
        if self.servers is None:
            self.servers = QueryServers(self.state, self.out, self.partitions, self.env)
            self.servers.wait_running()
            for i, host in enumerate(self.servers.hosts):
                self.say(f"instance {'AB'[i]} at {host}: partitions {self.servers.owned[host]}")
        return self.servers

    def live_query(self, user: str, final: int) -> Callable[[dict[str, Any]], None]:
        """A callback for each micro-batch of the restarted job: read ``user``'s committed
        total while the job runs (as ``txstore get`` does: read-only, next to the job's
        writers); it must never go back, nor past ``final``."""
        seen = [0]

        def ask(line: dict[str, Any]) -> None:
            _, value = admin.get(self.state, "user-totals", user)
            got = value.value if value is not None else 0
            self.check(
                seen[0] <= got <= final,
                f"live, after micro-batch {line['batch_id']}: user-totals[{user}] = {got:,} "
                f"views (of {final:,})",
            )
            seen[0] = got

        return ask

    def serve(self, by_partition: list[list[pl.Event]]) -> None:
        self.step(6, "interactive queries over HTTP from two instances")
        client = self.start_servers().client
        everything = [e for evs in by_partition for e in evs]
        expected_totals: dict[str, int] = {}
        for e in everything:
            expected_totals[e.user] = expected_totals.get(e.user, 0) + 1
        users = [*sorted(expected_totals, key=lambda u: -expected_totals[u])[:3], "user-299"]
        answered = 0
        for user in users:
            meta = client.metadata_for_key("user-totals", user)
            value = client.get("user-totals", user)
            got = value.value if value is not None else 0
            want = expected_totals.get(user, 0)
            answered += got == want
            self.check(
                got == want,
                f"user-totals[{user}] = {got} views (partition "
                f"{meta.partition}, owner {meta.active_host}, asked via A)",
            )
        page = "/docs/page-00"
        owner = client.metadata_for_key("page-views", page)
        windows = client.fetch("page-views", page, 0, 2**62)
        got = sum(kv.value.value for kv in windows)
        want = sum(
            1
            for e in everything
            if e.page == page and pl.partition_of(e.user, self.partitions) == owner.partition
        )
        self.check(
            got == want,
            f"page-views[{page}] in partition {owner.partition}: {len(windows)} "
            f"one-minute windows, {got:,} views",
        )
        self.facts.append(
            ("queries answered over HTTP", f"{answered + 1} of {len(users) + 1} exact")
        )

    def spark_subprocess(self, snap: Path) -> dict[str, Any]:
        """Run the Spark analytics in the streaming job's child process, whose Spark session is
        still up (the JVM's start-up chatter stays out of the demo's output; it is shown if
        Spark fails)."""
        if self.run is None:
            raise RuntimeError("the Spark analytics run in the streaming job's child process")
        result = self.run.analytics(snap)
        for key in ("top_pages", "session_buckets"):
            result[key] = [tuple(x) for x in result[key]]
        return result

    # ---- 7. snapshot + Spark ----------------------------------------------------------------

    def analytics(self) -> None:
        self.step(7, "snapshot + Spark analytics")
        snap = self.out / "snapshot"
        t0 = time.perf_counter()
        manifest = snapshot_state_dir(self.state, snap)
        size = sum(c.data_bytes for c in manifest.partitions)
        self.say(
            f"snapshot of {len(manifest.partitions)} partitions, {size / 2**20:.1f} MiB, "
            f"in {time.perf_counter() - t0:.2f} s: {snap}"
        )
        expected = an.python_analytics(snap)
        if not self.spark:
            self.say("Spark skipped (--no-spark); analytics computed in Python")
            result = expected
        else:
            t0 = time.perf_counter()
            result = self.spark_subprocess(snap)
            self.say(
                f"Spark (local[2], txstore data source, in the streaming job's session) took "
                f"{time.perf_counter() - t0:.1f} s"
            )
            self.check(
                result["top_pages"] == expected["top_pages"], "Spark's top pages = a direct read"
            )
            self.check(
                result["session_buckets"] == expected["session_buckets"],
                "Spark's session lengths = a direct read",
            )
        print(f"\n      {'top page':<16}{'views':>8}{'minutes':>9}")
        for page, views, minutes in result["top_pages"][:8]:
            print(f"      {page:<16}{views:>8,}{minutes:>9,}")
        print(f"\n      {'session length':<16}{'sessions':>9}")
        for label, n in result["session_buckets"]:
            print(f"      {label:<16}{n:>9,}")
        if self.plot:
            png = an.chart(result, self.out / "analytics.png")
            self.say(f"chart: {png}")
        else:
            self.say("chart skipped (--no-plot)")
        self.facts.append(("sessions analysed", f"{result['sessions']:,}"))


def out_dir_problem(out: Path, force: bool) -> str | None:
    """Why the demo must not write into ``out``, or None: an existing directory that holds
    anything but what the demo writes (:data:`DEMO_FILES`) and was not made by the demo (no
    :data:`MARKER`) is refused unless ``force``, since the demo replaces its output directory;
    so is a file."""
    if not out.exists():
        return None
    if not out.is_dir():
        return f"txstore demo: --out {out} is a file, not a directory; choose another --out"
    if force or (out / MARKER).exists() or {p.name for p in out.iterdir()} <= DEMO_FILES:
        return None
    return (
        f"txstore demo: --out {out} exists and was not made by the demo (it would be deleted); "
        "choose another --out, or pass --force to replace it"
    )


def missing_dependency(spark: bool, plot: bool) -> str | None:
    """What the demo cannot run without, as one line saying what to install; None if
    everything it needs is here (matplotlib for the chart; PySpark, pyarrow and Java 17 for
    the Spark step). Checked before anything starts."""
    import importlib.util

    from txstore.spark.export import java_problem

    def missing(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is None
        except (ImportError, ValueError):  # sys.modules[module] is None: blocked
            return True

    if plot and missing("matplotlib"):
        return (
            "txstore demo needs the plot extra for its chart (matplotlib not installed): "
            "pip install '.[plot]' (from a clone of txstore), or pass --no-plot"
        )
    if spark:
        gone = [m for m in ("pyspark", "pyarrow") if missing(m)]
        if gone:
            return (
                f"txstore demo needs the spark extra ({', '.join(gone)} not installed): "
                "pip install '.[spark]' (from a clone of txstore), or pass --no-spark"
            )
        problem = java_problem()
        if problem is not None:
            return f"txstore demo: {problem}, or pass --no-spark"
    return None


def run(
    out: str | os.PathLike[str],
    events: int = 60_000,
    partitions: int = 3,
    *,
    spark: bool = True,
    plot: bool = True,
) -> int:
    """Run the demo into ``out`` (replaced); the exit status (1: a check failed). The caller
    checks :func:`missing_dependency` first."""
    started = time.perf_counter()
    print("txstore demo: a page-view pipeline on txstore, crashed, recovered, queried, analysed")
    print(f"\n[1/{STEPS}] codecs: Kafka's own test vectors through the C extension")
    failed_codecs = run_codec_demo(lambda line: None)
    print(f"      {'ok  ' if not failed_codecs else 'FAIL'} every codec matches Kafka's bytes")
    demo = Demo(Path(out).resolve(), events, partitions, spark, plot)
    if failed_codecs:
        demo.failures.append("codec checks")
    by_partition = demo.generate()
    try:
        recovery_ms = demo.process(by_partition)
        demo.verify(by_partition)
        demo.serve(by_partition)
        demo.analytics()
    finally:
        if demo.servers is not None:
            demo.servers.stop()
        if demo.run is not None:
            demo.run.stop()
    print("\nsummary")
    demo.facts.insert(0, ("events processed exactly once", f"{events:,}"))
    for what, value in demo.facts:
        print(f"      {what:<38}{value}")
    print(f"      {'wall time':<38}{time.perf_counter() - started:.1f} s")
    if demo.failures:
        print(f"\nFAILED: {len(demo.failures)} check(s): " + "; ".join(demo.failures))
        return 1
    if spark:
        print(
            f"\nall checks passed; the job restarted from its checkpoint in "
            f"{recovery_ms / 1000:.1f} s (JVM start included) without wiping any store"
        )
    else:
        print(f"\nall checks passed; recovery took {recovery_ms:.1f} ms without wiping any store")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m txstore.demo.main [--out DIR] ...`` (``txstore demo`` is the same)."""
    parser = argparse.ArgumentParser(
        prog="txstore demo", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument(
        "--out",
        default="demo-out",
        help="output directory (replaced if an earlier demo made it; see --force)",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace --out even if the demo did not make it"
    )
    parser.add_argument("--events", type=int, default=60_000, help="page views to generate")
    parser.add_argument("--num-partitions", type=int, default=3, help="partitions (>= 2)")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark step")
    parser.add_argument("--no-plot", action="store_true", help="no PNG chart")
    args = parser.parse_args(argv)
    if args.num_partitions < 2 or args.events < 1000:
        parser.error("--num-partitions must be >= 2 and --events >= 1000")
    refused = out_dir_problem(Path(args.out), args.force)
    if refused is not None:
        print(refused, file=sys.stderr)
        return 2
    problem = missing_dependency(not args.no_spark, not args.no_plot)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 4
    return run(
        args.out, args.events, args.num_partitions, spark=not args.no_spark, plot=not args.no_plot
    )


if __name__ == "__main__":
    sys.exit(main())
