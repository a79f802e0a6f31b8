"""What every ``txstore`` command shares: exit codes, errors, the options that mean the same
thing everywhere, JSON of plain values (one document, or JSON lines), tables and progress bars
(rich, on stderr).

Exit codes (docs/cli.md, "Exit codes"), the same for every command:

====  ======================================================================================
0     success
1     a negative answer: ``check`` found a problem, ``crashtest`` a failure, ``get`` no value
2     usage: a bad option or argument, a missing path, store or partition (click's own usage
      errors exit 2 too)
3     a txstore error: a damaged, locked or refused store or directory, a failed Spark job
4     a missing optional dependency (pyspark, pyarrow, matplotlib) or a missing Java
====  ======================================================================================
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib.util
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any, Final, TypeVar

import click

__all__ = [
    "EXIT_DEPENDENCY",
    "EXIT_ERROR",
    "EXIT_NEGATIVE",
    "EXIT_OK",
    "EXIT_USAGE",
    "CliError",
    "MissingDependencyError",
    "Reporter",
    "TxCommand",
    "emit_json",
    "emit_json_rows",
    "json_option",
    "parse_partition_list",
    "partition_not_found",
    "partitions_option",
    "print_table",
    "progress_option",
    "quiet_option",
    "require_java",
    "require_modules",
    "select_partitions",
    "silence_stdout",
    "text_of",
    "to_plain",
    "with_partition_id",
]

EXIT_OK: Final = 0
EXIT_NEGATIVE: Final = 1
EXIT_USAGE: Final = 2
EXIT_ERROR: Final = 3
EXIT_DEPENDENCY: Final = 4

F = TypeVar("F", bound=Callable[..., Any])


class CliError(click.ClickException):
    """An error a command reports as one line on stderr (no traceback), with its exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click declares a ClassVar

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(self.message, file=file if file is not None else sys.stderr)


