"""The inspection commands of ``txstore``: ``stat``, ``dump``, ``get``, ``offsets``, ``check``.

Each opens partitions read-only (:mod:`txstore.runtime.admin`), so it is safe next to a running
writer, and prints a table or text lines, or plain values as one JSON document with
``--json`` (JSON lines with ``--json-lines``; :func:`txstore.cli.common.to_plain`). Exit
codes: :mod:`txstore.cli.common`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from txstore.cli.common import (
    EXIT_NEGATIVE,
    EXIT_OK,
    Reporter,
    emit_json,
    emit_json_rows,
    json_option,
    partitions_option,
    print_table,
    progress_option,
    quiet_option,
    select_partitions,
    text_of,
    with_partition_id,
)

__all__ = ["register"]

_PATH = click.Path(exists=True, file_okay=False)


def _stat(path: str, as_json: bool, json_lines: bool) -> int:
    """Stores, kinds, formats, committed entries and offsets, serdes and sizes of PATH (a
    partition directory or a state directory), one row per partition and store.

    \b
    Example:
      txstore stat demo-out/state
      txstore stat demo-out/state --json | jq -r '.[].store'
    """
    from txstore.runtime import admin

    rows = admin.stat(path)
    if as_json or json_lines:
        emit_json_rows(map(with_partition_id, rows), lines=json_lines)
        return EXIT_OK
    seen: set[object] = set()
    for r in rows:  # the partition's LMDB file: its size on the partition's first row only
        first = r["partition"] not in seen
        seen.add(r["partition"])
        r["data size"] = f"{r['partition_data_bytes'] / 2**20:.1f} MiB" if first else ""
        logged = r["changelog_bytes"]  # 0: no changelog (a store of txstore.open)
        r["changelog size"] = f"{logged / 2**20:.1f} MiB" if logged else "-"
    print_table(rows, ["partition", "store", "kind", "format", "entries", "committed_offset",
                       "key_serde", "value_serde", "data size", "changelog size"])  # fmt: skip
    return EXIT_OK


def _dump(
    path: str,
    store: str,
    partitions: frozenset[int] | None,
    limit: int | None,
    raw: bool,
    as_json: bool,
    json_lines: bool,
) -> int:
    """The committed records of STORE in PATH, partition by partition in key order, decoded
    by the store's recorded serdes: a line per record, PARTITION<TAB>KEY<TAB>VALUE (bytes as
    hex, structured keys and values as compact JSON), or a JSON array of objects with --json
    (one object per line with --json-lines): {"partition_id": 0, "partition": 0, "key": ...,
    "value": ...}; a windowed key is {"key": ..., "window": {"start": ms, "end": ms}}, a
    timestamped value {"value": ..., "timestamp": ms}.

    \b
    Example:
      txstore dump demo-out/state sessions --partitions 0 --limit 5
      txstore dump demo-out/state user-totals --json-lines | jq -c '{k: .key, v: .value.value}'
    """
    from txstore.runtime import admin

    if partitions is not None:
        select_partitions(path, partitions)
    records = admin.dump(
        path,
        store,
        partitions=None if partitions is None else sorted(partitions),
        decode=not raw,
        limit=limit,
    )
    if as_json or json_lines:
        emit_json_rows(map(with_partition_id, records), lines=json_lines)
        return EXIT_OK
    for rec in records:
        number = "" if rec["partition"] is None else rec["partition"]
        click.echo(f"{number}\t{text_of(rec['key'])}\t{text_of(rec['value'])}")
    return EXIT_OK


def _get(path: str, store: str, key: str, as_json: bool, json_lines: bool) -> int:
    """The committed value of KEY in key-value store STORE. KEY is text: a number for
    integer/long serdes, JSON for json, UTF-8 for bytes. In a state directory the key's
    partition is found with Kafka's default partitioner. Exit 1 when no partition holds it.

    \b
    Example:
      txstore get demo-out/state user-totals user-000
      txstore get demo-out/state user-totals user-000 --json
    """
    from txstore.runtime import admin

    partition, value = admin.get(path, store, key)
    if as_json or json_lines:
        row = {"partition": partition, "store": store, "key": key, "value": value}
        emit_json(with_partition_id(row))
    elif value is None:
        click.echo("(no value)")
    else:
        click.echo(text_of(value))
    return EXIT_OK if value is not None else EXIT_NEGATIVE


def _offsets(path: str, as_json: bool, json_lines: bool) -> int:
    """Per partition and store: the store's committed offset, its changelog's committed end,
    the last committed input position, and the lag of the store behind its changelog.

    \b
    Example:
      txstore offsets demo-out/state
    """
    from txstore.runtime import admin

    rows = admin.offsets(path)
    if as_json or json_lines:
        emit_json_rows(map(with_partition_id, rows), lines=json_lines)
        return EXIT_OK
    print_table(rows, ["partition", "store", "store_offset", "changelog_end",
                       "input_position", "lag"])  # fmt: skip
    return EXIT_OK


def _check(
    path: str,
    deep: bool,
    partitions: frozenset[int] | None,
    as_json: bool,
    json_lines: bool,
    quiet: bool,
    progress: bool | None,
) -> int:
    """Verify PATH: every store's metadata, every committed row (decoded with its format),
    every changelog record (checksums), no store ahead of its changelog, no spill left by a
    crashed writer (a live writer's spill is a note). --deep also compares every row with
    what its changelog says it must hold (docs/cli.md). Exit 1 when a problem is found.

    \b
    Example:
      txstore check demo-out/state
      txstore check --deep demo-out/state --json | jq '.problems[]'
    """
    from txstore.runtime import admin

    parts = admin.partitions_of(path)
    if partitions is not None:
        select_partitions(path, partitions)
        parts = {n: p for n, p in parts.items() if n in partitions}
    report = admin.CheckReport(deep=deep)
    out = Reporter("check", quiet, progress)
    with out.bar("check", len(parts)) as bar:
        for number, pdir in parts.items():
            bar.update(description=f"check partition {'' if number is None else number}")
            one = _check_one(pdir, deep)
            report.partitions += one.partitions
            report.stores += one.stores
            report.rows_read += one.rows_read
            report.changelog_records += one.changelog_records
            report.rows_verified += one.rows_verified
            report.rows_not_compared += one.rows_not_compared
            report.problems += [dataclasses.replace(p, partition=number) for p in one.problems]
            report.notes += [dataclasses.replace(p, partition=number) for p in one.notes]
            bar.advance()
    if as_json or json_lines:
        doc = dataclasses.asdict(report) | {"ok": report.ok}
        for kind in ("problems", "notes"):
            doc[kind] = [with_partition_id(p) for p in doc[kind]]
        emit_json(doc)
        return EXIT_OK if report.ok else EXIT_NEGATIVE
    read = f"{report.rows_read:,} rows and {report.changelog_records:,} changelog records"
    click.echo(f"{report.partitions} partition(s), {report.stores} store(s), {read} read")
    if report.deep:
        click.echo(f"deep: {report.rows_verified:,} rows equal to their changelogs' records, "
                   f"{report.rows_not_compared:,} not compared")  # fmt: skip
    for label, found in (("NOTE", report.notes), ("PROBLEM", report.problems)):
        for p in found:
            where = "" if p.partition is None else f"partition {p.partition}: "
            click.echo(f"{label} {where}{p.what}: {p.detail}")
    click.echo("ok" if report.ok else f"{len(report.problems)} problem(s)")
    return EXIT_OK if report.ok else EXIT_NEGATIVE


def _check_one(pdir: Any, deep: bool) -> Any:
    """:func:`txstore.runtime.admin.check` of one partition directory of a state directory;
    one that cannot be opened (its data/ lost) is a problem, as in a whole-directory check."""
    from txstore.engine.partition import Partition
    from txstore.errors import TxStoreError
    from txstore.runtime import admin

    if not (pdir / "data").is_dir():
        report = admin.CheckReport(deep=deep, partitions=1)
        try:
            Partition(pdir, readonly=True).close()
        except TxStoreError as exc:
            report.problems.append(admin.Problem(None, "cannot open", str(exc)))
        return report
    return admin.check(pdir, deep=deep)


def register(group: click.Group, context: dict[str, Any]) -> None:
    """Add ``stat``, ``dump``, ``get``, ``offsets`` and ``check`` to ``group``."""
    path = click.argument("path", type=_PATH)
    store = click.argument("store")
    group.command("stat", context_settings=context)(path(json_option(_stat)))
    group.command("dump", context_settings=context)(
        path(
            store(
                partitions_option(
                    click.option(
                        "--limit",
                        type=click.IntRange(min=0),
                        metavar="N",
                        help="Stop after N records.",
                    )(
                        click.option(
                            "--raw",
                            is_flag=True,
                            help="Keys and values as bytes (hex), not decoded by their serdes.",
                        )(json_option(_dump))
                    )
                )
            )
        )
    )
    group.command("get", context_settings=context)(
        path(store(click.argument("key")(json_option(_get))))
    )
    group.command("offsets", context_settings=context)(path(json_option(_offsets)))
    group.command("check", context_settings=context)(
        path(
            click.option(
                "--deep",
                is_flag=True,
                help="Also compare every committed row with what its changelog says it must "
                "hold, and check every row against its format and key schema (reads every "
                "changelog record).",
            )(partitions_option(json_option(quiet_option(progress_option(_check)))))
        )
    )
