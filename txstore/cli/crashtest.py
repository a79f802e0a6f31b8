"""``txstore crashtest``: the command line of the harness (``txstore crashtest --help``)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import click

from txstore.cli.common import (
    EXIT_NEGATIVE,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Reporter,
    TxCommand,
    emit_json,
    json_option,
    progress_option,
    quiet_option,
)

if TYPE_CHECKING:
    from txstore.crashtest.driver import CrashtestConfig

__all__ = ["COMMAND", "config_from_args", "config_from_params", "parse_sizes", "register"]

_DESCRIPTION = """\
Crash-recovery harness. A writer process runs a deterministic, seeded workload over a task
with several stores and is SIGKILLed at random moments and at every named fault point, then
restarted; after each recovery the full state of every store is checked against a model
computed from the committed input position (nothing committed lost, nothing uncommitted
visible, offsets consistent), while a reader process checks that read-committed reads only see
whole committed states moving forward. Prints a summary table ending with 'figure:' lines,
writes crashtest.json and crashtest.png to --out, and exits 1 on a failure, printing the seed,
the crash point and a command that replays it. Long pass: txstore crashtest --kills 1000.
Damaged files: txstore crashtest --damage 300 (after each kill, damage one file of a copy of
the partition, reopen it and classify what recovery did; docs/crashtest.md, "Damage").

\b
Example:
  txstore crashtest --kills 20 --wipe-sizes '' --out /tmp/ct
  txstore crashtest --kills 5 --json --no-plot -q | jq .totals
