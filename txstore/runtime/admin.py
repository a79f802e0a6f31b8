"""Inspecting partition and state directories: what ``txstore stat | dump | get | offsets |
check`` print. Everything here opens partitions read-only and reads committed data only, so it
is safe to run next to a live writer. Partitions are opened with
:func:`~txstore.runtime.committed.open_committed`: a store whose files lag its changelog's last
complete task commit (a writer killed between its changelog and store commits) is read with the
missing records replayed in memory, as the next task would serve it.

A *path* is either one partition directory (holding ``data/``) or a state directory of
partition directories (``<state_dir>/<n>/``, see :mod:`txstore.runtime.statedir`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from txstore import codecs
from txstore.bytestores.segment_check import skip_key_check
from txstore.changelog.log import FileChangelog, interrupted_creation
from txstore.engine.partition import Partition, writer_probe
from txstore.engine.writer_lock import closed_cleanly
from txstore.errors import InvalidArgumentError, TxStoreError
from txstore.runtime import changelog_check, deep_check
from txstore.runtime.catalog import RowDecoder, open_view
from txstore.runtime.committed import open_committed
from txstore.runtime.statedir import changelog_stores, partition_dirs

__all__ = ["Problem", "check", "dump", "get", "offsets", "partitions_of", "stat"]


def partitions_of(path: str | os.PathLike[str]) -> dict[int | None, Path]:
    """The partition directories at ``path``: ``{None: path}`` for a partition directory,
    ``{n: <path>/<n>}`` for a state directory."""
    p = Path(path)
    if (p / "data").is_dir():
        return {None: p}
    if not p.is_dir():
        raise InvalidArgumentError(f"{str(p)!r} does not exist")
    found: dict[int | None, Path] = {n: d for n, d in partition_dirs(p).items()}
    if not found:
        raise InvalidArgumentError(
            f"{str(p)!r} is neither a partition directory (no data/) nor a state directory "
            "(no numbered partition directories)"
        )
    return found


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def stat(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """One row per store and partition: kind, format, committed entries and offset, serdes,
    configuration, bytes on disk (the partition's LMDB file and the store's changelog)."""
    rows: list[dict[str, Any]] = []
    for number, pdir in partitions_of(path).items():
        part, _ = open_committed(pdir)
        with part:
            data_bytes = _dir_bytes(pdir / "data")
            for name in part.store_names():
                meta = part.store_meta(name) or {}
                with open_view(part, name) as view:
                    entries = _count(view)
                log_dir = pdir / "changelog" / name
                rows.append(
                    {
                        "partition": number,
                        "store": name,
                        "kind": meta.get("kind"),
                        "format": meta.get("format"),
                        "entries": entries,
                        "committed_offset": part.committed_offset(name),
                        "key_serde": meta.get("key_serde"),
                        "value_serde": meta.get("value_serde"),
                        "config": {
                            k: v
                            for k, v in meta.items()
                            if k not in ("kind", "format", "key_serde", "value_serde")
                        },
                        "partition_data_bytes": data_bytes,
                        "changelog_bytes": _dir_bytes(log_dir) if log_dir.is_dir() else 0,
                    }
                )
    return rows


def _count(view: Any) -> int:
    if view.kind == "key_value":
        n: int = view.view.approximate_num_entries()
        return n
    with view.rows() as it:
        return sum(1 for _ in it)


def dump(
    path: str | os.PathLike[str],
    store: str,
    *,
    partitions: list[int] | None = None,
    decode: bool = True,
    limit: int | None = None,
) -> Iterator[dict[str, Any]]:
    """The committed records of ``store``, decoded with its recorded serdes, partition by
    partition in key order: dicts with ``partition``, ``key`` and ``value`` (value objects as
    ``repr``-able Python objects)."""
    if limit is not None and limit < 0:
        raise InvalidArgumentError(f"limit must be >= 0, got {limit}")
    emitted = 0
    for number, pdir in partitions_of(path).items():
        if partitions is not None and number not in partitions:
            continue
        part, _ = open_committed(pdir)
        with part, open_view(part, store) as view:
            decoder = RowDecoder(view.meta, decode=decode)
            with view.rows() as it:
                for key, value in it:
                    if limit is not None and emitted >= limit:
                        return
                    yield {
                        "partition": number,
                        "key": decoder.key(key),
                        "value": decoder.value(value),
                    }
                    emitted += 1


def parse_key(text: str, serde_name: str) -> Any:
    """A key given on the command line, as the object the store's key serde takes."""
    if serde_name in ("integer", "long"):
        return int(text)
    if serde_name == "double":
        return float(text)
    if serde_name == "json":
        return json.loads(text)
    if serde_name == "bytes":
        return text.encode("utf-8")
    return text


