"""The inspection subcommands of ``txstore``: ``stat``, ``dump``, ``get``, ``offsets``, ``check``.

Each opens partitions read-only (:mod:`txstore.runtime.admin`), so it is safe next to a running
writer,
prints a short table (or JSON lines with ``--json``), and exits 0, or 1 when ``check`` finds a
problem or ``get`` finds no value, or 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from txstore.errors import TxStoreError
from txstore.runtime import admin

__all__ = ["COMMANDS", "add_subcommands", "run"]

COMMANDS = ("stat", "dump", "get", "offsets", "check")


def add_subcommands(sub: Any) -> None:
    """Register the subcommands on an ``argparse`` subparsers object."""
    path_help = "a partition directory or a state directory of partitions"
    p = sub.add_parser("stat", help="stores, formats, sizes and committed offsets of a directory")
    p.add_argument("path", help=path_help)
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p = sub.add_parser("dump", help="the committed records of a store, decoded")
    p.add_argument("path", help=path_help)
    p.add_argument("store", help="store name")
    p.add_argument("--partitions", help="only these partitions, e.g. 0,2")
    p.add_argument("--limit", type=int, help="stop after this many records")
    p.add_argument("--raw", action="store_true", help="keys and values as bytes (hex)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p = sub.add_parser("get", help="the committed value of one key of a key-value store")
    p.add_argument("path", help=path_help)
    p.add_argument("store", help="store name")
    p.add_argument("key", help="the key, as text (numbers for integer/long serdes, JSON for json)")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p = sub.add_parser("offsets", help="committed store offsets, changelog ends, input positions")
    p.add_argument("path", help=path_help)
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p = sub.add_parser(
        "check",
        help="verify a directory: metadata, every row and changelog checksum, no leftover spill",
    )
    p.add_argument("path", help=path_help)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--deep",
        action="store_true",
        help="also compare every committed row with what its changelog says it must hold, and "
        "check every row against its format and key schema (reads every changelog record)",
    )


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, admin.Problem):  # check's problems and notes, as objects
        return _jsonable(value.__dict__)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return repr(value)


def _table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    if not rows:
        print("(nothing)")
        return
    cells = [[_text(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def _partitions(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"txstore: --partitions takes numbers like 0,2, not {text!r}") from None


def run(args: argparse.Namespace) -> int:
    """Run the subcommand ``args.command``; returns the exit code."""
    try:
        return _run(args)
    except TxStoreError as exc:
        print(f"txstore {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (txstore dump ... | head): not an error
        sys.stderr.close()
        return 0


def _run(args: argparse.Namespace) -> int:
    if args.command == "stat":
        rows = admin.stat(args.path)
        if args.json:
            for r in rows:
                print(json.dumps(_jsonable(r)))
        else:
            for r in rows:
                r["size"] = f"{r['partition_data_bytes'] / 2**20:.1f} MiB"
            _table(rows, ["partition", "store", "kind", "format", "entries", "committed_offset",
                          "key_serde", "value_serde", "size"])  # fmt: skip
        return 0
    if args.command == "dump":
        records = admin.dump(
            args.path,
            args.store,
            partitions=_partitions(args.partitions),
            decode=not args.raw,
            limit=args.limit,
        )
        for rec in records:
            if args.json:
                print(json.dumps(_jsonable(rec)))
            else:
                print(f"{rec['partition']}\t{_text(rec['key'])}\t{_text(rec['value'])}")
        return 0
    if args.command == "get":
        partition, value = admin.get(args.path, args.store, args.key)
        if args.json:
            print(json.dumps({"partition": partition, "value": _jsonable(value)}))
        elif value is None:
            print("(no value)")
        else:
            print(_text(value))
        return 0 if value is not None else 1
    if args.command == "offsets":
        rows = admin.offsets(args.path)
        if args.json:
            for r in rows:
                print(json.dumps(_jsonable(r)))
        else:
            _table(rows, ["partition", "store", "store_offset", "changelog_end",
                          "input_position", "lag"])  # fmt: skip
        return 0
    report = admin.check(args.path, deep=args.deep)
    if args.json:
        print(json.dumps(_jsonable(report.__dict__ | {"ok": report.ok})))
    else:
        read = f"{report.rows_read:,} rows and {report.changelog_records:,} changelog records"
        print(f"{report.partitions} partition(s), {report.stores} store(s), {read} read")
        if report.deep:
            print(f"deep: {report.rows_verified:,} rows equal to their changelogs' records, "
                  f"{report.rows_not_compared:,} not compared")  # fmt: skip
        for label, found in (("NOTE", report.notes), ("PROBLEM", report.problems)):
            for p in found:
                where = "" if p.partition is None else f"partition {p.partition}: "
                print(f"{label} {where}{p.what}: {p.detail}")
        print("ok" if report.ok else f"{len(report.problems)} problem(s)")
    return 0 if report.ok else 1
