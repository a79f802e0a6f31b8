"""The HTTP query service's endpoints: request routing and the queries, apart from HTTP.

:class:`Service` turns a request (method, target, body) into a status and a JSON document;
:mod:`txstore.queries.http.asgi` carries it over HTTP. Composite stores are kept per (store,
type, partition, options), and the serdes' JSON codecs per store (:mod:`txstore.queries.http.wire`).

Endpoints (``{store}`` URL-quoted; every query takes ``type=<queryable store type>``,
``stale=true``, ``read_committed=true`` and ``min_position``/``wait_ms``, and its answer
carries its ``position``; iterator queries ``limit``, and ``after`` to resume
a truncated answer on one partition, see :mod:`txstore.queries.http.paging`):

===========================================  ===============================================
``GET /v1/health``                           state, thread state, hosted partitions
``GET /v1/metadata``                         every instance (``StreamsMetadata``)
``GET /v1/metadata/stores/{store}``          the instances hosting a store
``GET /v1/metadata/stores/{store}/key``      ``KeyQueryMetadata`` of ``?key=`` (or ``key_b64``)
``GET /v1/stores``                           the stores, their kinds, formats and serdes
``GET /v1/stores/{store}/get?key=``          a key-value store's value
``POST /v1/stores/{store}/get``              several keys: body ``{"keys": [...]}``
``GET /v1/stores/{store}/range``             ``from``, ``to``, ``reverse``, ``limit``
``GET /v1/stores/{store}/prefix?prefix=``    prefix scan (prefix serialized by the key serde)
``GET /v1/stores/{store}/all``               every entry (``reverse``, ``limit``)
``GET /v1/stores/{store}/count``             approximate number of entries
``GET /v1/stores/{store}/fetch``             window fetch: ``key`` + ``time``; ``key`` +
                                             ``time_from`` + ``time_to``; ``key_from`` +
                                             ``key_to`` + ``time_from`` + ``time_to``
``GET /v1/stores/{store}/fetch_all``         windows starting in ``time_from..time_to``
``GET /v1/stores/{store}/sessions``          ``key`` (or ``key_from``/``key_to``) +
                                             ``earliest_end`` + ``latest_start``
``GET /v1/stores/{store}/session``           ``key`` + ``start`` + ``end``: one session
===========================================  ===============================================

Queries on one key go to the key's partition on this instance; where it is not hosted here the
answer is 409 with its owner, so a client that guessed wrong learns where to go.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

from txstore.errors import (
    InvalidArgumentError,
    InvalidStateStoreError,
    InvalidStateStorePartitionError,
    NotCaughtUpError,
    SerializationError,
    TxStoreError,
    UnknownStateStoreError,
)
from txstore.queries.application import Application
from txstore.queries.http.paging import Order, Position, kv_order, page, session_order, window_order
from txstore.queries.http.protocol import Args, HttpError, bad, error_doc, parse_bound, parse_json
from txstore.queries.http.wire import (
    b64decode,
    encode_key,
    encode_value,
    encoder,
    key_from_json,
    key_from_text,
)
from txstore.queries.specs import StoreSpec
from txstore.queries.types import QueryableStoreType, QueryableStoreTypes, StoreQueryParameters

__all__ = ["Service"]

_LONG_MAX = 2**63 - 1


class Service:
    """Request routing and the queries of ``app``, independent of the HTTP plumbing; iterator
    queries return at most ``max_results`` items."""

    def __init__(self, app: Application, max_results: int) -> None:
        self.app = app
        self.max_results = max_results
        self._composites: dict[tuple[Any, ...], Any] = {}
        self._encoders: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {}

    # ---- helpers ----------------------------------------------------------------------

    def _spec(self, name: str) -> StoreSpec:
        spec = next((s for s in self.app.stores if s.name == name), None)
        if spec is None:
            raise UnknownStateStoreError(name)
        return spec

    def _qtype(self, spec: StoreSpec, args: Args) -> QueryableStoreType:
        name = args.text("type")
        if name is None:
            return QueryableStoreTypes.default_for(spec.kind, spec.format)
        try:
            qtype = QueryableStoreTypes.by_name(name)
        except InvalidArgumentError as exc:
            raise bad(str(exc)) from None
        if not qtype.accepts((spec.kind, spec.format)):
            raise HttpError(
                400,
                "InvalidStateStoreError",
                f"type {name!r} does not accept store {spec.name!r} (a {spec.kind} store in "
                f"format {spec.format.name})",
            )
        return qtype

    def _codecs(self, spec: StoreSpec) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
        c = self._encoders.get(spec.name)
        if c is None:
            c = (encoder(spec.key_serde), encoder(spec.value_serde))
            self._encoders[spec.name] = c
        return c

    def _store(self, spec: StoreSpec, args: Args, partition: int | None = None) -> Any:
        qtype = self._qtype(spec, args)
        if partition is None:
            partition = self._partition_arg(args)
            if partition is not None:
                args.touched = {partition}
        stale, rc = args.flag("stale"), args.flag("read_committed")
        key = (spec.name, qtype.name, partition, stale, rc)
        store = self._composites.get(key)
        if store is None:
            params = StoreQueryParameters.from_name_and_type(spec.name, qtype).with_partition(
                partition
            )
            if stale:
                params = params.enable_stale_stores()
            if rc:
                params = params.enable_read_committed()
            store = self.app.store(params)
            if len(self._composites) < 4096:
                self._composites[key] = store
        return store

    def _key(self, spec: StoreSpec, args: Args, name: str = "key") -> Any:
        try:
            b64 = args.text(f"{name}_b64")
            if b64 is not None:
                return spec.key_serde.deserialize(b64decode(b64))
            text = args.text(name)
            if text is None:
                raise bad(f"missing parameter {name!r} (or {name}_b64)")
            return key_from_text(spec.key_serde, text)
        except (InvalidArgumentError, SerializationError) as exc:
            raise bad(str(exc)) from None

    def _optional_key(self, spec: StoreSpec, args: Args, name: str) -> Any:
        if not args.has(name) and not args.has(f"{name}_b64"):
            return None
        return self._key(spec, args, name)

    def _partition_of(self, spec: StoreSpec, key: Any) -> int:
        return self.app.partition_for_key(spec.name, key)

    @staticmethod
    def _partition_arg(args: Args) -> int | None:
        partition = args.integer("partition")
        if partition is not None and partition < 0:
            raise bad("partition must be >= 0")
        return partition

    def _keyed(self, spec: StoreSpec, args: Args, key: Any) -> tuple[Any, int]:
        """The composite store of ``key``'s partition (409 with its owner if not here). A
        ``partition`` argument must be the key's (409 for a partition the application does not
        have, as ``all?partition=``; 400 for another partition than the key's)."""
        p = self._partition_of(spec, key)
        given = self._partition_arg(args)
        if given is not None and given != p:
            a = self.app.assignment
            if a is None or given >= a.num_partitions:
                raise InvalidStateStorePartitionError(given, spec.name)
            raise bad(f"the key is in partition {p}, not in the given partition {given}")
        if args.touched is None:
            args.touched = set()
        args.touched.add(p)
        try:
            return self._store(spec, args, p), p
        except InvalidStateStorePartitionError as exc:
            raise self._misdirected(spec.name, p, exc) from None

    def _misdirected(self, store: str, p: int, exc: InvalidStateStoreError) -> HttpError:
        a = self.app.assignment
        owner = a.active.get(p) if a is not None else None
        return HttpError(
            409,
            "StateStoreMigratedError",
            str(exc),
            partition=p,
            active_host=None if owner is None else str(owner),
        )

    def _limit(self, args: Args) -> int:
        limit = args.integer("limit", self.max_results)
        assert limit is not None
        if limit < 1:
            raise bad("limit must be >= 1")
        return min(limit, self.max_results)

    def _after(self, args: Args, one_partition: bool) -> Position | None:
        """The ``after`` position of a resumed page (only on one partition: see
        :mod:`txstore.queries.http.paging`)."""
        text = args.text("after")
        if text is None:
            return None
        if not one_partition:
            raise bad("after needs partition: a resume position is within one partition")
        return Position.parse(text)

    @staticmethod
    def _after_key(spec: StoreSpec, after: Position) -> Any:
        """The key a key-value resume position names (400 if the key serde refuses it)."""
        try:
            return spec.key_serde.deserialize(after.raw)
        except Exception:  # a forged or truncated position: whatever the serde raises
            raise bad("malformed after position: not a key of this store") from None

    def _order(self, spec: StoreSpec, args: Args, keyed: bool, single: bool = False) -> Any:
        """The sort key of the items (resume positions), or None when the answer chains
        several partitions (no position can resume it)."""
        if not keyed and not args.has("partition"):
            return None
        ser = spec.key_serde.serialize
        if spec.kind == "key_value":
            order: Order = kv_order(ser)
        elif spec.kind == "window":
            order = window_order(ser, self._interval(spec), not single)
        else:
            order = session_order(ser, self._interval(spec))
        return order

    @staticmethod
    def _interval(spec: StoreSpec) -> int:
        interval: int = getattr(spec.builder.supplier, "segment_interval")  # noqa: B009
        return interval

    def _pair(self, spec: StoreSpec) -> Callable[[Any], dict[str, Any]]:
        kenc, venc = self._codecs(spec)
        return lambda kv: {"key": encode_key(kv.key, kenc), "value": encode_value(kv.value, venc)}

    def _timed(self, spec: StoreSpec) -> Callable[[Any], dict[str, Any]]:
        _, venc = self._codecs(spec)
        return lambda kv: {"timestamp": kv.key, "value": encode_value(kv.value, venc)}

    # ---- routing ------------------------------------------------------------------------

    def dispatch(self, method: str, target: str, body: bytes | None) -> tuple[int, Any]:
        """Answer ``method target`` (``body`` for POST): ``(status, JSON document)``; raises
        :class:`~txstore.queries.http.protocol.HttpError` or the query's txstore error."""
        parts = urlsplit(target)
        segs = [unquote(s) for s in parts.path.split("/")[1:]]
        args = Args(parts.query)
        if segs and segs[-1] == "":
            segs.pop()
        if not segs or segs[0] != "v1":
            raise HttpError(404, "NotFound", f"no such endpoint {parts.path!r}")
        segs = segs[1:]
        if method == "POST":
            if len(segs) == 3 and segs[0] == "stores" and segs[2] == "get":
                spec = self._spec(segs[1])
                return 200, self._positioned(
                    lambda svc, sp, a: svc.multi_get(sp, a, body or b""), spec, args
                )
            raise HttpError(405, "MethodNotAllowed", f"POST is not allowed on {parts.path!r}")
        if segs == ["health"]:
            return 200, self.health()
        if segs == ["metadata"]:
            return 200, self.metadata()
        if len(segs) == 3 and segs[:2] == ["metadata", "stores"]:
            self._spec(segs[2])
            return 200, {
                "instances": [m.to_json() for m in self.app.all_metadata_for_store(segs[2])]
            }
        if len(segs) == 4 and segs[:2] == ["metadata", "stores"] and segs[3] == "key":
            spec = self._spec(segs[2])
            meta = self.app.query_metadata_for_key(spec.name, self._key(spec, args))
            assert meta is not None
            return 200, meta.to_json()
        if segs == ["stores"]:
            return 200, {
                "application_id": self.app.application_id,
                "stores": self.app.describe_stores(),
            }
        if len(segs) == 3 and segs[0] == "stores":
            spec = self._spec(segs[1])
            op = _OPS.get(segs[2])
            if op is None:
                raise HttpError(404, "NotFound", f"no such store operation {segs[2]!r}")
            return 200, self._positioned(op, spec, args)
        raise HttpError(404, "NotFound", f"no such endpoint {parts.path!r}")

    # ---- endpoints ----------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``/v1/health``: the states and the hosted partitions."""
        app = self.app
        return {
            "application_id": app.application_id,
            "application_server": str(app.host_info),
            "state": str(app.state),
            "thread_state": str(app.thread_state),
            "active_partitions": app.active_partitions,
            "standby_partitions": app.standby_partitions,
        }

    def metadata(self) -> dict[str, Any]:
        """``/v1/metadata``: every instance."""
        app = self.app
        instances = app.all_metadata()
        a = app.assignment
        return {
            "application_id": app.application_id,
            "num_partitions": None if a is None else a.num_partitions,
            "instances": [m.to_json() for m in instances],
        }

    def _planned(self, spec: StoreSpec, op: Any, args: Args) -> set[int] | None:
        """The partitions ``op`` will read, when known before it runs (a key's, or the
        ``partition`` argument's); None: every hosted one."""
        if args.has("partition"):
            p = self._partition_arg(args)
            return None if p is None else {p}
        if op in _KEYED and (args.has("key") or args.has("key_b64")):
            return {self._partition_of(spec, self._key(spec, args))}
        return None

    def _positioned(
        self, op: Callable[[Service, StoreSpec, Args], dict[str, Any]], spec: StoreSpec, args: Args
    ) -> dict[str, Any]:
        """Run ``op`` and add the position its answer reflects: ``"position": {partition:
        committed changelog offset}`` of the partitions it read.

        Read-committed answers (``read_committed=true``) reflect exactly that position: the
        offsets are read before and after the query, and a commit in between re-runs it (up
        to 3 times, then 503). A read-uncommitted answer's position is the last commit when
        it was read (the value may hold later, uncommitted writes). A ``min_position`` the
        answer's partitions have not reached raises :class:`~txstore.errors.NotCaughtUpError`
        (the HTTP layer waits and retries up to ``wait_ms``). Costs one offset read per
        partition read (two when read-committed; none for a read-uncommitted answer between two
        commits: the offsets are cached per commit).
        """
        bound = parse_bound(args.text("min_position"))
        stale = args.flag("stale")
        positions = self.app.committed_positions
        exact = args.flag("read_committed")
        planned = self._planned(spec, op, args) if exact else None
        for _ in range(3):
            before = positions(spec.name, stale, planned) if exact else {}
            args.touched = None
            doc = op(self, spec, args)
            touched = args.touched if args.touched is not None else planned
            after = positions(spec.name, stale, touched, cached=not exact)
            pos = {p: after[p] for p in sorted(after)}
            if not exact or all(before.get(p, -2) == o for p, o in pos.items()):
                break
        else:
            raise HttpError(503, "Busy", "commits kept landing during the query; retry")
        for p, o in pos.items():
            need = bound.get(p)
            if need is not None and (-1 if o is None else o) < need:
                raise NotCaughtUpError(
                    f"partition {p} of store {spec.name!r} is at committed offset {o}, the "
                    f"query demands at least {need}"
                )
        doc["position"] = {str(p): o for p, o in pos.items()}
        return doc

    def get(self, spec: StoreSpec, args: Args) -> dict[str, Any]:
        """``get``: one key's value, from its partition."""
        self._kind(spec, "key_value")
        key = self._key(spec, args)
        store, p = self._keyed(spec, args, key)
        kenc, venc = self._codecs(spec)
        try:
            value = store.get(key)
        except InvalidStateStorePartitionError as exc:
            raise self._misdirected(spec.name, p, exc) from None
        return {
            "key": encode_key(key, kenc),
            "value": encode_value(value, venc),
            "found": value is not None,
            "partition": p,
        }

    def multi_get(self, spec: StoreSpec, args: Args, body: bytes) -> dict[str, Any]:
        """``POST get``: several keys' values, an error document for each key that failed."""
        self._kind(spec, "key_value")
        doc = parse_json(body)
        keys = doc.get("keys") if isinstance(doc, dict) else None
        if not isinstance(keys, list):
            raise bad('the body must be {"keys": [...]}')
        if len(keys) > self.max_results:
            raise bad(f"at most {self.max_results} keys per request, got {len(keys)}")
        kenc, venc = self._codecs(spec)
        results = []
        for k in keys:
            try:
                key = key_from_json(spec.key_serde, k)
            except (InvalidArgumentError, SerializationError) as exc:
                raise bad(str(exc)) from None
            try:
                store, p = self._keyed(spec, args, key)
                value = store.get(key)
            except HttpError as exc:
                results.append({"key": k, **exc.doc})
                continue
            except TxStoreError as exc:
                results.append({"key": k, **error_doc(exc)})
                continue
            results.append(
                {"key": encode_key(key, kenc), "value": encode_value(value, venc), "partition": p}
            )
        return {"results": results}

    def range(self, spec: StoreSpec, args: Args) -> dict[str, Any]:
        """``range``: a key range of every partition."""
        self._kind(spec, "key_value")
        lo = self._optional_key(spec, args, "from")
        hi = self._optional_key(spec, args, "to")
        store = self._store(spec, args)
        rev = args.flag("reverse")
        after = self._after(args, args.has("partition"))
        if after is not None:  # resume at the position's key (the page skips it)
            k = self._after_key(spec, after)
            lo, hi = (lo, k) if rev else (k, hi)
        it = store.reverse_range(lo, hi) if rev else store.range(lo, hi)
        order = self._order(spec, args, False)
        return page(it, self._limit(args), self._pair(spec), order, after, rev)

    def prefix(self, spec: StoreSpec, args: Args) -> dict[str, Any]:
        """``prefix``: the keys with a prefix."""
        self._kind(spec, "key_value")
        prefix = self._key(spec, args, "prefix")
        store = self._store(spec, args)
        after = self._after(args, args.has("partition"))
        order = self._order(spec, args, False)
        if after is None:
            it = store.prefix_scan(prefix, spec.key_serde)
            return page(it, self._limit(args), self._pair(spec), order)
        # Resume: the keys from the position on, up to the first without the prefix.
        pb = spec.key_serde.serialize(prefix) or b""
        it = store.range(self._after_key(spec, after), None)
        return page(
            it,
            self._limit(args),
            self._pair(spec),
            order,
            after,
            stop=lambda b: not b.startswith(pb),
        )

    def all(self, spec: StoreSpec, args: Args) -> dict[str, Any]:
        """``all``: every entry of a key-value or window store."""
        store = self._store(spec, args)
        rev = args.flag("reverse")
        after = self._after(args, args.has("partition"))
        if spec.kind == "key_value":
            if after is not None:
                k = self._after_key(spec, after)
                it = store.reverse_range(None, k) if rev else store.range(k, None)
            else:
                it = store.reverse_all() if rev else store.all()
        elif spec.kind == "window":
            if after is not None:  # from (back to) the position's segment
                t0, t1 = self._segment_times(spec, after, 0, _LONG_MAX, rev)
                it = store.backward_fetch_all(t0, t1) if rev else store.fetch_all(t0, t1)
            else:
                it = store.backward_all() if rev else store.all()
        else:
            raise bad("session stores have no 'all'; use sessions with key_from/key_to")
        order = self._order(spec, args, False)
        return page(it, self._limit(args), self._pair(spec), order, after, rev)

    def _segment_times(
        self, spec: StoreSpec, after: Position, t0: int, t1: int, rev: bool
    ) -> tuple[int, int]:
        """A windowed range's times, restricted to start at (``rev``: end with) the resume
        position's segment."""
        seg_start = after.segment * self._interval(spec)
        if rev:
            return t0, min(t1, seg_start + self._interval(spec) - 1)
        return max(t0, seg_start), t1

    def count(self, spec: StoreSpec, args: Args) -> dict[str, Any]:
        """``count``: the approximate number of entries."""
        self._kind(spec, "key_value")
        return {"count": self._store(spec, args).approximate_num_entries()}

    def fetch(self, spec: StoreSpec, args: Args) -> dict[str, Any]:
        """``fetch``: one window, a key's windows, or a key range's windows."""
        self._kind(spec, "window")
        back = args.flag("backward")
        limit = self._limit(args)
        if args.has("key") or args.has("key_b64"):
            key = self._key(spec, args)
            store, _p = self._keyed(spec, args, key)
            if args.has("time"):
                _, venc = self._codecs(spec)
                value = store.fetch(key, args.need_int("time"))
                return {"value": encode_value(value, venc), "found": value is not None}
            t0, t1 = args.need_int("time_from"), args.need_int("time_to")
            after = self._after(args, True)
            if after is not None:  # from (back to) the position's window start
                t0, t1 = (t0, min(t1, after.time)) if back else (max(t0, after.time), t1)
            it = store.backward_fetch(key, t0, t1) if back else store.fetch(key, t0, t1)
            order = self._order(spec, args, True, single=True)
            return page(it, limit, self._timed(spec), order, after, back)
        lo = self._optional_key(spec, args, "key_from")
        hi = self._optional_key(spec, args, "key_to")
        t0, t1 = args.need_int("time_from"), args.need_int("time_to")
        store = self._store(spec, args)
        after = self._after(args, args.has("partition"))
        if after is not None:
            t0, t1 = self._segment_times(spec, after, t0, t1, back)
        it = store.backward_fetch(lo, hi, t0, t1) if back else store.fetch(lo, hi, t0, t1)
        order = self._order(spec, args, False)
        return page(it, limit, self._pair(spec), order, after, back)

    def fetch_all(self, spec: StoreSpec, args: Args) -> dict[str, Any]:
        """``fetch_all``: the windows starting in a time range."""
        self._kind(spec, "window")
        t0, t1 = args.need_int("time_from"), args.need_int("time_to")
        store = self._store(spec, args)
        back = args.flag("backward")
        after = self._after(args, args.has("partition"))
        if after is not None:
            t0, t1 = self._segment_times(spec, after, t0, t1, back)
        it = store.backward_fetch_all(t0, t1) if back else store.fetch_all(t0, t1)
        order = self._order(spec, args, False)
        return page(it, self._limit(args), self._pair(spec), order, after, back)

    def sessions(self, spec: StoreSpec, args: Args) -> dict[str, Any]:
        """``sessions``: a key's (or a key range's) sessions."""
        self._kind(spec, "session")
        e, s = args.need_int("earliest_end"), args.need_int("latest_start")
        back = args.flag("backward")
        name = "backward_find_sessions" if back else "find_sessions"
        keyed = args.has("key") or args.has("key_b64")
        after = self._after(args, keyed or args.has("partition"))
        if after is not None:
            # The sessions after the position end no earlier (forward) or start no later
            # (backward: a session starts before it ends) than the position's end (one key)
            # or its segment's first (last) time (a key range, ordered by segment).
            if keyed:
                lo_t = hi_t = after.session_end
            else:
                lo_t = after.segment * self._interval(spec)
                hi_t = lo_t + self._interval(spec) - 1
            e, s = (e, min(s, hi_t)) if back else (max(e, lo_t), s)
        if keyed:
            key = self._key(spec, args)
            store, _ = self._keyed(spec, args, key)
            it = getattr(store, name)(key, e, s)
        else:
            lo = self._optional_key(spec, args, "key_from")
            hi = self._optional_key(spec, args, "key_to")
            it = getattr(self._store(spec, args), name)(lo, hi, e, s)
        order = self._order(spec, args, keyed)
        return page(it, self._limit(args), self._pair(spec), order, after, back)

    def session(self, spec: StoreSpec, args: Args) -> dict[str, Any]:
        """``session``: one session's aggregation."""
        self._kind(spec, "session")
        key = self._key(spec, args)
        store, _ = self._keyed(spec, args, key)
        _, venc = self._codecs(spec)
        value = store.fetch_session(key, args.need_int("start"), args.need_int("end"))
        return {"value": encode_value(value, venc), "found": value is not None}

    @staticmethod
    def _kind(spec: StoreSpec, kind: str) -> None:
        if spec.kind != kind:
            raise bad(f"store {spec.name!r} is a {spec.kind} store; this is a {kind} operation")


_KEYED = {Service.get, Service.fetch, Service.sessions, Service.session}

_OPS: dict[str, Callable[[Service, StoreSpec, Args], dict[str, Any]]] = {
    "get": Service.get,
    "range": Service.range,
    "prefix": Service.prefix,
    "all": Service.all,
    "count": Service.count,
    "fetch": Service.fetch,
    "fetch_all": Service.fetch_all,
    "sessions": Service.sessions,
    "session": Service.session,
}
