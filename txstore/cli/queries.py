"""``txstore serve``: host partitions of a state directory and serve queries over HTTP."""

from __future__ import annotations

import importlib
import os
import signal
import threading
from typing import Any

import click

from txstore.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    CliError,
    Reporter,
    progress_option,
    quiet_option,
)

__all__ = ["register"]

_DESCRIPTION = """\
Host the partitions of STATE_DIR that the membership assigns to this instance (recover and
restore each, as a task), and serve their stores' metadata and queries over HTTP/JSON at
--application-server (see docs/queries.md for the API). The stores are found in the
partitions' metadata. Membership: --assignment FILE (a static assignment, re-read when it
changes), --registry DIR (instances register in a shared directory and share the partitions),
or neither (every partition of STATE_DIR, or --num-partitions of them, here). Binds loopback
only unless --allow-remote; --token-file (or TXSTORE_TOKEN) requires a bearer token.

\b
Example:
  txstore serve demo-out/state --application-id page-views --application-server 127.0.0.1:7070
  curl -s 127.0.0.1:7070/v1/health
"""


def register(group: click.Group, context: dict[str, Any]) -> None:
    """Add ``serve`` to ``group``."""
    options = [
        click.argument("state_dir", type=click.Path(exists=True, file_okay=False)),
        click.option("--application-id", required=True, help="The application's id."),
        click.option(
            "--application-server",
            default="127.0.0.1:7070",
            show_default=True,
            metavar="HOST:PORT",
            help="Address to listen on and publish in the metadata.",
        ),
        click.option("--assignment", metavar="FILE", help="Static assignment JSON file."),
        click.option("--registry", metavar="DIR", help="Shared registry directory."),
        click.option(
            "--num-partitions",
            type=click.IntRange(min=1),
            metavar="N",
            help="How many partitions the application has (registry: required; all-local: "
            "default the highest partition directory + 1).",
        ),
        click.option(
            "--standby-replicas",
            default=0,
            show_default=True,
            type=click.IntRange(min=0),
            help="Registry: standbys per partition.",
        ),
        click.option(
            "--refresh-interval",
            default=1.0,
            show_default=True,
            type=click.FloatRange(min=0, min_open=True),
            metavar="SECONDS",
            help="How often the membership is re-read (registry: the heartbeat).",
        ),
        click.option(
            "--session-timeout",
            default=10.0,
            show_default=True,
            type=click.FloatRange(min=0, min_open=True),
            metavar="SECONDS",
            help="Registry: a member silent this long is gone.",
        ),
        click.option(
            "--token-file",
            type=click.Path(exists=True, dir_okay=False),
            help="File holding the bearer token (or set TXSTORE_TOKEN).",
        ),
        click.option("--allow-remote", is_flag=True, help="Allow a non-loopback address."),
        click.option(
            "--max-results", default=1000, show_default=True, help="Items per iterator query."
        ),
        click.option(
            "--max-request-bytes",
            default=64 * 1024,
            show_default=True,
            help="Request size limit.",
        ),
        click.option(
            "--import",
            "imports",
            multiple=True,
            metavar="MODULE",
            help="Import MODULE first (e.g. one that registers custom serdes); repeatable.",
        ),
        quiet_option,
        progress_option,
    ]
    f: Any = serve
    for option in reversed(options):
        f = option(f)
    group.command("serve", context_settings=context, help=_DESCRIPTION)(f)


def _token(token_file: str | None) -> str | None:
    if token_file:
        with open(token_file, encoding="utf-8") as f:
            return f.read().strip()
    return os.environ.get("TXSTORE_TOKEN") or None


def serve(
    state_dir: str,
    application_id: str,
    application_server: str,
    assignment: str | None,
    registry: str | None,
    num_partitions: int | None,
    standby_replicas: int,
    refresh_interval: float,
    session_timeout: float,
    token_file: str | None,
    allow_remote: bool,
    max_results: int,
    max_request_bytes: int,
    imports: tuple[str, ...],
    quiet: bool,
    progress: bool | None,
) -> int:
    """Run ``txstore serve`` until SIGINT or SIGTERM; returns the exit code."""
    from txstore.queries.application import Application
    from txstore.queries.http.server import QueryServer
    from txstore.queries.membership import RegistryMembership, StaticAssignment
    from txstore.queries.topology import builders_from_state_dir
    from txstore.runtime.statedir import partition_dirs

    out = Reporter("serve", quiet, progress)
    if assignment and registry:
        raise click.UsageError("--assignment and --registry exclude each other")
    if registry and num_partitions is None:
        raise click.UsageError("--registry needs --num-partitions")
    for module in imports:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise CliError(f"txstore serve: error: --import {module}: {exc}", 2) from exc
    builders = builders_from_state_dir(state_dir)
    membership: Any
    n = num_partitions
    if assignment:
        membership = StaticAssignment(assignment, refresh_interval=refresh_interval)
    elif registry:
        assert n is not None
        membership = RegistryMembership(
            registry,
            n,
            num_standby_replicas=standby_replicas,
            heartbeat_interval=refresh_interval,
            session_timeout=session_timeout,
        )
    else:
        membership = None
        if n is None:
            n = max(partition_dirs(state_dir)) + 1

    restores: dict[tuple[int, str], tuple[int, int]] = {}
    bar: list[Any] = []  # the restore bar while the instance starts (a terminal, or --progress)

    def restored(partition: int, prog: Any) -> None:
        """Restore progress (a task's initialize(), on the application's thread)."""
        restores[partition, prog.store] = (prog.restored, prog.total)
        if bar:
            bar[0].update(
                completed=sum(r for r, _ in restores.values()),
                total=sum(t for _, t in restores.values()),
            )
        if prog.total and prog.restored == prog.total:
            out.say(
                f"partition {partition}: store {prog.store} restored "
                f"{prog.restored:,}/{prog.total:,} changelog records"
            )

    try:
        app = Application(
            application_id,
            state_dir,
            builders,
            application_server=application_server,
            membership=membership,
            num_partitions=n if membership is None else None,
            restore_listener=None if quiet else restored,
        )
        server = QueryServer(
            app,
            token=_token(token_file),
            allow_remote=allow_remote,
            max_results=max_results,
            max_request_bytes=max_request_bytes,
        )
    except OSError as exc:
        raise CliError(f"txstore serve: error: {exc}", EXIT_ERROR) from exc
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server.start()
        out.say(f"starting {application_id!r} with stores {[b.name for b in builders]}")
        with out.bar("restore", None) as restore_bar:
            bar.append(restore_bar)
            app.start(timeout=0)
            while not stop.is_set() and not app.state.name.startswith(("ERROR", "PENDING_ERROR")):
                if app.state.name == "RUNNING":
                    break
                stop.wait(0.1)
            bar.clear()
        if app.state.name == "RUNNING":
            out.say(
                f"serving {server.url}: active partitions {app.active_partitions}, "
                f"standby {app.standby_partitions}"
            )
        while not stop.is_set() and app.state.name not in ("ERROR", "NOT_RUNNING"):
            stop.wait(0.5)
    finally:
        server.close()
        app.close()
    if app.state.name == "ERROR":
        raise CliError(f"txstore serve: error: the application failed: {app.error}", EXIT_ERROR)
    out.say("stopped")
    return EXIT_OK
