"""Database.snapshot: a consistent copy of the committed state, openable read-only."""

from __future__ import annotations

from pathlib import Path

import txstore
from txstore import Serdes


def test_snapshot_copies_committed_state_only(tmp_path: Path) -> None:
    with txstore.open(tmp_path / "live") as db:
        s = db.key_value_store("s", Serdes.string(), Serdes.long())
        s.put("a", 1)
        db.commit({"s": 7})
        s.put("b", 2)  # uncommitted: not in the snapshot
        manifest = db.snapshot(tmp_path / "snap")
        assert manifest.partitions[0].stores["s"].committed_offset == 7
    with txstore.open(tmp_path / "snap", readonly=True) as snap:
        view = snap.key_value_store("s", Serdes.string(), Serdes.long())
        assert view.get("a") == 1
        assert view.get("b") is None
        assert view.committed_offset == 7
