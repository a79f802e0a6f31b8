"""``txstore serve``: host partitions of a state directory and serve queries over HTTP."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from typing import Any

__all__ = ["add_subcommand", "command"]

_DESCRIPTION = """\
Host the partitions of STATE_DIR that the membership assigns to this instance (recover and
restore each, as a task), and serve their stores' metadata and queries over HTTP/JSON at
--application-server (see docs/queries.md for the API). The stores are found in the
partitions' metadata. Membership: --assignment FILE (a static assignment, re-read when it
changes), --registry DIR (instances register in a shared directory and share the partitions),
or neither (every partition of --partitions, or of STATE_DIR, here). Binds loopback only unless
--allow-remote; --token-file (or TXSTORE_TOKEN) requires a bearer token.
"""


def add_subcommand(sub: Any) -> None:
    """Add ``serve`` to the ``txstore`` argument parser."""
    p = sub.add_parser(
        "serve",
        help="serve a state directory's stores over HTTP (interactive queries, KIP-67)",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("state_dir", help="state directory (<dir>/<partition>/...)")
    p.add_argument("--application-id", required=True, help="the application's id")
    p.add_argument(
        "--application-server",
        default="127.0.0.1:7070",
        metavar="HOST:PORT",
        help="address to listen on and publish in the metadata (default 127.0.0.1:7070)",
    )
    m = p.add_mutually_exclusive_group()
    m.add_argument("--assignment", metavar="FILE", help="static assignment JSON file")
    m.add_argument("--registry", metavar="DIR", help="shared registry directory")
    p.add_argument("--partitions", type=int, help="number of partitions (registry, or all-local)")
    p.add_argument(
        "--standby-replicas", type=int, default=0, help="registry: standbys per partition"
    )
    p.add_argument(
        "--refresh-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how often the membership is re-read (registry: the heartbeat; default 1)",
    )
    p.add_argument(
        "--session-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="registry: a member silent this long is gone (default 10)",
    )
    p.add_argument("--token-file", help="file holding the bearer token (or set TXSTORE_TOKEN)")
    p.add_argument("--allow-remote", action="store_true", help="allow a non-loopback address")
    p.add_argument("--max-results", type=int, default=1000, help="items per iterator query")
    p.add_argument("--max-request-bytes", type=int, default=64 * 1024, help="request size limit")
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (e.g. one that registers custom serdes); repeatable",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            return f.read().strip()
    return os.environ.get("TXSTORE_TOKEN") or None


def command(args: argparse.Namespace) -> int:
    """Run ``txstore serve`` until SIGINT or SIGTERM; returns the exit code."""
    from txstore.errors import TxStoreError
    from txstore.queries.application import Application
    from txstore.queries.http.server import QueryServer
    from txstore.queries.membership import RegistryMembership, StaticAssignment
    from txstore.queries.topology import builders_from_state_dir
    from txstore.runtime.statedir import partition_dirs

    def say(line: str) -> None:
        if not args.quiet:
            print(f"txstore serve: {line}", file=sys.stderr, flush=True)

    try:
        for module in args.imports:
            importlib.import_module(module)
        builders = builders_from_state_dir(args.state_dir)
        membership: Any
        n = args.partitions
        if args.assignment:
            membership = StaticAssignment(args.assignment, refresh_interval=args.refresh_interval)
        elif args.registry:
            if n is None:
                raise SystemExit("txstore serve: --registry needs --partitions")
            membership = RegistryMembership(
                args.registry,
                n,
                num_standby_replicas=args.standby_replicas,
                heartbeat_interval=args.refresh_interval,
                session_timeout=args.session_timeout,
            )
        else:
            membership = None
            if n is None:
                n = max(partition_dirs(args.state_dir)) + 1
        app = Application(
            args.application_id,
            args.state_dir,
            builders,
            application_server=args.application_server,
            membership=membership,
            num_partitions=n if membership is None else None,
        )
        server = QueryServer(
            app,
            token=_token(args),
            allow_remote=args.allow_remote,
            max_results=args.max_results,
            max_request_bytes=args.max_request_bytes,
        )
    except (TxStoreError, OSError, ImportError) as exc:
        print(f"txstore serve: error: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server.start()
        say(f"starting {args.application_id!r} with stores {[b.name for b in builders]}")
        app.start(timeout=0)
        while not stop.is_set() and not app.state.name.startswith(("ERROR", "PENDING_ERROR")):
            if app.state.name == "RUNNING":
                say(
                    f"serving {server.url}: active partitions {app.active_partitions}, "
                    f"standby {app.standby_partitions}"
                )
                break
            stop.wait(0.1)
        while not stop.is_set() and app.state.name not in ("ERROR", "NOT_RUNNING"):
            stop.wait(0.5)
    finally:
        server.close()
        app.close()
    if app.state.name == "ERROR":
        print(f"txstore serve: error: the application failed: {app.error}", file=sys.stderr)
        return 1
    say("stopped")
    return 0
