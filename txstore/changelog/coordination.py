"""Several changelogs committed as one task commit, and recovery from a crash inside one.

Kafka commits the changelog partitions of a task atomically through its transaction
coordinator; txstore's changelogs are separate files, so a task commits them one after the
other and every commit marker carries the task's commit **sequence number** and the **names of
the stores** taking part (:func:`commit_metadata`). A task commit is complete when every
participant's changelog holds its marker.

After a crash in the middle of a task commit some changelogs hold it and others do not.
:func:`plan_recovery` works out, *before anything is written*, which changelogs must undo
their last commit(s) so that all of them end at the same complete task commit, where each
changelog then ends, and the input position to resume from. The caller checks that plan
against its stores (a store that already committed a range the plan would undo proves the
commit was complete, so a changelog lost data) and only then applies it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from txstore.changelog.history import CommitRecord
from txstore.changelog.segments import LoadedLog, segment_name
from txstore.errors import StorageError, TaskCorruptedError

__all__ = [
    "MAX_UNDONE",
    "CommitSource",
    "RecoveryPlan",
    "commit_metadata",
    "plan_recovery",
    "read_commit_ends",
]

#: Most commits recovery undoes in one changelog. One is what a crash inside a task commit
#: leaves; two is what a task commit retried after a failure could leave with changelog format
#: version 1 (the same sequence number twice in one changelog, see ``docs/recovery.md``). More
#: means something else happened, and recovery refuses to guess.
MAX_UNDONE: Final = 2


def commit_metadata(
    seq: int,
    stores: list[str],
    ends: Mapping[str, int] | None = None,
    segments: Mapping[str, int] | None = None,
) -> bytes:
    """The marker metadata of task commit ``seq`` of ``stores``: ``{"seq":n,"stores":[...]}``,
    and with ``ends`` ``"ends":{store: end offset}``: where each participant's records of the
    commit end (synced in every participant before the first marker is written); with
    ``segments`` ``"segments":{store: base offset}``: the segment file they were synced into."""
    doc: dict[str, object] = {"seq": seq, "stores": stores}
    if ends is not None:
        doc["ends"] = dict(ends)
    if segments:
        doc["segments"] = dict(segments)
    return json.dumps(doc, separators=(",", ":")).encode()


def read_commit_metadata(blob: bytes) -> tuple[int, list[str]]:
    """``(seq, stores)`` of a marker's metadata; ``(0, [])`` for a commit made outside a task."""
    if not blob:
        return 0, []
    try:
        doc = json.loads(blob)
        return int(doc["seq"]), [str(s) for s in doc["stores"]]
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise StorageError(f"unreadable task commit metadata {blob[:80]!r}") from exc


def read_commit_ends(blob: bytes, field: str = "ends") -> dict[str, int]:
    """The participants' end offsets a marker's metadata records (empty: none recorded, as
    in markers written before they were); ``field="segments"``: the base offsets of the
    segments their records were synced into."""
    if not blob:
        return {}
    try:
        ends = json.loads(blob).get(field) or {}
        return {str(k): int(v) for k, v in ends.items()}
    except (ValueError, TypeError, AttributeError, RecursionError) as exc:
        raise StorageError(f"unreadable task commit metadata {blob[:80]!r}") from exc


class CommitSource(Protocol):
    """What planning needs of a changelog (a :class:`~txstore.changelog.log.FileChangelog`)."""

    @property
    def committed_end_offset(self) -> int: ...

    @property
    def recovered(self) -> LoadedLog | None: ...

    def recent_commits(self, n: int = 1) -> list[CommitRecord]: ...


@dataclass
class RecoveryPlan:
    """What recovery will do: undo ``undo[name]`` commits of each changelog, after which it
    ends at ``ends[name]``; the last complete task commit is ``seq`` (0: none), to resume at
    ``input_position``. ``incomplete`` is the sequence number of the task commit undone."""

    undo: dict[str, int] = field(default_factory=dict)
    ends: dict[str, int] = field(default_factory=dict)
    seq: int = 0
    input_position: int | None = None
    incomplete: int | None = None
    lacking: list[str] = field(default_factory=list)  # participants without the undone commit


