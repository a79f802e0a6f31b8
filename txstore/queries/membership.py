"""Membership: which instance owns which partitions.

An :class:`Assignment` maps every partition of an application to its active host and its
standby hosts. A *membership* produces the current assignment; the application polls it
(every ``refresh_interval`` seconds) and moves partitions when it changes. Two are provided:

* :class:`StaticAssignment` (the default): a JSON file (or a dict) written by the operator::

      {"application_id": "wordcount",
       "num_partitions": 6,
       "instances": {"127.0.0.1:7001": {"active": [0, 1, 2], "standby": [3]},
                     "127.0.0.1:7002": {"active": [3, 4, 5]}}}

  Rewrite the file (:meth:`StaticAssignment.write` replaces it atomically) to move partitions;
  every instance picks the change up at its next refresh.

* :class:`~txstore.queries.ZooKeeperMembership` (:mod:`txstore.queries.zookeeper`): each
  instance registers an ephemeral node in ZooKeeper; every instance computes the same assignment
  from the same live members (:func:`spread`): partitions are spread evenly, each going to the
  highest-ranked member with room (rendezvous hashing with a capacity of
  ``ceil(partitions / members)``), so a member joining or leaving moves few partitions.

The partition data itself moves through the shared state directory: the old owner closes the
partition (releasing its ``writer.lock``), the new owner opens it and recovers + restores it.

>>> a = Assignment.from_json({"num_partitions": 2, "instances": {
...     "h:1": {"active": [0], "standby": [1]}, "h:2": {"active": [1]}}})
>>> a.active_partitions(HostInfo("h", 1)), a.standby_partitions(HostInfo("h", 1))
(frozenset({0}), frozenset({1}))
>>> sorted(balanced([HostInfo("h", 1), HostInfo("h", 2)], 4).values()) == [
...     HostInfo("h", 1), HostInfo("h", 1), HostInfo("h", 2), HostInfo("h", 2)]
True
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from txstore.errors import InvalidArgumentError, InvalidTypeError, StorageError
from txstore.queries.types import HostInfo

__all__ = [
    "MAX_PARTITIONS",
    "Assignment",
    "Membership",
    "StaticAssignment",
    "balanced",
    "spread",
]

_log = logging.getLogger("txstore.queries")

#: Largest partition count accepted (Kafka's practical limit is far below).
MAX_PARTITIONS = 1 << 16


@dataclass(frozen=True)
class Assignment:
    """Every partition's active host and standby hosts, and the members (sorted).

    ``active`` may miss partitions (unassigned: no host serves them); ``stores`` optionally
    gives the store names a member hosts (ZooKeeper members publish them), ``None`` meaning
    "the same stores as this instance". ``version`` identifies the content.
    """

    num_partitions: int
    hosts: tuple[HostInfo, ...]
    active: Mapping[int, HostInfo]
    standby: Mapping[int, tuple[HostInfo, ...]] = field(default_factory=dict)
    stores: Mapping[HostInfo, frozenset[str]] | None = None
    application_id: str | None = None
    version: str = ""

    def __post_init__(self) -> None:
        n = self.num_partitions
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PARTITIONS:
            raise InvalidArgumentError(f"num_partitions must be an int in 1..{MAX_PARTITIONS}")
        members = set(self.hosts)
        for p, h in self.active.items():
            if not 0 <= p < n:
                raise InvalidArgumentError(f"partition {p} is outside 0..{n - 1}")
            if h not in members:
                raise InvalidArgumentError(f"partition {p} is assigned to unknown host {h}")
        for p, hs in self.standby.items():
            if not 0 <= p < n:
                raise InvalidArgumentError(f"standby partition {p} is outside 0..{n - 1}")
            if self.active.get(p) in hs:
                raise InvalidArgumentError(
                    f"partition {p}: host {self.active[p]} cannot be its active and a standby"
                )
        if not self.version:
            object.__setattr__(self, "version", _digest(self.to_json()))

    def active_partitions(self, host: HostInfo) -> frozenset[int]:
        """The partitions ``host`` owns."""
        return frozenset(p for p, h in self.active.items() if h == host)

    def standby_partitions(self, host: HostInfo) -> frozenset[int]:
        """The partitions ``host`` keeps a standby of."""
        return frozenset(p for p, hs in self.standby.items() if host in hs)

    def to_json(self) -> dict[str, Any]:
        """The static file's form."""
        instances: dict[str, Any] = {}
        for h in self.hosts:
            entry: dict[str, Any] = {
                "active": sorted(self.active_partitions(h)),
                "standby": sorted(self.standby_partitions(h)),
            }
            if self.stores is not None and h in self.stores:
                entry["stores"] = sorted(self.stores[h])
            instances[str(h)] = entry
        doc: dict[str, Any] = {"num_partitions": self.num_partitions, "instances": instances}
        if self.application_id is not None:
            doc["application_id"] = self.application_id
        return doc

    @classmethod
    def from_json(cls, doc: object) -> Assignment:
        """Parse and validate the static file's form (see the module docstring)."""
        if not isinstance(doc, dict):
            raise InvalidTypeError("an assignment must be a JSON object")
        try:
            n = doc["num_partitions"]
            instances = doc["instances"]
        except KeyError as exc:
            raise InvalidArgumentError(f"assignment lacks {exc.args[0]!r}") from None
        if not isinstance(instances, dict):
            raise InvalidTypeError("assignment 'instances' must map 'host:port' to an object")
        hosts: list[HostInfo] = []
        active: dict[int, HostInfo] = {}
        standby: dict[int, list[HostInfo]] = {}
        stores: dict[HostInfo, frozenset[str]] = {}
        for name, entry in instances.items():
            host = HostInfo.parse(name)
            if not isinstance(entry, dict):
                raise InvalidTypeError(f"assignment of {name} must be an object")
            hosts.append(host)
            for p in _partitions(entry.get("active", []), name):
                if p in active:
                    raise InvalidArgumentError(
                        f"partition {p} is active on both {active[p]} and {host}"
                    )
                active[p] = host
            for p in _partitions(entry.get("standby", []), name):
                standby.setdefault(p, []).append(host)
            if "stores" in entry:
                stores[host] = frozenset(str(s) for s in entry["stores"])
        app_id = doc.get("application_id")
        return cls(
            n,
            tuple(sorted(hosts)),
            active,
            {p: tuple(sorted(hs)) for p, hs in standby.items()},
            stores or None,
            None if app_id is None else str(app_id),
        )


