"""Rolling back the last committed transaction of a changelog (the task coordinator's repair)."""

from __future__ import annotations

from pathlib import Path

import pytest

from txstore.changelog.log import FileChangelog
from txstore.errors import InvalidArgumentError


def records(log: FileChangelog) -> list[tuple[int, bytes]]:
    with log.read_committed() as it:
        return [(r.offset, r.key) for r in it]


def test_rollback_truncates_the_last_transaction_within_a_segment(tmp_path: Path) -> None:
    with FileChangelog(tmp_path / "log") as log:
        log.append(b"a", b"1", 1)
        log.commit(10, metadata=b"seq1")
        log.append(b"b", b"2", 2)
        log.append(b"c", b"3", 3)
        log.commit(20, metadata=b"seq2")
        undone = log.rollback_last_commit()
        assert (undone.start_offset, undone.end_offset, undone.input_position) == (1, 3, 20)
        assert log.last_committed_metadata == b"seq1"
        assert log.last_committed_input_position == 10
        assert records(log) == [(0, b"a")]
        assert log.append(b"d", b"4", 4) == 1  # the undone offsets are reused
        log.commit(30)
    with FileChangelog(tmp_path / "log") as log:
        assert records(log) == [(0, b"a"), (1, b"d")]
        assert log.last_committed_input_position == 30


def test_rollback_of_a_transaction_that_opened_a_segment(tmp_path: Path) -> None:
    with FileChangelog(tmp_path / "log", segment_bytes=64) as log:
        log.append(b"a", b"x" * 100, 1)
        log.commit(1, metadata=b"seq1")
        log.append(b"b", b"y" * 100, 2)
        log.commit(2, metadata=b"seq2")
        segments = sorted(p.name for p in (tmp_path / "log").glob("*.log"))
        assert len(segments) == 2
        log.rollback_last_commit()
        assert sorted(p.name for p in (tmp_path / "log").glob("*.log")) == segments[:1]
        assert log.last_committed_metadata == b"seq1"
        assert records(log) == [(0, b"a")]
    with FileChangelog(tmp_path / "log", segment_bytes=64) as log:
        assert records(log) == [(0, b"a")]


def test_rollback_of_the_only_commit_leaves_an_empty_log(tmp_path: Path) -> None:
    with FileChangelog(tmp_path / "log") as log:
        log.append(b"a", b"1", 1)
        log.commit(5)
        log.rollback_last_commit()
        assert log.last_committed_input_position is None
        assert records(log) == []
        with pytest.raises(InvalidArgumentError, match="no commit to roll back"):
            log.rollback_last_commit()
