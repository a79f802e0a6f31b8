"""``read_last_marker`` on a file shorter than the size it is given (a live writer's
compaction replaced a segment by a shorter merged file while a reader held its old size):
no marker (the caller raises its typed error or reads again), never a ``struct.error``."""

from __future__ import annotations

import os
from pathlib import Path

from txstore.changelog.log import FileChangelog
from txstore.changelog.markers import read_last_marker


def test_a_size_past_the_end_of_the_file_finds_no_marker(tmp_path: Path) -> None:
    with FileChangelog(tmp_path / "log", fsync=False) as log:
        log.append(b"k", b"v", 1)
        log.commit(1)
    (seg,) = sorted((tmp_path / "log").glob("*.log"))
    fd = os.open(seg, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        assert read_last_marker(fd, size) is not None
        for past in (size + 1, size + 3, size + 4096):
            assert read_last_marker(fd, past) is None
    finally:
        os.close(fd)