def _check_crash_shape(seq: int, participants: list[str], lacking: list[str]) -> None:
    """Refuse an incomplete task commit that no crash can leave.

    A task commits its changelogs one after the other in the order of ``participants`` (the
    store names, sorted), and a retry finishes them in that order, so a crash or a failure
    leaves the commit in a *prefix* of them. A participant without it before one that holds
    it lost it some other way (its file was cut, zeroed or deleted): rolling the others back
    would destroy their committed data to match the damage, so recovery refuses instead.

    The last participant lacking it is what a crash between changelog commits leaves, and is
    rolled back as one. Damage over its last commit (a page of zeros over its marker pair)
    never reaches this point: the scan of its segment refuses bytes after the last commit that
    no crash leaves (:func:`~txstore.changelog.segments.scan_segment`) when the store is opened
    or the task's changelogs are checked, before any plan is made.
    """
    holding = [p for p in participants if p not in lacking]
    if holding and participants.index(lacking[0]) < participants.index(holding[-1]):
        raise TaskCorruptedError(
            f"the changelog of store {lacking[0]!r} lacks task commit {seq}, which the "
            f"changelogs of {holding} hold although it was committed before them: no crash "
            f"leaves that, so the changelog of {lacking[0]!r} lost a committed transaction "
            "(damaged, truncated or deleted files); nothing was changed. Restore that "
            "changelog from a copy, or delete that store's changelog and data to rebuild it"
        )


def _check_segment_kept(
    seq: int, lacking: list[str], segments: Mapping[str, int], logs: Mapping[str, CommitSource]
) -> None:
    """Refuse an incomplete task commit whose participant lacking it lost the segment file
    its records were synced into (``segments``, from the markers of the holders). Neither a
    crash nor closing or aborting the task after a failed commit deletes that file (a new
    segment starts with a copy of the commit before it, so it is never empty); so a log that
    now ends in an earlier segment lost its last one, and the exception
    :func:`_check_records_kept` makes for a log with nothing after its last commit does not
    apply. A log with no segment at all is left to the other checks."""
    for name in lacking:
        base, log = segments.get(name), logs.get(name)
        loaded = log.recovered if log is not None else None
        if base is None or loaded is None:
            continue
        files = [s.base for s in loaded.segments]
        files += [int(os.path.basename(p).split(".")[0]) for p in loaded.removed_files]
        if files and max(files) < base:
            raise TaskCorruptedError(
                f"the changelog of store {name!r} lacks task commit {seq}, and the segment "
                f"file its records of that commit were synced into ({segment_name(base)}, "
                "the changelogs that hold the commit say so) is gone: no crash deletes it, "
                "so that changelog lost its last segment; nothing was changed. Restore that "
                "changelog from a copy, or delete that store's changelog and data to rebuild it"
            )


def _check_records_kept(
    seq: int, lacking: list[str], ends: Mapping[str, int], logs: Mapping[str, CommitSource]
) -> None:
    """Refuse an incomplete task commit whose records a participant lacking it lost.

    A task syncs every participant's records of a commit before it writes the first commit
    marker (:meth:`~txstore.changelog.log.FileChangelog.sync_records`), and the markers record
    where each participant's records end (``ends``). So a crash between the changelog commits
    leaves every participant without the marker holding all its records, up to its end; one
    whose records stop short lost synced data (its file was cut or damaged), and rolling the
    others back would destroy their committed data to match. One exception: nothing at all
    after its last commit is what closing or aborting the task after the failed commit leaves
    (the changelog cuts its open transaction); a cut exactly there is not told from it. Markers
    written before the ends were recorded are not checked."""
    for name in lacking:
        end = ends.get(name)
        log = logs.get(name)
        loaded = log.recovered if log is not None else None
        if end is None or log is None or loaded is None or loaded.tail_end_offset is None:
            continue
        kept = loaded.tail_end_offset
        if kept >= end:
            continue  # a crash before its marker: every record is there
        if kept == log.committed_end_offset and loaded.truncated_bytes == 0:
            continue  # nothing after its last commit: the task closed after the failed commit
        raise TaskCorruptedError(
            f"the changelog of store {name!r} lacks task commit {seq} and holds its records "
            f"only up to offset {loaded.tail_end_offset}, but they reached offset {end} and "
            "were synced before any changelog committed it (the changelogs that hold the "
            "commit say so): a crash does not lose them, so that changelog lost synced "
            "data (damaged or truncated files); nothing was changed. Restore that changelog "
            "from a copy, or delete that store's changelog and data to rebuild it"
        )


