"""``txstore crashtest``: the command line of the harness (``txstore crashtest --help``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from txstore.crashtest.driver import CrashtestConfig

__all__ = ["add_subcommand", "command", "parse_sizes"]

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
"""


def parse_sizes(text: str) -> list[int]:
    """``10k,100k,1m`` -> ``[10000, 100000, 1000000]`` (empty text: no sizes).

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
            raise argparse.ArgumentTypeError(f"not a size: {part!r} (e.g. 10k, 1m)") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"sizes must be >= 1: {part!r}")
        out.append(value)
    return out


def add_subcommand(sub: Any) -> None:
    """Add ``crashtest`` to the ``txstore`` subcommands (``sub``: argparse subparsers)."""
    p = sub.add_parser(
        "crashtest",
        help="crash-recovery harness: SIGKILL a writer at every fault point, check each recovery",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--seed", type=int, default=1, help="seed of the workload and the kill plan")
    p.add_argument("--kills", type=int, help="writer kills (default 50; with --damage N, N)")
    p.add_argument(
        "--damage",
        type=int,
        default=0,
        metavar="N",
        help="damage trials: after each of the first N kills, damage one random file of a copy "
        "of the partition (flip, truncate, zero a page, delete), reopen it in a child process "
        "and classify the outcome (exact, refused, silent_divergence, signal, untyped); "
        "the run makes at least N kills and skips recovery vs wipe unless --wipe-sizes is given",
    )
    p.add_argument(
        "--points",
        help="comma-separated fault points to plan (default: every one the workload reaches)",
    )
    p.add_argument(
        "--random-fraction",
        type=float,
        default=0.4,
        help="share of the kills beyond one per point made at random moments (default 0.4)",
    )
    p.add_argument(
        "--max-delay", type=float, default=0.4, help="latest random kill, seconds (default 0.4)"
    )
    p.add_argument("--workload", help="module:Class of a Workload subclass (default: standard)")
    p.add_argument("--workload-params", default="{}", help="JSON keyword arguments of the workload")
    p.add_argument("--keys", type=int, help="standard workload: key space (default 500)")
    p.add_argument(
        "--commit-every", type=int, help="standard workload: mean records per commit (50)"
    )
    p.add_argument(
        "--overlay-budget", type=int, default=16 * 1024, help="overlay bytes before spill"
    )
    p.add_argument("--segment-bytes", type=int, default=64 * 1024, help="changelog segment size")
    p.add_argument(
        "--restore-batch",
        type=int,
        default=16,
        help="records per restore batch of writers armed at task.restore_batch (default 16)",
    )
    p.add_argument("--no-sync", action="store_true", help="commit without fsync")
    p.add_argument("--no-reader", action="store_true", help="no concurrent reader process")
    p.add_argument(
        "--replay",
        type=int,
        metavar="K",
        help="run the plan of --seed/--kills up to kill K only (as printed by a failure)",
    )
    p.add_argument(
        "--wipe-sizes",
        type=parse_sizes,
        help="state sizes for recovery vs wipe-and-replay, e.g. 10k,100k,1m,5m "
        "(default 10k,100k, none with --damage; '' skips)",
    )
    p.add_argument("--wipe-repeats", type=int, default=3, help="rounds per size (median)")
    p.add_argument("--wipe-tail", type=int, default=1000, help="records of the crashed commit")
    p.add_argument("--workdir", help="state directory (default: a temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the state directory")
    p.add_argument(
        "--out", default="crashtest-report", help="directory for crashtest.json and .png"
    )
    p.add_argument("--no-plot", action="store_true", help="no PNG")
    p.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")


def config_from_args(args: argparse.Namespace) -> CrashtestConfig:
    from txstore.crashtest.driver import CrashtestConfig
    from txstore.crashtest.workload import DEFAULT_WORKLOAD

    params: dict[str, Any] = json.loads(args.workload_params or "{}")
    if args.keys is not None:
        params["keys"] = args.keys
    if args.commit_every is not None:
        params["commit_every"] = args.commit_every
    if args.damage < 0:
        raise ValueError(f"--damage must be >= 0, not {args.damage}")
    kills = args.kills if args.kills is not None else args.damage or 50
    wipe_sizes = args.wipe_sizes
    if wipe_sizes is None:
        wipe_sizes = [] if args.damage else parse_sizes("10k,100k")
    return CrashtestConfig(
        seed=args.seed,
        kills=kills,
        damage=args.damage,
        points=[p.strip() for p in args.points.split(",") if p.strip()] if args.points else None,
        random_fraction=args.random_fraction,
        max_delay=args.max_delay,
        workload=args.workload or DEFAULT_WORKLOAD,
        workload_params=params,
        overlay_budget_bytes=args.overlay_budget,
        segment_bytes=args.segment_bytes,
        restore_batch=args.restore_batch,
        sync=not args.no_sync,
        reader=not args.no_reader,
        workdir=args.workdir,
        keep=args.keep,
        replay=args.replay,
        wipe_sizes=wipe_sizes,
        wipe_repeats=args.wipe_repeats,
        wipe_tail=args.wipe_tail,
        out=args.out,
        plot=not args.no_plot,
        progress=not args.quiet,
    )


def command(args: argparse.Namespace) -> int:
    """Run ``txstore crashtest``; the exit status (1: a failure)."""
    import os

    from txstore.crashtest import run
    from txstore.errors import TxStoreError

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # --workload modules in the current directory
    try:
        report = run(config_from_args(args))
    except (TxStoreError, ValueError) as exc:  # bad options, workload, work directory
        print(f"txstore crashtest: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_json(), indent=1, default=str))
    else:
        print(report.summary())
    return 0 if report.ok else 1
