"""One application instance in its own process, for the failover test and benchmark: joins a
ZooKeeper membership, serves queries over HTTP, and keeps writing: every ``--interval``
seconds, for each partition it owns, it sets every key of the partition to the next commit
number and commits it as one transaction (so a committed state of a partition has one value
on every key: an answer mixing two states would show two).

    python tests/queries/zk_member.py STATE HOST:PORT ZK ROOT [--session-timeout S]
"""

from __future__ import annotations

import argparse
import signal
import threading

from txstore import Serdes, Stores
from txstore.errors import TaskMigratedError, TxStoreError
from txstore.queries import Application, QueryServer, ZooKeeperMembership

N = 6
KEYS = [f"user-{i}" for i in range(120)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("state")
    ap.add_argument("server")
    ap.add_argument("zookeeper")
    ap.add_argument("root")
    ap.add_argument("--session-timeout", type=float, default=2.0)
    ap.add_argument("--interval", type=float, default=0.02)
    args = ap.parse_args()
    counts = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
    )
    membership = ZooKeeperMembership(
        args.zookeeper, N, session_timeout=args.session_timeout, root=args.root
    )
    app = Application(
        "app",
        args.state,
        [counts],
        application_server=args.server,
        membership=membership,
        task_options={"sync": False},
    )
    server = QueryServer(app).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    app.start(timeout=60)
    by_partition: dict[int, list[str]] = {}
    for k in KEYS:
        by_partition.setdefault(app.partition_for_key("counts", k), []).append(k)
    while not stop.is_set():
        for p in app.active_partitions:
            try:
                with app.writer(p) as w:
                    n = (w.task.input_position or 0) + 1
                    store = w.store("counts")
                    for k in by_partition.get(p, ()):
                        store.put(k, n)
                    w.commit(n)
            except (TaskMigratedError, TxStoreError):
                continue  # revoked meanwhile: its new owner goes on from the last commit
        stop.wait(args.interval)
    server.close()
    app.close()


if __name__ == "__main__":
    main()
