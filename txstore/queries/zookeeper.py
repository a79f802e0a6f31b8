"""Membership on ZooKeeper (through kazoo): instances on any machines find each other.

Each instance registers an **ephemeral** znode
``<root>/<application_id>/members/<host:port>`` holding JSON: its address, its stores, the
application's partition count and the partitions it hosts now (``active``, ``standby``,
rewritten after every rebalance). ZooKeeper deletes the node when the instance's session ends:
when it leaves, and when it dies (SIGKILL, a lost machine) once ``session_timeout`` seconds
passed without a heartbeat from it (kazoo heartbeats in the background).

Every instance watches the members (a kazoo ``ChildrenWatch``) and computes the same
assignment from the same live members (:func:`~txstore.queries.membership.spread`: rendezvous
hashing with even capacity, standbys on the next-ranked members), so an instance dying or
joining moves few partitions, and the survivors re-route at once: the application polls
:meth:`ZooKeeperMembership.current` (a cached value, recomputed only when the watch fired)
every ``refresh_interval`` seconds and moves the partitions. An instance whose own session
expired (a long pause, a partition from ZooKeeper) no longer sees itself among the members, so
it closes its partitions; it registers again once reconnected.

The partition data moves through the state directory (one machine or a shared filesystem: the
old owner closes the partition and releases its ``writer.lock``, the new owner opens, recovers
and restores it); the membership itself needs no shared disk.

Run a ZooKeeper server for real with Debian's ``zookeeperd`` (``apt install zookeeperd``,
listening on port 2181) or any ensemble (``hosts="zk1:2181,zk2:2181,zk3:2181"``); a ZooKeeper
server accepts session timeouts from 2 to 20 ``tickTime`` (2 s by default: 4 to 40 s).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch

from txstore.errors import IllegalStateError, InvalidArgumentError, InvalidTypeError
from txstore.queries.membership import MAX_PARTITIONS, Assignment, spread
from txstore.queries.types import HostInfo

__all__ = ["ZooKeeperMembership"]

_log = logging.getLogger("txstore.queries")


class ZooKeeperMembership:
    """Members register ephemeral znodes in ZooKeeper; the assignment follows the live
    members (see the module docstring).

    ``hosts``: the ZooKeeper connect string (``"host:port[,host:port...]"``, optionally with a
    chroot ``/path``); ``num_partitions``: the application's partition count (every member
    must agree; a member with another count is ignored); ``num_standby_replicas``: standbys per
    partition; ``session_timeout``: seconds after which ZooKeeper drops a silent member;
    ``root``: the znode under which applications register; ``refresh_interval``: how often the
    application polls the (cached) assignment; ``connect_timeout``: how long :meth:`join` waits
    for ZooKeeper.

    Construction connects nothing. Raises :class:`~txstore.errors.InvalidArgumentError` for a
    partition count outside 1..65536, a negative standby count, a non-positive timeout, or a
    ``root`` that is not an absolute znode path.
    """

    def __init__(
        self,
        hosts: str,
        num_partitions: int,
        *,
        num_standby_replicas: int = 0,
        session_timeout: float = 10.0,
        root: str = "/txstore",
        refresh_interval: float = 0.1,
        connect_timeout: float = 15.0,
    ) -> None:
        if isinstance(num_partitions, bool) or not isinstance(num_partitions, int):
            raise InvalidTypeError("num_partitions must be an int")
        if not 1 <= num_partitions <= MAX_PARTITIONS:
            raise InvalidArgumentError(f"num_partitions must be in 1..{MAX_PARTITIONS}")
        if num_standby_replicas < 0:
            raise InvalidArgumentError("num_standby_replicas must be >= 0")
        if session_timeout <= 0 or refresh_interval <= 0 or connect_timeout <= 0:
            raise InvalidArgumentError("timeouts and intervals must be > 0")
        if not root.startswith("/") or root.endswith("/") or "//" in root:
            raise InvalidArgumentError(f"root must be an absolute znode path, got {root!r}")
        self.hosts = hosts
        self.num_partitions = num_partitions
        self.num_standby_replicas = num_standby_replicas
        self.session_timeout = float(session_timeout)
        self.root = root
        self.refresh_interval = float(refresh_interval)
        self.connect_timeout = float(connect_timeout)
        self._zk: KazooClient | None = None
        self._members_path = ""
        self._node = ""
        self._doc: dict[str, Any] = {}
        self._app_id: str | None = None
        self._children: list[str] = []
        self._dirty = threading.Event()
        self._lost = threading.Event()
        self._current: Assignment | None = None
        self._published: tuple[list[int], list[int]] | None = None
        self._registered = False  # our node exists (deleted by leave, not another's)
        # after a lost session: set once an assignment without this instance was handed out,
        # so that it steps back (releases its partitions) before it registers again
        self._stepped_back = False

    # ---- session ------------------------------------------------------------------------

    def _state_changed(self, state: str) -> None:
        """kazoo's connection listener (its thread): a LOST session took our node with it."""
        if state == KazooState.LOST:
            self._lost.set()
            self._dirty.set()

    def _children_changed(self, children: list[str]) -> None:
        """The ChildrenWatch callback (kazoo's thread): note, read later."""
        self._children = sorted(children)
        self._dirty.set()

    def _register(self) -> None:
        assert self._zk is not None
        data = json.dumps(self._doc, sort_keys=True).encode()
        deadline_waits = max(1, int(self.session_timeout / 0.25) + 4)
        for _ in range(deadline_waits):
            try:
                self._zk.create(self._node, data, ephemeral=True, makepath=True)
                self._registered = True
                return
            except NodeExistsError:
                # Our previous process's session (killed, restarted fast) has not expired yet,
                # or another live instance uses this address: wait one session timeout.
                threading.Event().wait(0.25)
        raise InvalidArgumentError(
            f"another instance is registered as {self._node!r} in ZooKeeper {self.hosts}: "
            "two instances cannot share an application_server address"
        )

    def join(self, application_id: str, host: HostInfo, store_names: Sequence[str]) -> None:
        """Connect to ZooKeeper, register this instance's ephemeral node and watch the
        members.

        Waits up to ``connect_timeout`` for ZooKeeper, and up to ``session_timeout`` for a
        node of the same address left by a previous process of this instance to expire. Raises
        :class:`~txstore.errors.InvalidArgumentError` if ``host`` has no real port or another
        live instance is registered with the same address,
        :class:`~txstore.errors.IllegalStateError` if ZooKeeper cannot be reached.
        """
        if host.port <= 0:
            raise InvalidArgumentError(
                f"a ZooKeeper member needs a real port in its application_server, got {host}"
            )
        self._app_id = application_id
        self._members_path = f"{self.root}/{application_id}/members"
        self._node = f"{self._members_path}/{host}"
        self._doc = {
            "application_server": str(host),
            "stores": sorted(store_names),
            "num_partitions": self.num_partitions,
            "pid": os.getpid(),
            "active": [],
            "standby": [],
        }
        zk = KazooClient(hosts=self.hosts, timeout=self.session_timeout)
        try:
            zk.start(timeout=self.connect_timeout)
        except KazooTimeoutError:
            zk.close()
            raise IllegalStateError(
                f"cannot reach ZooKeeper at {self.hosts} within {self.connect_timeout} s"
            ) from None
        self._zk = zk
        zk.add_listener(self._state_changed)
        try:
            zk.ensure_path(self._members_path)
            self._register()
        except BaseException:
            self.leave()
            raise
        ChildrenWatch(zk, self._members_path, self._children_changed)

    def heartbeat(self) -> None:
        """Register again after this instance's session was lost and a new one began (kazoo
        heartbeats the session itself), once :meth:`current` handed out an assignment without
        this instance: it releases its partitions first (the others took them over when its
        node went), or a fast reconnection would keep them while the others wait for them. One
        ``exists`` round trip only after a loss."""
        zk = self._zk
        if zk is None or not self._lost.is_set() or not zk.connected or not self._stepped_back:
            return
        try:
            if zk.exists(self._node) is None:
                self._register()
            self._stepped_back = False
            self._lost.clear()
            self._published = None
            self._dirty.set()
        except (KazooException, KazooTimeoutError, InvalidArgumentError) as exc:
            _log.warning("cannot register again in ZooKeeper yet: %s", exc)

    def publish(self, active: list[int], standby: list[int]) -> None:
        """Write the partitions this instance hosts now into its node (after a rebalance; a
        no-op when unchanged)."""
        zk = self._zk
        if zk is None or self._published == (active, standby) or self._lost.is_set():
            return
        self._doc.update(active=active, standby=standby)
        try:
            zk.set(self._node, json.dumps(self._doc, sort_keys=True).encode())
            self._published = (active, standby)
        except (KazooException, KazooTimeoutError) as exc:
            _log.warning("cannot publish the hosted partitions: %s", exc)

    # ---- the assignment -----------------------------------------------------------------

    def members(self) -> list[dict[str, Any]]:
        """The live members' node documents (address, stores, partition count, hosted
        partitions), sorted by address: one ZooKeeper read per member."""
        zk = self._zk
        if zk is None:
            raise InvalidArgumentError("join() first")
        out = []
        for child in list(self._children) or zk.get_children(self._members_path):
            try:
                data, _ = zk.get(f"{self._members_path}/{child}")
                doc = json.loads(data)
                HostInfo.parse(doc["application_server"])
            except NoNodeError:
                continue  # gone meanwhile
            except (ValueError, KeyError, TypeError, InvalidArgumentError):
                _log.warning("ignoring malformed member node %r", child)
                continue
            out.append(doc)
        return sorted(out, key=lambda d: HostInfo.parse(d["application_server"]))

    def current(self) -> Assignment:
        """The assignment computed from the live members with this partition count.

        O(1) while the members did not change (a cached value); after a change, one
        ZooKeeper read per member and O(P x M log M). Raises
        :class:`~txstore.errors.InvalidArgumentError` before :meth:`join`, and
        :class:`~txstore.errors.IllegalStateError` when ZooKeeper cannot be read (the
        application keeps its assignment and asks again at its next poll).
        """
        if self._zk is None:
            raise InvalidArgumentError("join() first")
        if self._current is not None and not self._dirty.is_set():
            return self._current
        self._dirty.clear()
        try:
            members = self.members()
        except (KazooException, KazooTimeoutError) as exc:  # a session ending, a lost link
            self._dirty.set()  # read again at the next poll
            raise IllegalStateError(f"cannot read the members from ZooKeeper: {exc!r}") from None
        found: list[tuple[HostInfo, frozenset[str]]] = []
        for doc in members:
            if int(doc.get("num_partitions", self.num_partitions)) != self.num_partitions:
                _log.warning(
                    "ignoring member %s: it has %s partitions, not %s",
                    doc["application_server"],
                    doc.get("num_partitions"),
                    self.num_partitions,
                )
                continue
            found.append(
                (HostInfo.parse(doc["application_server"]), frozenset(doc.get("stores", ())))
            )
        if self._lost.is_set():  # our node went with the session: we are not a member
            mine = HostInfo.parse(self._doc["application_server"])
            found = [(h, s) for h, s in found if h != mine]
            self._stepped_back = True
        self._current = spread(found, self.num_partitions, self.num_standby_replicas, self._app_id)
        return self._current

    def leave(self) -> None:
        """Delete this instance's node and close the session (the others reassign its
        partitions at once); idempotent."""
        zk, self._zk = self._zk, None
        if zk is None:
            return
        try:
            if self._registered and not self._lost.is_set():
                zk.delete(self._node)
        except (KazooException, KazooTimeoutError):
            pass  # the session's end removes it anyway
        finally:
            self._registered = False
            zk.stop()
            zk.close()

    def __repr__(self) -> str:
        return f"<ZooKeeperMembership {self.hosts}{self.root}>"
