"""The task commit sequence numbers of a partition's changelogs, checked against each other
(part of ``txstore check``).

A task commits its stores' changelogs one after the other, and every commit marker carries the
task's commit **sequence number** and the names of the stores taking part
(:func:`~txstore.changelog.coordination.commit_metadata`). :func:`check_sequences` reads every
marker still in each changelog of a partition directory and reports:

* a changelog whose sequence numbers are not strictly increasing (a number twice: a commit
  written again; a smaller number after a larger one);
* one task commit whose changelogs name different stores taking part;
* a participant's changelog that lacks a task commit although it holds commits on both sides
  of it (or the others hold newer ones): its changelog lost a committed transaction;
* a newest task commit that a participant lacks although a participant committed after it
  holds it (what ``Task.initialize()`` refuses as damage).

An incomplete **last** task commit (a crash between the changelog commits of a task: some hold
it, the others end at the one before) is not damage: ``Task.initialize()`` rolls it back. It
is a note.

**What is compared.** Cleaning removes markers legitimately, so only what every log still
holds is compared: retention deletes whole segments, oldest first (the sequence numbers below
a log's first marker are gone), and compaction rewrites the closed segments it merges into one
file holding the last marker of the segments it replaced (the numbers before that marker are
gone). A closed segment holding a single commit may be such a file, so a log is trusted to hold
every commit it took part in only from the last such marker on. Commits made outside a task
(sequence number 0) are not checked.

Cost: every marker of every changelog is read (a few small reads each), not the records.
"""

from __future__ import annotations

import bisect
import itertools
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from txstore.changelog.coordination import read_commit_metadata
from txstore.changelog.history import CommitRecord
from txstore.changelog.log import FileChangelog
from txstore.engine.partition import writer_probe
from txstore.errors import ChangelogCorruptionError, TxStoreError

__all__ = ["LogCommits", "SequenceReport", "check_sequences", "read_log_commits"]


@dataclass
class LogCommits:
    """The task commits one changelog still holds, oldest first: ``seqs`` (with their
    ``stores``), and ``trusted_from``, the sequence number from which it holds every task
    commit it took part in (its first marker, or the marker of its last closed segment that
    holds a single commit: a compacted one may have replaced others)."""

    seqs: list[int] = field(default_factory=list)
    stores: list[list[str]] = field(default_factory=list)
    trusted_from: int = 0


@dataclass
class SequenceReport:
    """What :func:`check_sequences` found: ``problems`` and ``notes`` as ``(what, detail)``."""

    problems: list[tuple[str, str]] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)


def read_log_commits(log: FileChangelog) -> LogCommits:
    """The task commits of ``log`` (see :class:`LogCommits`)."""
    commits: list[CommitRecord] = list(reversed(log.recent_commits(sys.maxsize)))
    refs, _ = log.segment_refs()
    bases = [r.base for r in refs]
    per_segment: dict[int, int] = {}
    segment_of: list[int] = []
    for c in commits:
        i = max(bisect.bisect_right(bases, c.start_offset) - 1, 0)
        segment_of.append(i)
        per_segment[i] = per_segment.get(i, 0) + 1
    out = LogCommits()
    for c, seg in zip(commits, segment_of, strict=True):
        seq, stores = read_commit_metadata(c.metadata)
        if not seq:
            continue
        if not out.seqs or (per_segment[seg] == 1 and seg < len(refs) - 1):
            out.trusted_from = seq
        out.seqs.append(seq)
        out.stores.append(stores)
    return out


def _order(name: str, lc: LogCommits, report: SequenceReport) -> None:
    for prev, seq in zip(lc.seqs, lc.seqs[1:], strict=False):
        if seq == prev:
            report.problems.append(
                (f"changelog {name!r}", f"holds task commit {seq} twice: a commit was written "
                 "again (its stores may disagree with a restore from it)")
            )  # fmt: skip
        elif seq < prev:
            report.problems.append(
                (f"changelog {name!r}", f"task commit {seq} follows task commit {prev}: the "
                 "sequence numbers go backwards")
            )  # fmt: skip


def check_sequences(changelog_root: Path) -> SequenceReport:
    """Check the task commit sequence numbers of the changelogs under ``changelog_root``
    (``<partition>/changelog``, one directory per store; see the module docstring). Opens
    them read-only; a changelog that cannot be read is left to the caller's other checks.

    Next to a live writer (:func:`~txstore.engine.partition.writer_probe`) the changelogs are
    read one after the other while it commits, so they are compared only up to the newest
    task commit every one of them held when read (a note says so when some held a newer
    one); else the probe keeps
    writers out while the markers are read."""
    report = SequenceReport()
    with writer_probe(changelog_root.parent) as alive:
        commits = _read_all(changelog_root)
        for _attempt in range(_REREADS if alive is not False else 0):
            if all(_increasing(lc.seqs) for lc in commits.values()):
                break
            # A live writer's compaction renamed a merged segment over one this read listed
            # (it then holds newer markers than the segments after it): read them again.
            commits = _read_all(changelog_root)
    for name, lc in commits.items():
        _order(name, lc, report)
    horizon = max((lc.seqs[-1] for lc in commits.values() if lc.seqs), default=0)
    newest = horizon
    if alive is not False:
        horizon = min((lc.seqs[-1] for lc in commits.values() if lc.seqs), default=0)
    if horizon < newest:
        report.notes.append(
            ("task commits", f"a writer may be committing: the changelogs were compared up "
             f"to task commit {horizon}")
        )  # fmt: skip
    _agreement(commits, horizon, report)
    if alive is False:
        _last_commit(commits, horizon, report)
    return report