def plan_recovery(logs: Mapping[str, CommitSource]) -> RecoveryPlan:
    """Plan the recovery of the changelogs ``logs`` (by store name) of one task. Reads only.

    While the newest task commit found (the highest sequence number among the changelogs' last
    commits) is missing from one of its participants, it is incomplete: every changelog whose
    last commit it is undoes it, and the next newest is looked at. Raises
    :class:`~txstore.errors.TaskCorruptedError` when the changelogs contradict each other
    (two participant lists for one commit) or more than :data:`MAX_UNDONE` commits of one
    changelog would have to go, and when the changelogs holding an incomplete commit are not
    the first of its participants in commit order (damage, not a crash:
    :func:`_check_crash_shape`).
    """
    history: dict[str, list[CommitRecord]] = {n: log.recent_commits(1) for n, log in logs.items()}
    depth = dict.fromkeys(logs, 0)
    plan = RecoveryPlan()

    def head(name: str) -> CommitRecord | None:
        k, commits = depth[name], history[name]
        if k >= len(commits) and len(commits) == k:  # fetched all asked for: ask for more
            commits = history[name] = logs[name].recent_commits(k + 1)
        return commits[k] if k < len(commits) else None

    while True:
        heads = {n: head(n) for n in logs}
        meta = {n: read_commit_metadata(h.metadata) if h else (0, []) for n, h in heads.items()}
        latest = max((seq for seq, _ in meta.values()), default=0)
        if not latest:
            break
        lists = {tuple(stores) for seq, stores in meta.values() if seq == latest}
        if len(lists) > 1:
            raise TaskCorruptedError(
                f"the changelogs of task commit {latest} name different stores taking part "
                f"({sorted(lists)}): recovery cannot tell which is right; nothing was changed"
            )
        participants = list(next(iter(lists)))
        lacking = [p for p in participants if meta.get(p, (0, []))[0] != latest]
        if not lacking:
            break
        _check_crash_shape(latest, participants, lacking)
        if plan.incomplete is None:
            holder = next(h for n, h in heads.items() if h is not None and meta[n][0] == latest)
            _check_segment_kept(
                latest, lacking, read_commit_ends(holder.metadata, "segments"), logs
            )
            _check_records_kept(latest, lacking, read_commit_ends(holder.metadata), logs)
        plan.incomplete = latest if plan.incomplete is None else plan.incomplete
        plan.lacking = plan.lacking or lacking
        for name, (seq, _) in meta.items():
            if seq == latest:
                depth[name] += 1
                if depth[name] > MAX_UNDONE:
                    raise TaskCorruptedError(
                        f"recovering task commit {plan.incomplete} would undo more than "
                        f"{MAX_UNDONE} commits of the changelog of store {name!r} (stores "
                        f"{lacking} lack commit {latest}): the changelogs do not describe one "
                        "crash; nothing was changed"
                    )
    for name, log in logs.items():
        k = depth[name]
        plan.undo[name] = k
        plan.ends[name] = history[name][k - 1].start_offset if k else log.committed_end_offset
    plan.seq = latest
    if latest:
        plan.input_position = next(
            h.input_position
            for n, h in heads.items()
            if h is not None and read_commit_metadata(h.metadata)[0] == latest
        )
    return plan