class MissingDependencyError(CliError):
    """An optional dependency or Java is missing: one line saying what to install, exit 4."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_DEPENDENCY)


class TxCommand(click.Command):
    """A command whose txstore errors become one line, ``txstore CMD: error: ...``: exit 2
    for a bad argument (:class:`~txstore.errors.InvalidArgumentError`, a missing directory or
    store), exit 3 for any other :class:`~txstore.errors.TxStoreError` or an ``OSError``
    (permission denied, disk full); a broken stdout pipe ends the command quietly (exit 0)."""

    def invoke(self, ctx: click.Context) -> Any:
        from txstore.errors import InvalidArgumentError, TxStoreError

        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # the reader went away (txstore dump ... | head): not an error
            silence_stdout()
            return EXIT_OK
        except InvalidArgumentError as exc:
            raise CliError(f"{ctx.command_path}: error: {exc}", EXIT_USAGE) from exc
        except TxStoreError as exc:
            raise CliError(f"{ctx.command_path}: error: {exc}", EXIT_ERROR) from exc
        except OSError as exc:  # permission denied, disk full...: one line too
            raise CliError(f"{ctx.command_path}: error: {exc}", EXIT_ERROR) from exc


def silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so the interpreter's final flush does
    not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # pragma: no cover - stdout is not a file
        pass


# ---- options that mean one thing in every command ------------------------------------------


def parse_partition_list(text: str) -> frozenset[int]:
    """``"0,2,5-7"`` -> ``{0, 2, 5, 6, 7}``; a :class:`click.BadParameter` otherwise.

    >>> sorted(parse_partition_list("0,2,5-7"))
    [0, 2, 5, 6, 7]
    """
    from txstore.errors import InvalidArgumentError
    from txstore.spark.options import parse_partitions

    try:
        return parse_partitions(text)
    except InvalidArgumentError as exc:
        raise click.BadParameter(str(exc).removeprefix("option partitions: ")) from None


def _partition_list(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value is None or isinstance(value, frozenset):
        return value
    return parse_partition_list(str(value))


def partitions_option(f: F) -> F:
    """``--partitions LIST``: only these partition numbers, e.g. ``0,2,5-7`` (default all)."""
    return click.option(
        "--partitions",
        callback=_partition_list,
        metavar="LIST",
        default=None,
        help="Only these partition numbers, e.g. 0,2,5-7 (default: all).",
    )(f)


def quiet_option(f: F) -> F:
    """``-q/--quiet``: no progress and no chatter on stderr (errors still go there)."""
    return click.option(
        "-q", "--quiet", is_flag=True, help="No progress, no chatter on stderr (errors only)."
    )(f)


def progress_option(f: F) -> F:
    """``--progress/--no-progress``: progress bars on stderr (default: on a terminal)."""
    return click.option(
        "--progress/--no-progress",
        "progress",
        default=None,
        help="Progress bars on stderr (default: only when stderr is a terminal).",
    )(f)


def json_option(f: F) -> F:
    """``--json``: one JSON document on stdout (an array of objects for a command that prints
    rows); ``--json-lines``: one JSON object per line (what ``--json`` printed before 0.2:
    streams, ``jq -c``). Plain values, bytes as hex. The command gets ``as_json`` and
    ``json_lines``."""
    f = click.option(
        "--json-lines",
        "json_lines",
        is_flag=True,
        help="Print JSON lines: one object per line (streams; jq -c), bytes as hex.",
    )(f)
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print one JSON document (rows as an array of objects), bytes as hex.",
    )(f)


def partition_not_found(path: str, missing: list[int], present: list[int]) -> click.BadParameter:
    """The one usage error (exit 2) of every command given ``--partitions`` that ``path``
    does not have.

    >>> partition_not_found("state", [7], [0, 1]).message
    'state has no partition 7 (its partitions: 0, 1)'
    """
    have = ", ".join(map(str, present)) or "none"
    return click.BadParameter(
        f"{path} has no partition {', '.join(map(str, missing))} (its partitions: {have})",
        param_hint="'--partitions'",
    )


def select_partitions(path: str, partitions: frozenset[int]) -> None:
    """Raise :func:`partition_not_found` if a partition of ``--partitions`` is not at
    ``path`` (a state directory, or a snapshot of one); a partition directory has no
    numbered partitions, so any ``--partitions`` is that error there."""
    from txstore.errors import InvalidArgumentError
    from txstore.runtime.admin import partitions_of

    try:
        found = partitions_of(path)
    except InvalidArgumentError:
        return  # neither a partition nor a state directory: the command says what it is
    if None in found:
        raise click.BadParameter(
            f"{path} is one partition directory: --partitions selects partitions of a state "
            "directory (numbered partition directories)",
            param_hint="'--partitions'",
        )
    present = sorted(n for n in found if n is not None)
    missing = sorted(partitions - set(present))
    if missing:
        raise partition_not_found(path, missing, present)


# ---- JSON of plain values -------------------------------------------------------------


def to_plain(value: Any) -> Any:
    """``value`` as plain JSON values: bytes as lowercase hex; windows as
    ``{"start": ms, "end": ms}``; a windowed key as ``{"key": ..., "window": {...}}``; value
    wrappers as objects of their fields (``{"value": ..., "timestamp": ...}``); headers as a
    list of ``{"key": ..., "value": hex or null}``; non-finite floats as ``"NaN"``,
    ``"Infinity"``, ``"-Infinity"``; anything else unknown as its ``str``.

    >>> from txstore.types import SessionWindow, Windowed
    >>> to_plain(Windowed("user-1", SessionWindow(10, 20)))
    {'key': 'user-1', 'window': {'start': 10, 'end': 20}}
    >>> to_plain({"k": b"\\x00\\xff", "n": float("nan")})
    {'k': '00ff', 'n': 'NaN'}
    """
    from txstore.types import Headers

    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, Headers):
        return [{"key": k, "value": to_plain(v)} for k, v in value.pairs]
    if isinstance(value, enum.Enum):
        return value.name
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple
        return {name: to_plain(v) for name, v in zip(value._fields, value, strict=True)}
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((to_plain(v) for v in value), key=repr)
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def with_partition_id(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` with ``partition_id`` first: txstore's one name for a partition's number in
    rows (Spark's state reader's, and the txstore Spark source's column; docs/concepts.md).
    The old key ``partition`` stays, with the same value, for the scripts that read it.

    >>> with_partition_id({"partition": 2, "key": "k"})
    {'partition_id': 2, 'partition': 2, 'key': 'k'}
    """
    return {"partition_id": row.get("partition"), **row}


def emit_json(value: Any) -> None:
    """Print ``value`` as one line of JSON on stdout."""
    click.echo(json.dumps(to_plain(value), allow_nan=False, ensure_ascii=False))


def emit_json_rows(rows: Iterable[Any], *, lines: bool) -> None:
    """Print ``rows`` as one JSON array (one row per line inside it, written as they come:
    nothing is held in memory), or with ``lines`` as JSON lines.

    >>> emit_json_rows([{"a": b"\\x01"}, {"a": None}], lines=False)
    [
    {"a": "01"},
    {"a": null}
    ]
    """
    if lines:
        for row in rows:
            emit_json(row)
        return
    first = True
    for row in rows:
        line = json.dumps(to_plain(row), allow_nan=False, ensure_ascii=False)
        click.echo(("[\n" if first else ",\n") + line, nl=False)
        first = False
    click.echo("[]" if first else "\n]")


