"""The demo's child processes, one module that the :mod:`txstore.demo` package does not import
(so ``python -m`` runs it once, not a second copy of a module already imported):

* ``python -m txstore.demo.child worker STATE_DIR PARTITION INPUT_DIR [PACE_MS [EVERY]]``: a
  pipeline worker (:func:`txstore.demo.pipeline.run_worker`; ``PACE_MS`` defaults to
  ``$DEMO_PACE_MS`` or 0, ``EVERY``, the events per commit, to 2,000);
* ``python -m txstore.demo.child stream OUT PARTITIONS``: the pipeline as a Structured
  Streaming job (:func:`txstore.demo.streaming.run_query`);
* ``python -m txstore.demo.child spark SNAPSHOT_DIR RESULT_JSON``: the Spark analytics
  (:func:`txstore.demo.analytics.spark_analytics`), written to ``RESULT_JSON``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from txstore.demo.analytics import spark_analytics
from txstore.demo.pipeline import COMMIT_EVERY, run_worker
from txstore.demo.streaming import run_query

__all__ = ["main"]


def main(argv: list[str]) -> int:
    """Run the child named by ``argv[0]``; the exit status."""
    if argv[:1] == ["worker"] and 4 <= len(argv) <= 6:
        pace = float(argv[4]) if len(argv) > 4 else float(os.environ.get("DEMO_PACE_MS", "0"))
        every = int(argv[5]) if len(argv) > 5 else COMMIT_EVERY
        run_worker(Path(argv[1]), int(argv[2]), Path(argv[3]), pace, every)
        return 0
    if argv[:1] == ["stream"] and len(argv) == 3:
        run_query(Path(argv[1]), int(argv[2]))
        return 0
    if argv[:1] == ["spark"] and len(argv) == 3:
        Path(argv[2]).write_text(json.dumps(spark_analytics(Path(argv[1]))))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
