"""The ``txstore`` command line (also ``python -m txstore``): one click group, its commands in
this module (``demo``, ``snapshot``, ``export``), :mod:`txstore.cli.admin` (``stat``, ``dump``,
``get``, ``offsets``, ``check``), :mod:`txstore.cli.queries` (``serve``) and
:mod:`txstore.cli.crashtest` (``crashtest``). Exit codes: :mod:`txstore.cli.common`.

Start-up stays light: click is imported here, everything else (rich, the runtime, PySpark)
inside the commands that use it.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from typing import Any

import click

from txstore.cli import admin as admin_commands
from txstore.cli import crashtest as crashtest_commands
from txstore.cli import queries as queries_commands
from txstore.cli.common import (
    EXIT_DEPENDENCY,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    MissingDependencyError,
    Reporter,
    TxCommand,
    emit_json,
    json_option,
    partitions_option,
    progress_option,
    quiet_option,
    require_java,
    require_modules,
    select_partitions,
    silence_stdout,
)
from txstore.version import __version__

__all__ = ["cli", "main"]

_CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class _Group(click.Group):
    command_class = TxCommand


@click.group(cls=_Group, context_settings=_CONTEXT)
@click.version_option(__version__, "-V", "--version", prog_name="txstore")
def cli() -> None:
    """Embedded transactional state store (Kafka Streams' state stores on LMDB).

    Every inspection command opens partitions read-only and reads committed data only: safe
    next to a running writer. PATH is a partition directory (holding data/) or a state
    directory of numbered partition directories. Exit codes: 0 ok, 1 a check found problems,
    2 usage error, 3 a txstore error (damaged or refused store), 4 a missing optional
    dependency or Java (docs/cli.md).

    \b
    Example:
      txstore demo --no-spark          # a pipeline crashed, recovered, queried
      txstore stat demo-out/state      # what is in it
      txstore dump demo-out/state sessions --limit 3 --json | jq .
    """


# ---- demo -----------------------------------------------------------------------------------


@cli.command(context_settings=_CONTEXT)
@click.option(
    "--out",
    default="demo-out",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Output directory (replaced).",
)
@click.option(
    "--events",
    default=60_000,
    show_default=True,
    type=click.IntRange(min=1000),
    help="Page views to generate.",
)
@click.option(
    "--num-partitions",
    default=3,
    show_default=True,
    type=click.IntRange(min=2),
    help="How many partitions (and worker processes) the pipeline has.",
)
@click.option("--no-spark", is_flag=True, help="Skip Spark: the analytics in plain Python.")
@click.option("--no-plot", is_flag=True, help="No PNG chart (no matplotlib needed).")
def demo(out: str, events: int, num_partitions: int, no_spark: bool, no_plot: bool) -> int:
    """Run the end-to-end demo (what make demo runs): a page-view pipeline over several
    partitions, a worker SIGKILLed and recovered, every store checked against a model, queries
    over HTTP, a snapshot analysed by Spark and a chart. Needs the plot extra (matplotlib)
    unless --no-plot, and the spark extra and Java 17 unless --no-spark. Exits 1 if a check
    fails.

    \b
    Example:
      txstore demo --no-spark --events 5000 --out /tmp/demo
    """
    from txstore.demo.main import missing_dependency, run

    problem = missing_dependency(spark=not no_spark, plot=not no_plot)
    if problem is not None:
        raise MissingDependencyError(problem)
    return run(out, events, num_partitions, spark=not no_spark, plot=not no_plot)


# ---- snapshot -------------------------------------------------------------------------------


@cli.command(context_settings=_CONTEXT)
@click.argument("source", type=click.Path(exists=True, file_okay=False))
@click.argument("dest", type=click.Path())
@partitions_option
@json_option
@quiet_option
@progress_option
def snapshot(
    source: str,
    dest: str,
    partitions: frozenset[int] | None,
    as_json: bool,
    json_lines: bool,
    quiet: bool,
    progress: bool | None,
) -> int:
    """Copy a consistent snapshot of SOURCE (a state directory, or one partition directory)
    into the new directory DEST: an LMDB compacting copy of each partition taken in one read
    transaction, plus manifest.json with the stores, configurations and committed offsets of
    exactly that copy. Writers may keep running. This is what a Spark cluster reads.

    \b
    Example:
      txstore snapshot demo-out/state /tmp/snap --partitions 0,2
    """
    from txstore.runtime.snapshot import SnapshotProgress, snapshot_partition, snapshot_state_dir

    out = Reporter("snapshot", quiet, progress)
    t0 = time.perf_counter()
    if partitions is not None:
        select_partitions(source, partitions)
    if os.path.isfile(os.path.join(source, "data", "data.mdb")):
        manifest = snapshot_partition(source, dest)
    else:
        with out.bar("snapshot", None) as bar:

            def step(p: SnapshotProgress) -> None:
                bar.update(completed=p.index, total=p.total)
                out.say(
                    f"partition {p.partition} ({p.index}/{p.total}): "
                    f"{p.data_bytes / 2**20:.1f} MiB in {p.seconds:.2f} s"
                )

            manifest = snapshot_state_dir(source, dest, partitions=partitions, progress=step)
    size = sum(c.data_bytes for c in manifest.partitions)
    seconds = time.perf_counter() - t0
    out.say(
        f"snapshot {manifest.snapshot_id} of {len(manifest.partitions)} partition(s), "
        f"{len(manifest.store_names())} store(s), {size / 2**20:.1f} MiB in "
        f"{seconds:.2f} s at {manifest.root}"
    )
    if as_json or json_lines:
        emit_json(
            {
                "snapshot_id": manifest.snapshot_id,
                "root": manifest.root,
                "kind": manifest.kind,
                "partitions": [c.partition for c in manifest.partitions],
                "stores": manifest.store_names(),
                "data_bytes": size,
                "seconds": round(seconds, 3),
            }
        )
    return EXIT_OK


# ---- export ---------------------------------------------------------------------------------


def _spark_error(exc: BaseException) -> tuple[str, int]:
    """The txstore error inside a Spark exception (raised in a Python worker), else its first
    line; and its exit code (2 for an InvalidArgumentError, 3 otherwise)."""
    text = str(exc)
    found = re.findall(r"txstore\.(?:[a-z_.]+\.)?([A-Za-z]+Error): (.*)", text)
    if found:
        name, message = found[-1]
        code = EXIT_USAGE if name == "InvalidArgumentError" else EXIT_ERROR
        return f"{name}: {message.strip()}", code
    return (text.strip().splitlines()[0] if text.strip() else type(exc).__name__), EXIT_ERROR


def snapshot_choice(text: str) -> str:
    """The ``--snapshot`` of ``export``: ``true``/``false`` (any case), or a directory given
    unambiguously (a path with a ``/``, or an existing directory); anything else, a typo of
    true or false such as ``maybe``, is a usage error (it used to become ``./maybe``).

    >>> snapshot_choice("TRUE"), snapshot_choice("/tmp/snap")
    ('true', '/tmp/snap')
    """
    if text.lower() in ("true", "false"):
        return text.lower()
    if os.sep in text or os.path.isdir(text):
        return os.path.abspath(text)
    raise click.BadParameter(
        f"{text!r} is neither true, false nor a directory: give a snapshot directory as a "
        f"path with a '/' (./{text})",
        param_hint="'--snapshot'",
    )


@cli.command(context_settings=_CONTEXT)
@click.argument("source", type=click.Path(exists=True, file_okay=False))
@click.argument("dest", type=click.Path())
@click.option("--store", metavar="NAME", help="Store to export (required if SOURCE has several).")
@click.option(
    "--format",
    "fmt",
    default="parquet",
    show_default=True,
    type=click.Choice(["parquet", "orc", "json"]),
    help="Output file format.",
)
@partitions_option
@click.option(
    "--snapshot",
    "snap",
    default="true",
    show_default=True,
    metavar="true|false|DIR",
    help="Live sources: true reads a snapshot taken at planning (removed at the end), false "
    "reads the live partitions (fails if one commits meanwhile), DIR (a path with a /, e.g. "
    "./snap, or an existing directory) reads or takes the snapshot in DIR and keeps it.",
)
@click.option("--no-decode", is_flag=True, help="Keys and values as bytes (binary columns).")
@click.option("--key-schema", metavar="DDL", help="Spark schema of JSON/custom-serde keys.")
@click.option("--value-schema", metavar="DDL", help="Spark schema of JSON/custom-serde values.")
@click.option(
    "--overwrite", is_flag=True, help="Replace DEST if it exists (once the new is whole)."
)
@click.option("--master", default="local[*]", show_default=True, help="Spark master.")
@json_option
@quiet_option
@progress_option
def export(
    source: str,
    dest: str,
    store: str | None,
    fmt: str,
    partitions: frozenset[int] | None,
    snap: str,
    no_decode: bool,
    key_schema: str | None,
    value_schema: str | None,
    overwrite: bool,
    master: str,
    as_json: bool,
    json_lines: bool,
    quiet: bool,
    progress: bool | None,
) -> int:
    """Write store NAME of SOURCE (state directory, partition directory or snapshot) to DEST as
    Parquet, ORC or JSON files, read through the txstore Spark data source in a local Spark
    session. The arguments, the store and DEST are checked before Spark starts; the files are
    written into a temporary sibling of DEST renamed at the end, so a failed export leaves
    nothing behind. Needs the spark extra (pip install '.[spark]' from a clone) and Java 17.

    \b
    Example:
      txstore export demo-out/state /tmp/sessions.parquet --store sessions
    """
    require_modules("export", ("pyspark", "pyarrow"))
    from txstore.spark.export import export_store, local_session
    from txstore.spark.options import parse_options
    from txstore.spark.plan import resolve

    options = {"snapshot": snapshot_choice(snap)}
    if partitions is not None:
        select_partitions(source, partitions)
    if partitions is not None:
        options["partitions"] = ",".join(map(str, sorted(partitions)))
    if no_decode:
        options["decode"] = "false"
    if key_schema:
        options["keySchema"] = key_schema
    if value_schema:
        options["valueSchema"] = value_schema
    dest = os.path.abspath(dest)
    if os.path.lexists(dest) and not overwrite:
        raise CliError(
            f"txstore export: error: {dest} exists (--overwrite replaces it)", EXIT_USAGE
        )
    if not os.path.isdir(os.path.dirname(dest)):
        raise CliError(f"txstore export: error: the directory of {dest} does not exist", EXIT_USAGE)
    checked = parse_options({"path": source, **({"store": store} if store else {}), **options})
    _, spec = resolve(checked)  # source, store, partitions: InvalidArgumentError -> exit 2
    require_java("export")
    out = Reporter("export", quiet, progress)
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    log = None
    if quiet:
        jvm_stderr = os.devnull
    else:
        fd, log = tempfile.mkstemp(prefix="txstore-export-spark-", suffix=".log")
        os.close(fd)
        jvm_stderr = log
    out.say(f"starting Spark ({master})")
    owned = SparkSession.getActiveSession() is None
    spark = local_session(master, jvm_stderr=jvm_stderr)
    failed = True
    try:
        out.say(f"exporting store {spec.name} of {source}")
        with out.bar(f"export {spec.name}", None) as bar:
            try:
                result = export_store(
                    spark,
                    source,
                    dest,
                    store=spec.name,
                    format=fmt,
                    mode="overwrite" if overwrite else "errorifexists",
                    options=options,
                    tasks=lambda done, total: bar.update(completed=done, total=total),
                )
            except PySparkException as exc:
                where = f" (Spark's log: {log})" if log else ""
                message, code = _spark_error(exc)
                raise CliError(f"txstore export: error: {message}{where}", code) from exc
        failed = False
    finally:
        if owned:
            spark.stop()
        if log is not None and not failed:
            os.remove(log)
    out.say(
        f"wrote {result.rows} rows as {result.format} to {result.dest} in {result.seconds:.1f} s"
    )
    if as_json or json_lines:
        emit_json(
            {
                "store": spec.name,
                "rows": result.rows,
                "dest": result.dest,
                "format": result.format,
                "seconds": round(result.seconds, 3),
            }
        )
    return EXIT_OK


admin_commands.register(cli, _CONTEXT)
queries_commands.register(cli, _CONTEXT)
crashtest_commands.register(cli, _CONTEXT)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``txstore`` command; returns the process exit code (see
    :mod:`txstore.cli.common`): errors are one line on stderr, never a traceback."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        rv: Any = cli.main(args=args, prog_name="txstore", standalone_mode=False)
    except click.ClickException as exc:  # usage errors (2) and CliError (its code)
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("txstore: interrupted", err=True)
        return 130
    except BrokenPipeError:  # the reader went away (txstore dump ... | head): not an error
        silence_stdout()
        return EXIT_OK
    except ModuleNotFoundError as exc:  # an optional module a command imports
        if exc.name and exc.name.split(".")[0] in ("pyspark", "pyarrow", "matplotlib", "py4j"):
            click.echo(f"txstore: {exc.name} is not installed: pip install '.[spark,plot]' "
                       "(from a clone of txstore)", err=True)  # fmt: skip
            return EXIT_DEPENDENCY
        raise
    return rv if isinstance(rv, int) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
