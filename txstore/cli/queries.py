"""``txstore serve``: host partitions of a state directory and serve queries over HTTP."""

from __future__ import annotations

import importlib
import ipaddress
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from txstore.cli.common import (
    EXIT_DEPENDENCY,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Reporter,
    progress_option,
    quiet_option,
)
from txstore.errors import TxStoreError

__all__ = ["register"]

_DESCRIPTION = """\
Host the partitions of STATE_DIR that the membership assigns to this instance (recover and
restore each, as a task), and serve their stores' metadata and queries over HTTP/JSON at
--application-server (an ASGI application on Starlette, served by uvicorn; see docs/queries.md
for the API). The stores are found in the partitions' metadata. Membership: --zookeeper
HOSTS (instances on any machines register in ZooKeeper and share the partitions;
--num-partitions required), --assignment FILE (a static assignment, re-read when it changes),
or neither (every partition of STATE_DIR, or --num-partitions of them, here). Binds loopback
only unless --allow-remote; --token-file (or TXSTORE_TOKEN) requires a bearer token. Stops on
SIGINT or SIGTERM.

\b
Example:
  txstore serve demo-out/state --application-id page-views --application-server 127.0.0.1:7070
  curl -s 127.0.0.1:7070/v1/health
"""

#: How long a static instance waits for partitions another process holds before giving up.
_HELD_TIMEOUT = 5.0


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
        click.option(
            "--zookeeper",
            metavar="HOSTS",
            help="ZooKeeper connect string (host:port[,host:port...]): register there and share "
            "the partitions with the other live instances.",
        ),
        click.option(
            "--zookeeper-root",
            default="/txstore",
            show_default=True,
            metavar="PATH",
            help="ZooKeeper: the znode applications register under.",
        ),
        click.option(
            "--num-partitions",
            type=click.IntRange(min=1),
            metavar="N",
            help="How many partitions the application has (--zookeeper: required; all-local: "
            "default the highest partition directory + 1).",
        ),
        click.option(
            "--standby-replicas",
            default=0,
            show_default=True,
            type=click.IntRange(min=0),
            help="ZooKeeper: standbys per partition.",
        ),
        click.option(
            "--refresh-interval",
            default=1.0,
            show_default=True,
            type=click.FloatRange(min=0, min_open=True),
            metavar="SECONDS",
            help="How often a static assignment file is re-read.",
        ),
        click.option(
            "--session-timeout",
            default=10.0,
            show_default=True,
            type=click.FloatRange(min=0, min_open=True),
            metavar="SECONDS",
            help="ZooKeeper: an instance silent this long (dead) loses its partitions.",
        ),
        click.option(
            "--token-file",
            type=click.Path(exists=True, dir_okay=False),
            help="File holding the bearer token (or set TXSTORE_TOKEN).",
        ),
        click.option("--allow-remote", is_flag=True, help="Allow a non-loopback address."),
        click.option(
            "--max-results", default=1000, show_default=True, help="Items per iterator answer."
        ),
        click.option(
            "--max-request-bytes",
            default=64 * 1024,
            show_default=True,
            help="Request size limit (URL, body).",
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


def _fail(message: str, code: int = EXIT_ERROR) -> CliError:
    return CliError(f"txstore serve: error: {message}", code)


class _Prefixed(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"txstore serve: {record.levelname.lower()}: {record.getMessage()}"


def _log_to_stderr() -> logging.Handler:
    """txstore's own warnings on stderr, prefixed like every message of the command."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Prefixed())
    handler.setLevel(logging.WARNING)
    logger = logging.getLogger("txstore")
    logger.addHandler(handler)
    return handler


def _is_partition_dir(path: Path) -> bool:
    return (path / "data" / "data.mdb").is_file() or (path / "changelogs").is_dir()


def _check_address(address: str, allow_remote: bool) -> None:
    from txstore.queries.types import HostInfo

    try:
        host = HostInfo.parse(address).host
    except TxStoreError as exc:
        raise _fail(f"--application-server {address}: {exc}", EXIT_USAGE) from None
    if allow_remote or host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise _fail(
            f"--application-server {address} is not a loopback address: add --allow-remote "
            "(and --token-file) to serve other machines",
            EXIT_USAGE,
        )


def serve(
    state_dir: str,
    application_id: str,
    application_server: str,
    assignment: str | None,
    zookeeper: str | None,
    zookeeper_root: str,
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
    if assignment and zookeeper:
        raise click.UsageError("--assignment and --zookeeper exclude each other")
    if zookeeper and num_partitions is None:
        raise click.UsageError("--zookeeper needs --num-partitions")
    _check_address(application_server, allow_remote)
    try:
        from txstore.queries.application import Application
        from txstore.queries.http.server import QueryServer
        from txstore.queries.membership import StaticAssignment
        from txstore.queries.topology import builders_from_state_dir
        from txstore.queries.zookeeper import ZooKeeperMembership
    except ImportError as exc:
        raise _fail(
            f"{exc.name} is not installed: pip install '.[queries]' (from a clone of txstore)",
            EXIT_DEPENDENCY,
        ) from None
    from txstore.runtime.statedir import partition_dirs

    root = Path(state_dir)
    if _is_partition_dir(root):
        raise _fail(
            f"{state_dir} is a partition directory (it holds data/); give the state directory "
            f"that holds the partitions: {root.parent}",
            EXIT_USAGE,
        )
    for module in imports:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise _fail(f"--import {module}: {exc}", EXIT_USAGE) from exc
    handler = _log_to_stderr()
    try:
        builders = builders_from_state_dir(state_dir)
        membership: Any
        n = num_partitions
        if assignment:
            membership = StaticAssignment(assignment, refresh_interval=refresh_interval)
        elif zookeeper:
            assert n is not None
            membership = ZooKeeperMembership(
                zookeeper,
                n,
                num_standby_replicas=standby_replicas,
                session_timeout=session_timeout,
                root=zookeeper_root,
            )
        else:
            membership = None
            if n is None:
                n = max(partition_dirs(state_dir)) + 1
        app = Application(
            application_id,
            state_dir,
            builders,
            application_server=application_server,
            membership=membership,
            num_partitions=n if membership is None else None,
            handover_timeout=_HELD_TIMEOUT if not zookeeper else 30.0,
            restore_listener=None,
        )
        server = QueryServer(
            app,
            token=_token(token_file),
            allow_remote=allow_remote,
            max_results=max_results,
            max_request_bytes=max_request_bytes,
        )
        return _run(app, server, application_id, builders, bool(zookeeper), quiet, progress)
    finally:  # txstore errors: one line, exit 2 or 3 (TxCommand)
        logging.getLogger("txstore").removeHandler(handler)


def _run(
    app: Any,
    server: Any,
    application_id: str,
    builders: list[Any],
    shared: bool,
    quiet: bool,
    progress: bool | None,
) -> int:
    """Serve until SIGINT/SIGTERM or a failure; closes the server and the application."""
    out = Reporter("serve", quiet, progress)
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

    if not quiet:
        app.set_restore_listener(restored)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server.start()
        out.say(f"starting {application_id!r} with stores {[b.name for b in builders]}")
        started = time.monotonic()
        with out.bar("restore", None) as restore_bar:
            bar.append(restore_bar)
            app.start(timeout=0)
            while not stop.is_set() and app.state.name in ("CREATED", "REBALANCING"):
                held = app.waiting_partitions
                if held and not shared and time.monotonic() - started > _HELD_TIMEOUT:
                    raise _fail(
                        f"partitions {held} of {app.state_dir} are held by another process: is "
                        "another txstore serve (or a writer) using this state directory?"
                    )
                stop.wait(0.05)
            bar.clear()
        if app.state.name == "RUNNING":
            out.say(
                f"serving {server.url}: active partitions {app.active_partitions}, "
                f"standby {app.standby_partitions}"
            )
        while not stop.is_set() and app.state.name not in ("ERROR", "NOT_RUNNING"):
            stop.wait(0.2)
    finally:
        server.close()
        app.close()
    if app.state.name == "ERROR":
        raise _fail(f"the application failed: {app.error}")
    out.say("stopped")
    return EXIT_OK