#: How often the markers are read again next to a live writer when a changelog's sequence
#: numbers do not increase (a compaction replaced a segment while it was read).
_REREADS = 5


def _increasing(seqs: list[int]) -> bool:
    return all(a < b for a, b in itertools.pairwise(seqs))


def _read_all(changelog_root: Path) -> dict[str, LogCommits]:
    """The task commits of every changelog under ``changelog_root`` that can be read."""
    out: dict[str, LogCommits] = {}
    for d in sorted(changelog_root.iterdir()) if changelog_root.is_dir() else []:
        if not d.is_dir():
            continue
        # A live writer's compaction may delete or replace (by a shorter merged file) a
        # segment being read: read the log again; a log that still fails is reported by the
        # per-store check.
        for attempt in range(3):
            try:
                with FileChangelog(d, readonly=True, create=False) as log:
                    out[d.name] = read_log_commits(log)
                break
            except FileNotFoundError:
                continue
            except ChangelogCorruptionError:
                if attempt == 2:
                    break
            except (TxStoreError, OSError):
                break
    return out


def _agreement(commits: Mapping[str, LogCommits], horizon: int, report: SequenceReport) -> None:
    """Same participants for one sequence number; no participant lacking a commit it holds
    both sides of, or older than the newest (up to task commit ``horizon``)."""
    participants: dict[int, dict[tuple[str, ...], list[str]]] = {}
    for name, lc in commits.items():
        for seq, stores in zip(lc.seqs, lc.stores, strict=True):
            participants.setdefault(seq, {}).setdefault(tuple(stores), []).append(name)
    held = {name: set(lc.seqs) for name, lc in commits.items()}
    for seq in sorted(s for s in participants if s <= horizon):
        lists = participants[seq]
        if len(lists) > 1:
            detail = "; ".join(f"{sorted(by)} say {list(s)}" for s, by in sorted(lists.items()))
            report.problems.append(
                (f"task commit {seq}", f"its changelogs name different stores taking part: "
                 f"{detail}")
            )  # fmt: skip
            continue
        ((names, holders),) = lists.items()
        stores = list(names)
        for p in stores:
            log = commits.get(p)
            if log is None or not log.seqs or seq in held[p] or seq < log.trusted_from:
                continue
            if seq < log.seqs[-1]:
                report.problems.append(
                    (f"changelog {p!r}", f"lacks task commit {seq} (stores {stores}), which "
                     f"the changelogs of {sorted(holders)} hold, though it holds task commit "
                     f"{log.seqs[-1]} after it: it lost a committed transaction")
                )  # fmt: skip
            elif seq < horizon:
                report.problems.append(
                    (f"changelog {p!r}", f"ends at task commit {log.seqs[-1]}, but the "
                     f"changelogs of {sorted(holders)} hold task commit {seq} and newer "
                     "ones it took part in: it lost committed transactions")
                )  # fmt: skip


def _last_commit(commits: Mapping[str, LogCommits], newest: int, report: SequenceReport) -> None:
    """The newest task commit: complete, incomplete (a crash between its changelog commits:
    recoverable), or lacking from a participant committed before one that holds it (the
    changelogs commit in store-name order, so no crash leaves that: damage)."""
    lists = {
        tuple(stores)
        for lc in commits.values()
        for seq, stores in zip(lc.seqs, lc.stores, strict=True)
        if seq == newest
    }
    if len(lists) != 1:
        return  # none, or reported by _agreement
    participants = list(next(iter(lists)))
    logs = {p: commits[p] for p in participants if p in commits}
    lacking = [p for p, lc in logs.items() if not lc.seqs or lc.seqs[-1] < newest]
    if not lacking:
        return
    holding = [p for p in participants if p in logs and p not in lacking]
    if holding and participants.index(lacking[0]) < participants.index(holding[-1]):
        report.problems.append(
            (f"changelog {lacking[0]!r}", f"lacks task commit {newest}, which the changelogs "
             f"of {holding} hold although they commit after it: no crash leaves that, so it "
             "lost a committed transaction (initialize() refuses it)")
        )  # fmt: skip
        return
    report.notes.append(
        ("last task commit", f"task commit {newest} is incomplete (the changelogs of "
         f"{lacking} lack it: a crash between the changelog commits); recoverable: "
         f"initialize() rolls it back")
    )  # fmt: skip