def _partitions(value: object, name: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(p, int) and not isinstance(p, bool) for p in value
    ):
        raise InvalidTypeError(f"partitions of {name} must be a list of ints")
    return list(value)


def _digest(doc: object) -> str:
    return hashlib.blake2b(json.dumps(doc, sort_keys=True).encode(), digest_size=12).hexdigest()


def _rank(host: HostInfo, partition: int) -> bytes:
    return hashlib.blake2b(f"{host}|{partition}".encode(), digest_size=8).digest()


def balanced(hosts: Sequence[HostInfo], num_partitions: int) -> dict[int, HostInfo]:
    """Spread ``num_partitions`` evenly over ``hosts``: each partition goes to the
    highest-ranked host (rendezvous hashing) that holds fewer than ``ceil(P / hosts)``.
    Deterministic: every member computes the same result."""
    if not hosts:
        return {}
    cap = math.ceil(num_partitions / len(hosts))
    load = dict.fromkeys(hosts, 0)
    out: dict[int, HostInfo] = {}
    for p in range(num_partitions):
        for h in sorted(hosts, key=lambda h: _rank(h, p), reverse=True):
            if load[h] < cap:
                out[p] = h
                load[h] += 1
                break
    return out


def spread(
    members: Sequence[tuple[HostInfo, frozenset[str]]],
    num_partitions: int,
    num_standby_replicas: int,
    application_id: str | None,
) -> Assignment:
    """The assignment every member computes from the same live ``members`` (address, stores):
    actives by :func:`balanced`, each partition's standbys on the next-ranked other members.
    Deterministic; O(P x M log M)."""
    hosts = tuple(sorted(h for h, _ in members))
    active = balanced(hosts, num_partitions)
    standby: dict[int, tuple[HostInfo, ...]] = {}
    if num_standby_replicas and len(hosts) > 1:
        for p, owner in active.items():
            ranked = sorted(
                (h for h in hosts if h != owner), key=lambda h: _rank(h, p), reverse=True
            )
            standby[p] = tuple(sorted(ranked[:num_standby_replicas]))
    return Assignment(num_partitions, hosts, active, standby, dict(members), application_id)


class Membership(Protocol):
    """What an application needs from a membership."""

    #: Seconds between two polls of :meth:`current` (and calls of :meth:`heartbeat`).
    refresh_interval: float

    def join(self, application_id: str, host: HostInfo, store_names: Sequence[str]) -> None:
        """Register this instance (called by ``Application.start``)."""

    def heartbeat(self) -> None:
        """Tell the others this instance is alive (called every refresh)."""

    def current(self) -> Assignment:
        """The current assignment (cheap when nothing changed)."""
        ...

    def leave(self) -> None:
        """Deregister (called by ``Application.close``); idempotent."""