def get(path: str | os.PathLike[str], store: str, key_text: str) -> tuple[int | None, Any]:
    """The committed value of ``key_text`` in key-value store ``store``: ``(partition, value)``.

    In a state directory the key's partition is Kafka's default partitioner over the number of
    partition directories; if the key is not there every partition is searched (stores fed by
    another partitioner). ``(None, None)`` when no partition has it.
    """
    parts = partitions_of(path)
    first = next(iter(parts.values()))
    with Partition(first, readonly=True) as part:
        meta = part.store_meta(store)
        names = part.store_names()
    if meta is None:
        raise InvalidArgumentError(
            f"no store {store!r} in {str(path)!r}; stores: {', '.join(names) or 'none'}"
        )
    decoder = RowDecoder(meta)
    kb = decoder.encode_key(parse_key(key_text, meta.get("key_serde", "string")))
    order = list(parts)
    if None not in parts:
        guess = codecs.partition_for_key(kb, max(p for p in parts if p is not None) + 1)
        if guess in parts:
            order.remove(guess)
            order.insert(0, guess)
    for number in order:
        served, _ = open_committed(parts[number])
        with served, open_view(served, store) as view:
            raw = view.get(kb)
            if raw is not None:
                return number, decoder.value(raw)
    return None, None


def offsets(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Per store and partition: the committed offset the store serves (``store_offset``, what a
    restarted task holds), its changelog's end at the last complete task commit
    (``changelog_end``) and the task's input position there (``input_position``), and how far
    the store's files lag that commit (``lag``: records a reader replays in memory and the next
    task restores). A changelog whose creation was interrupted reads as none."""
    rows: list[dict[str, Any]] = []
    for number, pdir in partitions_of(path).items():
        part, state = open_committed(pdir)
        with part:
            for name in part.store_names():
                committed = part.committed_offset(name)
                row: dict[str, Any] = {
                    "partition": number,
                    "store": name,
                    "store_offset": committed,
                    "changelog_end": None,
                    "input_position": None,
                    "lag": None,
                }
                log_dir = pdir / "changelog" / name
                if log_dir.is_dir() and not interrupted_creation(log_dir):
                    start, end = state.tails.get(name, (None, committed or 0))
                    row["changelog_end"] = end
                    row["input_position"] = state.input_position
                    row["lag"] = 0 if start is None else end - start
                rows.append(row)
    return rows


@dataclass
class Problem:
    """One finding of :func:`check`."""

    partition: int | None
    what: str
    detail: str = ""
    key: bytes | None = None
    """The store key a ``--deep`` difference concerns."""


@dataclass
class CheckReport:
    """What :func:`check` verified and found: ``problems``, and ``notes`` on things that look
    unusual but are fine (the spill of a live writer)."""

    partitions: int = 0
    stores: int = 0
    rows_read: int = 0
    changelog_records: int = 0
    deep: bool = False
    """Whether the rows were compared with their changelogs (:func:`check` ``deep=True``)."""
    rows_verified: int = 0
    """Deep: rows equal to what their changelog says (a retain_duplicates window's rows
    renumbered by the changelog count too, see the notes)."""
    rows_not_compared: int = 0
    """Deep: rows whose key the changelog wrote again past the store's committed offset."""
    problems: list[Problem] = field(default_factory=list)
    notes: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _holds_files(path: Path) -> bool:
    """Whether directory ``path`` exists and is not empty (a live writer may delete it)."""
    try:
        return any(path.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return False


def _check_spill(number: int | None, pdir: Path, report: CheckReport) -> None:
    """A non-empty ``spill/`` is the uncommitted overlay of the partition's writer: fine while
    that writer lives (it holds ``writer.lock``), a leftover if it crashed."""
    spill = pdir / "spill"
    if not _holds_files(spill):
        return
    with writer_probe(pdir) as alive:
        if alive:
            report.notes.append(
                Problem(number, "spill of a live writer", f"{spill} holds the uncommitted "
                        "writes of the process that has the partition open for writing (fine)")
            )  # fmt: skip
        elif _holds_files(spill):  # looked at again while no writer can open the partition
            whose = "a crashed writer" if alive is False else "a writer that may be dead"
            report.problems.append(
                Problem(number, "leftover spill", f"{spill} holds uncommitted data of {whose}; "
                        "opening the partition for writing (or recover()) deletes it")
            )  # fmt: skip


def _check_clean_close(number: int | None, pdir: Path, report: CheckReport) -> None:
    """A note when the partition's last writer did not close it (killed or crashed): no
    clean-close marker while no writer is alive. Not a problem: its next writer (a task's
    ``initialize()``) discards what it left uncommitted and replays what the stores miss."""
    if closed_cleanly(str(pdir)) or not (pdir / "data" / "data.mdb").is_file():
        return
    with writer_probe(pdir) as alive:
        if alive is False and not closed_cleanly(str(pdir)):
            report.notes.append(
                Problem(number, "unclean shutdown", "the last writer of this partition did not "
                        "close it (it was killed or crashed); its next writer discards what it "
                        "left uncommitted (a Task's initialize() reports what)")
            )  # fmt: skip


def check(path: str | os.PathLike[str], *, deep: bool = False) -> CheckReport:
    """Verify a partition or state directory: every page of its LMDB file is sound (the page
    walk of :mod:`txstore.engine.lmdb_pages`), every store's metadata is readable and names a
    known kind, every committed row decodes with the store's format (reading every LMDB page),
    every changelog record passes its checksum, no store is ahead of its changelog, the task
    commit sequence numbers of the changelogs agree (:mod:`txstore.runtime.changelog_check`;
    an incomplete last task commit is a note: recoverable), and no
    spilled uncommitted data was left behind by a crashed writer (the spill of a live writer is
    a note, not a problem).

    ``deep=True`` also compares every committed row of every store with what its changelog
    says it must hold, and checks every row against its format and key schema
    (:mod:`txstore.runtime.deep_check`): each difference is a problem naming the store and
    key, with the expected and found values."""
    report = CheckReport(deep=deep)
    for number, pdir in partitions_of(path).items():
        report.partitions += 1
        _check_spill(number, pdir, report)
        _check_clean_close(number, pdir, report)
        try:
            # Every page of data.mdb walked before LMDB maps it (engine.lmdb_pages): a
            # damaged B-tree page is a problem here, not a SIGABRT in LMDB's assertions.
            part = Partition(pdir, readonly=True, verify="always")
        except TxStoreError as exc:
            report.problems.append(Problem(number, "cannot open", str(exc)))
            continue
        with part:
            if deep:  # the deep check reports each bad key as a row instead
                skip_key_check(part)
            for name in part.store_names():
                report.stores += 1
                log_dir = pdir / "changelog" / name
                replayed = None  # changelog records the deep check read (and checked) already
                try:
                    if deep:
                        replayed = _check_deep(number, part, name, log_dir, report)
                    else:
                        _check_rows(part, name, report)
                except TxStoreError as exc:
                    report.problems.append(Problem(number, f"store {name!r}", str(exc)))
                    continue
                if not log_dir.is_dir():
                    continue
                # The store's offset is read before the changelog is opened (its committed end
                # is fixed at open): a live task commits its changelog before its stores, so
                # read in this order the store is never ahead, and read the other way a commit
                # in between made a healthy store look ahead of its changelog.
                store_offset = part.committed_offset(name) or 0
                try:
                    with FileChangelog(log_dir, readonly=True) as log:
                        read = log.verify() if replayed is None else replayed
                        report.changelog_records += read
                        ahead = store_offset - log.committed_end_offset
                except TxStoreError as exc:
                    report.problems.append(Problem(number, f"changelog {name!r}", str(exc)))
                    continue
                if ahead > 0:
                    report.problems.append(
                        Problem(number, f"store {name!r}", f"is {ahead} offsets ahead of its "
                                "changelog: the changelog lost committed data")
                    )  # fmt: skip
            _check_changelog_only(number, pdir, set(part.store_names()), report)
        seqs = changelog_check.check_sequences(pdir / "changelog")  # task commit numbers
        report.problems += [Problem(number, what, detail) for what, detail in seqs.problems]
        report.notes += [Problem(number, what, detail) for what, detail in seqs.notes]
    return report


def _check_changelog_only(
    number: int | None, pdir: Path, stores: set[str], report: CheckReport
) -> None:
    """A changelog without a store in the catalog is an in-memory store's (a task keeps those
    in memory and restores them from their changelogs): every record is read and checked."""
    for name in changelog_stores(pdir):
        if name in stores:
            continue
        try:
            with FileChangelog(pdir / "changelog" / name, readonly=True) as log:
                read = log.verify()
        except TxStoreError as exc:
            report.problems.append(Problem(number, f"changelog {name!r}", str(exc)))
            continue
        report.changelog_records += read
        report.notes.append(
            Problem(number, f"changelog {name!r}", f"in-memory store, changelog only: "
                    f"{read:,} records read and checked (its only durable copy)")
        )  # fmt: skip


def _check_rows(part: Partition, name: str, report: CheckReport) -> None:
    """Every committed row of store ``name`` decodes with its format."""
    with open_view(part, name) as view:
        decoder = RowDecoder(view.meta, decode=False)
        with view.rows() as it:
            for key, value in it:
                decoder.key(key)
                decoder.value(value)
                report.rows_read += 1


def _check_deep(
    number: int | None, part: Partition, name: str, log_dir: Path, report: CheckReport
) -> int | None:
    """The deep check of store ``name``: its differences become problems, the rows it could
    not tell (or that are fine though unusual) notes. Returns how many changelog records it
    read, each checked as ``verify()`` does (None: it did not read the changelog)."""
    res = deep_check.check_store(part, name, log_dir)
    report.rows_read += res.rows
    report.rows_verified += res.verified + res.renumbered
    report.rows_not_compared += res.unverifiable
    where = f"store {name!r}"
    for f in res.findings:
        report.problems.append(Problem(number, f"{where}: {f.what}", f.detail, f.key))
    notes = [
        (res.unverifiable, "rows not compared: their keys were written again in the changelog "
         "past the store's committed offset (the store lags its changelog)"),
        (res.expired, "rows still present in segments their changelog expires (a restore "
         "would not bring them back; the store drops them as stream time advances)"),
        (res.renumbered, "rows of a retain_duplicates store hold the changelog's values under "
         "other sequence numbers (the store's counter and the changelog's part after a "
         "put(key, None, ts))"),
        (res.upgraded, "rows match their changelog records converted from an older format "
         "(a format upgrade)"),
    ]  # fmt: skip
    for count, text in notes:
        if count:
            report.notes.append(Problem(number, where, f"{count:,} {text}"))
    if not res.has_changelog:
        report.notes.append(
            Problem(number, where, "has no changelog: its rows were checked against their "
                    "format only")
        )  # fmt: skip
    return res.changelog_records if res.replayed else None
