"""Membership on a real ZooKeeper server (the session fixture in conftest.py): instances
register ephemeral nodes, share the partitions, publish what they host, re-route when one
leaves or a member's session ends; bad configurations get typed errors."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from txstore import Serdes, Stores
from txstore.errors import IllegalStateError, InvalidArgumentError
from txstore.queries import (
    Application,
    HostInfo,
    State,
    StoreQueryParameters,
    ZooKeeperMembership,
)
from txstore.queries import QueryableStoreTypes as QT

N = 4
KEYS = [f"user-{i}" for i in range(60)]


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def member(zk: str, root: str, state: Path, port: int, **kw: Any) -> Application:
    m = ZooKeeperMembership(zk, N, root=root, session_timeout=kw.pop("session_timeout", 2.0))
    counts = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
    )
    return Application(
        "app",
        state,
        [counts],
        application_server=f"127.0.0.1:{port}",
        membership=m,
        task_options={"sync": False},
    )


def test_members_share_partitions_and_follow_the_live_ones(zookeeper: str, tmp_path: Path) -> None:
    root = f"/t{uuid.uuid4().hex[:8]}"
    a = member(zookeeper, root, tmp_path, 7101)
    a.start()
    zk = KazooClient(hosts=zookeeper)
    zk.start(timeout=10)
    try:
        assert a.active_partitions == list(range(N))
        for k in KEYS:
            with a.writer(a.partition_for_key("counts", k)) as w:
                w.store("counts").put(k, int(k[5:]))
        for p in range(N):
            with a.writer(p) as w:
                w.commit(1)
        b = member(zookeeper, root, tmp_path, 7102)
        b.start(timeout=0)
        wait_for(
            lambda: (
                len(a.active_partitions) == 2
                and len(b.active_partitions) == 2
                and b.state is State.RUNNING
            ),
            "the two members to share the partitions",
        )
        assert sorted(a.active_partitions + b.active_partitions) == list(range(N))
        assert {str(m.host_info) for m in a.all_metadata()} == {"127.0.0.1:7101", "127.0.0.1:7102"}
        meta = a.query_metadata_for_key("counts", KEYS[0])
        assert meta is not None
        owner = a if meta.partition in a.active_partitions else b
        assert str(owner.host_info) == str(meta.active_host)
        # each node says what its instance hosts now
        members = f"{root}/app/members"
        wait_for(
            lambda: (
                json.loads(zk.get(f"{members}/127.0.0.1:7102")[0])["active"] == b.active_partitions
            ),
            "b to publish its partitions",
        )
        assert sorted(zk.get_children(members)) == ["127.0.0.1:7101", "127.0.0.1:7102"]
        b.close()  # leaves: its node goes at once, a takes everything back
        wait_for(lambda: a.active_partitions == list(range(N)), "a to take every partition")
        # a member whose session ends without leaving: its partitions come back when it goes
        ghost = KazooClient(hosts=zookeeper, timeout=1.0)
        ghost.start(timeout=10)
        doc = {"application_server": "127.0.0.1:7999", "num_partitions": N, "stores": ["counts"]}
        ghost.create(f"{members}/127.0.0.1:7999", json.dumps(doc).encode(), ephemeral=True)
        wait_for(lambda: len(a.active_partitions) == 2, "the ghost to get half the partitions")
        ghost.stop()
        ghost.close()
        wait_for(lambda: a.active_partitions == list(range(N)), "the ghost's partitions back")
        wait_for(lambda: a.state is State.RUNNING, "a to run again")
        store = a.store(StoreQueryParameters.from_name_and_type("counts", QT.key_value_store()))
        assert [store.get(k) for k in KEYS] == [int(k[5:]) for k in KEYS]  # nothing lost
    finally:
        a.close()
        zk.stop()
        zk.close()


def test_bad_zookeeper_configurations_get_typed_errors(zookeeper: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="num_partitions"):
        ZooKeeperMembership(zookeeper, 0)
    with pytest.raises(InvalidArgumentError, match="root"):
        ZooKeeperMembership(zookeeper, N, root="txstore/")
    with pytest.raises(InvalidArgumentError, match="real port"):
        ZooKeeperMembership(zookeeper, N).join("app", member_host(0), ["counts"])
    nobody = ZooKeeperMembership("127.0.0.1:1", N, connect_timeout=0.5)
    with pytest.raises(IllegalStateError, match="cannot reach ZooKeeper"):
        nobody.join("app", member_host(7300), ["counts"])
    root = f"/t{uuid.uuid4().hex[:8]}"
    first = ZooKeeperMembership(zookeeper, N, root=root, session_timeout=1.0)
    first.join("app", member_host(7301), ["counts"])
    try:
        twin = ZooKeeperMembership(zookeeper, N, root=root, session_timeout=1.0)
        with pytest.raises(InvalidArgumentError, match="share an application_server"):
            twin.join("app", member_host(7301), ["counts"])
        assert [str(h) for h in first.current().hosts] == ["127.0.0.1:7301"]
    finally:
        first.leave()
    first.leave()  # idempotent


def member_host(port: int) -> HostInfo:
    return HostInfo("127.0.0.1", port)


def expire_session(membership: ZooKeeperMembership, zookeeper: str) -> None:
    """Make ZooKeeper expire ``membership``'s session: a second client joins it with its id
    and password, then closes it (kazoo's own testing trick)."""
    zk = membership._zk
    assert zk is not None
    session_id, password = zk.client_id
    twin = KazooClient(hosts=zookeeper, client_id=(session_id, password))
    twin.start(timeout=10)
    twin.stop()
    twin.close()


def test_an_instance_whose_session_expired_steps_back_then_rejoins(
    zookeeper: str, tmp_path: Path
) -> None:
    """Its node went with the session: the other member takes every partition; once the
    instance reconnects it registers again and gets its share back."""
    root = f"/t{uuid.uuid4().hex[:8]}"
    a = member(zookeeper, root, tmp_path, 7201)
    b = member(zookeeper, root, tmp_path, 7202)
    a.start()
    b.start(timeout=0)
    try:
        wait_for(
            lambda: len(a.active_partitions) == 2 and len(b.active_partitions) == 2,
            "the two members to share the partitions",
        )
        assert isinstance(a.membership, ZooKeeperMembership)
        expire_session(a.membership, zookeeper)
        wait_for(lambda: b.active_partitions == list(range(N)), "b to take every partition")
        wait_for(
            lambda: len(a.active_partitions) == 2 and len(b.active_partitions) == 2,
            "a to register again and get its share back",
        )
        assert a.state is State.RUNNING or a.state is State.REBALANCING
    finally:
        a.close()
        b.close()