def _write_json_atomically(path: Path, doc: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, sort_keys=True, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class StaticAssignment:
    """A fixed assignment from a JSON file (re-read when it changes) or a dict.

    ``StaticAssignment(path)``, ``StaticAssignment(assignment=Assignment(...))`` or
    ``StaticAssignment.all_local(num_partitions)`` (every partition on this instance: the
    default of an application given no membership).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        assignment: Assignment | Mapping[str, Any] | None = None,
        refresh_interval: float = 1.0,
    ) -> None:
        if (path is None) == (assignment is None):
            raise InvalidArgumentError("give exactly one of path and assignment")
        self.path = None if path is None else Path(path)
        self.refresh_interval = float(refresh_interval)
        self._stat: tuple[int, int, int] | None = None
        self._local_partitions: int | None = None
        self._host: HostInfo | None = None
        self._app_id: str | None = None
        if assignment is not None:
            self._current = (
                assignment
                if isinstance(assignment, Assignment)
                else Assignment.from_json(dict(assignment))
            )
        else:
            self._current = self._read()

    @classmethod
    def all_local(cls, num_partitions: int) -> StaticAssignment:
        """Every partition on the instance that joins (a single-instance application)."""
        self = cls.__new__(cls)
        self.path = None
        self.refresh_interval = 1.0
        self._stat = None
        self._local_partitions = num_partitions
        self._host = None
        self._app_id = None
        placeholder = HostInfo("localhost", 0)
        self._current = Assignment(
            num_partitions, (placeholder,), dict.fromkeys(range(num_partitions), placeholder)
        )
        return self

    @staticmethod
    def write(path: str | os.PathLike[str], assignment: Assignment | Mapping[str, Any]) -> None:
        """Write (validated) ``assignment`` to ``path`` atomically (temp file + rename)."""
        a = assignment if isinstance(assignment, Assignment) else Assignment.from_json(assignment)
        _write_json_atomically(Path(path), a.to_json())

    def _read(self) -> Assignment:
        assert self.path is not None
        try:
            st = os.stat(self.path)
            text = self.path.read_text()
        except OSError as exc:
            raise StorageError(f"cannot read assignment file {str(self.path)!r}: {exc}") from exc
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise InvalidArgumentError(
                f"assignment file {str(self.path)!r} is not valid JSON: {exc}"
            ) from None
        a = Assignment.from_json(doc)
        self._stat = (st.st_mtime_ns, st.st_size, st.st_ino)
        return a

    def join(self, application_id: str, host: HostInfo, store_names: Sequence[str]) -> None:
        """Remember this instance (``all_local``: assign every partition to ``host``).

        Writes nothing. Raises :class:`~txstore.errors.InvalidArgumentError` if the assignment
        names another ``application_id``.
        """
        self._host = host
        self._app_id = application_id
        if self._local_partitions is not None:
            n = self._local_partitions
            self._current = Assignment(
                n, (host,), dict.fromkeys(range(n), host), application_id=application_id
            )
        self._check_app_id(self._current)

    def _check_app_id(self, a: Assignment) -> None:
        if self._app_id is not None and a.application_id not in (None, self._app_id):
            raise InvalidArgumentError(
                f"the assignment is for application {a.application_id!r}, not {self._app_id!r}"
            )

    def heartbeat(self) -> None:
        """Nothing to do: a static assignment does not track liveness."""

    def current(self) -> Assignment:
        """The assignment; from a file, re-read when its modification time, size or inode
        changed (one ``stat`` otherwise). A file that cannot be read or does not validate
        (being edited, a bad edit) is logged and the last good assignment kept: never raises.
        """
        if self.path is not None:
            try:
                st = os.stat(self.path)
                if (st.st_mtime_ns, st.st_size, st.st_ino) != self._stat:
                    a = self._read()
                    self._check_app_id(a)
                    self._current = a
            except (OSError, InvalidArgumentError, InvalidTypeError, StorageError) as exc:
                # A file being edited by hand, or a bad edit: keep the last good assignment.
                _log.warning("keeping the previous assignment: %s", exc)
        return self._current

    def leave(self) -> None:
        """Nothing to do: the assignment does not change when an instance stops."""

    def __repr__(self) -> str:
        where = str(self.path) if self.path is not None else "<dict>"
        return f"<StaticAssignment {where}>"