"""


def parse_sizes(text: str) -> list[int]:
    """``10k,100k,1m`` -> ``[10000, 100000, 1000000]`` (empty text: no sizes); ValueError for
    anything else.

    >>> parse_sizes("10k,1m,500"), parse_sizes("")
    ([10000, 1000000, 500], [])
    """
    out = []
    for part in filter(None, (p.strip().lower() for p in text.split(","))):
        mult = {"k": 1000, "m": 1_000_000}.get(part[-1], 1)
        digits = part[:-1] if mult > 1 else part
        try:
            value = int(float(digits) * mult)
        except ValueError:
            raise ValueError(f"not a size: {part!r} (e.g. 10k, 1m)") from None
        if value < 1:
            raise ValueError(f"sizes must be >= 1: {part!r}")
        out.append(value)
    return out


def _sizes(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value is None or isinstance(value, list):
        return value
    try:
        return parse_sizes(str(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


_OPTIONS = [
    click.option("--seed", default=1, show_default=True, help="Seed of the workload and plan."),
    click.option(
        "--kills", type=click.IntRange(min=0), help="Writer kills (default 50; --damage N: N)."
    ),
    click.option(
        "--damage",
        default=0,
        type=click.IntRange(min=0),
        metavar="N",
        help="Damage trials: after each of the first N kills, damage one random file of a copy "
        "of the partition (flip, truncate, zero a page, delete), reopen it in a child process "
        "and classify the outcome (exact, refused, silent_divergence, signal, untyped); the run "
        "makes at least N kills and skips recovery vs wipe unless --wipe-sizes is given.",
    ),
    click.option(
        "--points", help="Comma-separated fault points to plan (default: every one reached)."
    ),
    click.option(
        "--random-fraction",
        default=0.4,
        show_default=True,
        type=click.FloatRange(0, 1),
        help="Share of the kills beyond one per point made at random moments.",
    ),
    click.option(
        "--max-delay", default=0.4, show_default=True, help="Latest random kill, seconds."
    ),
    click.option("--workload", help="module:Class of a Workload subclass (default: standard)."),
    click.option("--workload-params", default="{}", help="JSON keyword arguments of the workload."),
    click.option("--keys", type=int, help="Standard workload: key space (default 500)."),
    click.option("--commit-every", type=int, help="Standard workload: mean records per commit."),
    click.option(
        "--overlay-budget", default=16 * 1024, show_default=True, help="Overlay bytes before spill."
    ),
    click.option(
        "--segment-bytes", default=64 * 1024, show_default=True, help="Changelog segment size."
    ),
    click.option(
        "--restore-batch",
        default=16,
        show_default=True,
        help="Records per restore batch of writers armed at task.restore_batch.",
    ),
    click.option("--no-sync", is_flag=True, help="Commit without fsync."),
    click.option("--no-reader", is_flag=True, help="No concurrent reader process."),
    click.option(
        "--replay",
        type=int,
        metavar="K",
        help="Run the plan of --seed/--kills up to kill K only (as printed by a failure).",
    ),
    click.option(
        "--wipe-sizes",
        callback=_sizes,
        metavar="SIZES",
        help="State sizes for recovery vs wipe-and-replay, e.g. 10k,100k,1m,5m (default "
        "10k,100k, none with --damage; '' skips).",
    ),
    click.option("--wipe-repeats", default=3, show_default=True, help="Rounds per size (median)."),
    click.option(
        "--wipe-tail", default=1000, show_default=True, help="Records of the crashed commit."
    ),
    click.option("--workdir", help="State directory (default: a temporary one)."),
    click.option("--keep", is_flag=True, help="Keep the state directory."),
    click.option(
        "--out",
        default="crashtest-report",
        show_default=True,
        help="Directory for crashtest.json and .png ('' writes neither).",
    ),
    click.option("--no-plot", is_flag=True, help="No PNG."),
    json_option,
    quiet_option,
    progress_option,
]


def config_from_params(params: Mapping[str, Any]) -> CrashtestConfig:
    """The harness settings of the command's parsed options (click's ``ctx.params``)."""
    from txstore.crashtest.driver import CrashtestConfig
    from txstore.crashtest.workload import DEFAULT_WORKLOAD

    try:
        workload_params: dict[str, Any] = json.loads(params["workload_params"] or "{}")
    except json.JSONDecodeError as exc:
        raise click.BadParameter(str(exc), param_hint="'--workload-params'") from None
    if params["keys"] is not None:
        workload_params["keys"] = params["keys"]
    if params["commit_every"] is not None:
        workload_params["commit_every"] = params["commit_every"]
    damage = params["damage"]
    kills = params["kills"] if params["kills"] is not None else damage or 50
    wipe_sizes = params["wipe_sizes"]
    if wipe_sizes is None:
        wipe_sizes = [] if damage else parse_sizes("10k,100k")
    points = params["points"]
    return CrashtestConfig(
        seed=params["seed"],
        kills=kills,
        damage=damage,
        points=[p.strip() for p in points.split(",") if p.strip()] if points else None,
        random_fraction=params["random_fraction"],
        max_delay=params["max_delay"],
        workload=params["workload"] or DEFAULT_WORKLOAD,
        workload_params=workload_params,
        overlay_budget_bytes=params["overlay_budget"],
        segment_bytes=params["segment_bytes"],
        restore_batch=params["restore_batch"],
        sync=not params["no_sync"],
        reader=not params["no_reader"],
        workdir=params["workdir"],
        keep=params["keep"],
        replay=params["replay"],
        wipe_sizes=wipe_sizes,
        wipe_repeats=params["wipe_repeats"],
        wipe_tail=params["wipe_tail"],
        out=params["out"],
        plot=not params["no_plot"],
        progress=not params["quiet"],
    )


def config_from_args(argv: list[str]) -> CrashtestConfig:
    """The settings of ``txstore crashtest ARGV...`` (what a printed replay command runs)."""
    with COMMAND.make_context("crashtest", list(argv)) as ctx:
        return config_from_params(ctx.params)


@contextlib.contextmanager
def _rich_progress(out: Reporter) -> Iterator[None]:
    """The harness's progress (:class:`txstore.crashtest.report.Progress`) drawn as a rich bar
    on stderr while the ``with`` runs. The harness builds its Progress itself, so its class is
    swapped for the duration (the harness offers no progress hook yet)."""
    import txstore.crashtest as harness
    from txstore.crashtest.report import Progress

    if not out.bars:
        yield
        return
    with out.bar("crashtest", None) as bar:

        class BarProgress(Progress):
            def update(self, done: int, text: str = "") -> None:
                if self.enabled:
                    bar.update(completed=done, total=self.total, description=text[:50] or None)

            def message(self, text: str) -> None:
                if self.enabled:
                    out.say(text)

            def close(self) -> None:
                pass

        saved = getattr(harness, "Progress")  # noqa: B009
        setattr(harness, "Progress", BarProgress)  # noqa: B010
        try:
            yield
        finally:
            setattr(harness, "Progress", saved)  # noqa: B010


def crashtest(**params: Any) -> int:
    """Run ``txstore crashtest``; the exit status (1: a failure)."""
    from txstore.crashtest import run

    config = config_from_params(params)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # --workload modules in the current directory
    out = Reporter("crashtest", params["quiet"], params["progress"])
    try:
        with _rich_progress(out):
            report = run(config)
    except ValueError as exc:  # bad points, workload parameters (TxStoreErrors: TxCommand)
        from txstore.errors import TxStoreError

        if isinstance(exc, TxStoreError):
            raise
        raise CliError(f"txstore crashtest: error: {exc}", EXIT_USAGE) from exc
    if params["as_json"] or params["json_lines"]:
        emit_json(report.to_json())
    else:
        click.echo(report.summary())
    return EXIT_OK if report.ok else EXIT_NEGATIVE


def _build() -> click.Command:
    f: Any = crashtest
    for option in reversed(_OPTIONS):
        f = option(f)
    return click.command("crashtest", cls=TxCommand, help=_DESCRIPTION)(f)


#: The ``crashtest`` command (built once: click's decorators add to the function they wrap).
COMMAND = _build()


def register(group: click.Group, context: dict[str, Any]) -> None:
    """Add ``crashtest`` to ``group``."""
    COMMAND.context_settings.update(context)
    group.add_command(COMMAND)