def text_of(value: Any) -> str:
    """``value`` for a text line: strings and numbers as they are, bytes as hex, anything
    else as compact JSON of :func:`to_plain`."""
    plain = to_plain(value)
    if isinstance(plain, str):
        return plain
    return json.dumps(plain, allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    """A table on stdout (rich): terminal width on a terminal, never wrapped in a pipe; None
    shows as ``-``."""
    from rich.box import SIMPLE_HEAD
    from rich.console import Console
    from rich.table import Table

    if not rows:
        click.echo("(nothing)")
        return
    table = Table(box=SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for c in columns:
        table.add_column(c, no_wrap=True)
    for r in rows:
        table.add_row(*("-" if r.get(c) is None else text_of(r.get(c)) for c in columns))
    tty = sys.stdout.isatty()
    console = Console(file=sys.stdout, width=None if tty else 10_000, soft_wrap=not tty)
    console.print(table)


# ---- chatter and progress on stderr ----------------------------------------------------------


class _Bar:
    """One progress bar of :class:`Reporter` (does nothing when bars are off)."""

    def __init__(self, progress: Any, task: Any) -> None:
        self._progress = progress
        self._task = task

    def advance(self, n: float = 1, description: str | None = None) -> None:
        if self._progress is not None:
            kw: dict[str, Any] = {} if description is None else {"description": description}
            self._progress.update(self._task, advance=n, **kw)

    def update(
        self,
        completed: float | None = None,
        total: float | None = None,
        description: str | None = None,
    ) -> None:
        if self._progress is not None:
            kw: dict[str, Any] = {}
            if completed is not None:
                kw["completed"] = completed
            if total is not None:
                kw["total"] = total
            if description is not None:
                kw["description"] = description
            self._progress.update(self._task, **kw)


class Reporter:
    """Chatter (``txstore CMD: ...`` lines) and rich progress bars, both on stderr.

    ``quiet``: neither. Bars are drawn when ``progress`` is True, or when it is None (not
    asked) and stderr is a terminal; stdout (and so ``--json``) never sees any of it.
    """

    def __init__(self, command: str, quiet: bool = False, progress: bool | None = None) -> None:
        self.command = command
        self.quiet = quiet
        tty = sys.stderr.isatty()
        self.bars = not quiet and (progress if progress is not None else tty)
        self._force = bool(progress) and not tty
        self._progress: Any = None

    def say(self, text: str) -> None:
        if self.quiet:
            return
        line = f"txstore {self.command}: {text}"
        if self._progress is not None:
            self._progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def bar(self, description: str, total: float | None) -> Iterator[_Bar]:
        """A progress bar for the duration of the ``with``."""
        if not self.bars:
            yield _Bar(None, None)
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        console = Console(file=sys.stderr, force_terminal=True if self._force else None)
        progress = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        outer = self._progress
        with progress:
            self._progress = progress
            try:
                yield _Bar(progress, progress.add_task(description, total=total))
            finally:
                self._progress = outer


# ---- optional dependencies -------------------------------------------------------------------

#: The extra that brings each optional module.
_EXTRAS: Final = {"pyspark": "spark", "pyarrow": "spark", "matplotlib": "plot"}


def _missing(module: str) -> bool:
    if module in sys.modules:
        return sys.modules[module] is None
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def require_modules(command: str, modules: tuple[str, ...], why: str = "") -> None:
    """Raise :class:`MissingDependencyError` (one line: what to install) if one of
    ``modules`` cannot be imported."""
    missing = [m for m in modules if _missing(m)]
    if not missing:
        return
    extras = sorted({_EXTRAS.get(m, m) for m in missing})
    extra = ",".join(extras)
    raise MissingDependencyError(
        f"txstore {command} needs the {extra} extra{'s' if len(extras) > 1 else ''}"
        f"{why} ({', '.join(missing)} not installed): pip install '.[{extra}]' (from a clone "
        "of txstore)"
    )


def require_java(command: str) -> None:
    """Raise :class:`MissingDependencyError` unless Java 17 or later can be run."""
    from txstore.spark.export import java_problem

    problem = java_problem()
    if problem is not None:
        raise MissingDependencyError(f"txstore {command}: {problem}")
