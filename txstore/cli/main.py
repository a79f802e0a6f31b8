"""The ``txstore`` command line (also ``python -m txstore``)."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="txstore", description="Embedded transactional state store (Kafka Streams on LMDB)."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "demo",
        help="run the end-to-end demo (what make demo runs); --help for its options",
        add_help=False,
    )
    from txstore.cli.admin import add_subcommands as add_admin

    add_admin(sub)
    snap = sub.add_parser(
        "snapshot",
        help="copy a consistent snapshot of a state directory (what a Spark cluster reads)",
        description="Copy every partition of SOURCE (a state directory, or one partition "
        "directory) into the new directory DEST: an LMDB compacting copy of each partition "
        "taken in one read transaction, plus manifest.json with the stores, configurations "
        "and committed offsets of exactly that copy. Writers may keep running.",
    )
    snap.add_argument("source", help="state directory (<dir>/<n>/data) or partition directory")
    snap.add_argument("dest", help="new snapshot directory (must not exist, or be empty)")
    snap.add_argument("--partitions", help="only these partitions, e.g. 0,2,5-7 (default: all)")
    snap.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    export = sub.add_parser(
        "export",
        help="write one store as Parquet (or ORC, JSON) through the Spark data source",
        description="Read store NAME of SOURCE (state directory, partition directory or "
        "snapshot) with the txstore Spark data source in a local Spark session and write it "
        "to DEST. Needs the spark extra: pip install 'txstore[spark]'.",
    )
    export.add_argument("source", help="state directory, partition directory or snapshot")
    export.add_argument("dest", help="output directory")
    export.add_argument("--store", metavar="NAME", help="store to export (required if several)")
    export.add_argument("--format", default="parquet", choices=("parquet", "orc", "json"))
    export.add_argument("--partitions", help="only these partitions, e.g. 0,2,5-7")
    export.add_argument(
        "--snapshot",
        default="true",
        metavar="true|false|DIR",
        help="live sources: true (default) reads a snapshot taken at planning (removed at the "
        "end), false reads the live partitions (fails if one commits meanwhile), DIR reads or "
        "takes the snapshot in DIR and keeps it",
    )
    export.add_argument("--no-decode", action="store_true", help="keys and values as bytes")
    export.add_argument("--key-schema", help="Spark schema of JSON/custom-serde keys (DDL)")
    export.add_argument("--value-schema", help="Spark schema of JSON/custom-serde values (DDL)")
    export.add_argument("--overwrite", action="store_true", help="replace DEST if it exists")
    export.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    export.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    from txstore.cli.crashtest import add_subcommand as add_crashtest

    add_crashtest(sub)
    from txstore.cli.queries import add_subcommand as add_serve

    add_serve(sub)
    return parser


def _progress(quiet: bool) -> Callable[[str], None]:
    def say(line: str) -> None:
        if not quiet:
            print(f"txstore: {line}", file=sys.stderr, flush=True)

    return say


def _snapshot_command(args: argparse.Namespace) -> int:
    from txstore.runtime.snapshot import SnapshotProgress, snapshot_partition, snapshot_state_dir
    from txstore.spark.options import parse_partitions

    say = _progress(args.quiet)
    t0 = time.perf_counter()
    partitions = parse_partitions(args.partitions) if args.partitions else None

    def step(p: SnapshotProgress) -> None:
        say(
            f"partition {p.partition} ({p.index}/{p.total}): "
            f"{p.data_bytes / 2**20:.1f} MiB in {p.seconds:.2f} s"
        )

    if os.path.isfile(os.path.join(args.source, "data", "data.mdb")):
        if partitions is not None:
            raise SystemExit("txstore snapshot: --partitions needs a state directory")
        manifest = snapshot_partition(args.source, args.dest)
    else:
        manifest = snapshot_state_dir(args.source, args.dest, partitions=partitions, progress=step)
    size = sum(c.data_bytes for c in manifest.partitions)
    say(
        f"snapshot {manifest.snapshot_id} of {len(manifest.partitions)} partition(s), "
        f"{len(manifest.store_names())} store(s), {size / 2**20:.1f} MiB in "
        f"{time.perf_counter() - t0:.2f} s at {manifest.root}"
    )
    return 0


def _spark_error(exc: BaseException) -> str:
    """The txstore error inside a Spark exception (raised in a Python worker), else its
    first line."""
    text = str(exc)
    found = re.findall(r"txstore\.(?:[a-z_.]+\.)?([A-Za-z]+Error): (.*)", text)
    if found:
        name, message = found[-1]
        return f"{name}: {message.strip()}"
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def _export_command(args: argparse.Namespace) -> int:
    try:
        from txstore.spark.export import export_store, local_session
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise SystemExit(f"txstore export: {exc}") from None
    say = _progress(args.quiet)
    snapshot = args.snapshot
    if snapshot.lower() not in ("true", "false"):
        snapshot = os.path.abspath(snapshot)
    options = {"snapshot": snapshot}
    if args.partitions:
        options["partitions"] = args.partitions
    if args.no_decode:
        options["decode"] = "false"
    if args.key_schema:
        options["keySchema"] = args.key_schema
    if args.value_schema:
        options["valueSchema"] = args.value_schema
    say(f"starting Spark ({args.master})")
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    owned = SparkSession.getActiveSession() is None
    spark = local_session(args.master)
    try:
        say(f"exporting store {args.store or '(the only one)'} of {args.source}")
        try:
            result = export_store(
                spark,
                args.source,
                args.dest,
                store=args.store,
                format=args.format,
                mode="overwrite" if args.overwrite else "errorifexists",
                options=options,
                progress=say,
            )
        except PySparkException as exc:
            print(f"txstore export: error: {_spark_error(exc)}", file=sys.stderr)
            return 1
    finally:
        if owned:
            spark.stop()
    say(f"wrote {result.rows} rows as {result.format} to {result.dest} in {result.seconds:.1f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``txstore`` command; returns the process exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["demo"]:  # the demo parses its own options
        from txstore.demo import main as demo_main

        return demo_main(argv[1:])
    args = _build_parser().parse_args(argv)
    from txstore.cli.admin import COMMANDS as ADMIN_COMMANDS

    if args.command in ADMIN_COMMANDS:
        from txstore.cli.admin import run as run_admin

        return run_admin(args)
    if args.command == "crashtest":
        from txstore.cli.crashtest import command as crashtest_command

        return crashtest_command(args)
    if args.command == "serve":
        from txstore.cli.queries import command as serve_command

        return serve_command(args)
    if args.command in ("snapshot", "export"):
        from txstore.errors import TxStoreError

        try:
            if args.command == "snapshot":
                return _snapshot_command(args)
            return _export_command(args)
        except TxStoreError as exc:
            print(f"txstore {args.command}: error: {exc}", file=sys.stderr)
            return 1
    return 2  # pragma: no cover - argparse rejects unknown commands first


if __name__ == "__main__":
    sys.exit(main())
