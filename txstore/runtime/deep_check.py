"""``txstore check --deep``: every committed row of a store against what its changelog says the
store must hold, and every row against the rules of its format.

A store is the cache of its changelog (``docs/recovery.md``): at its committed offset ``O`` it
must hold what restoring the changelog's committed records ``[log start, O)`` gives. The deep
check replays those records with restore's rules into an *expected* map and diffs it with the
store's committed rows, read in one LMDB snapshot together with ``O``:

* **key-value stores**: last write wins per key, a tombstone deletes; the expected value is the
  record converter of the store's format (:func:`txstore.codecs.record_to_value`) applied to
  the record (plain value, record timestamp, record headers);
* **window and session stores**: the changelog keys are the store keys (``[key][start][seq]``,
  ``[key][end][start]``), so the same, plus expiry as the store does it: the observed stream
  time is the largest segment timestamp of the replayed records, segments below
  ``segment_id(observed - retention)`` are dropped, and their keys are expected to be absent.
  A row still present in such a segment (a store reopened after a crash forgets its observed
  time, so a late record may create an old segment again) is a note when its value is the
  changelog's, a difference otherwise. Window stores with ``retain_duplicates`` number their
  keys ``[key][ts][seq]`` with the store's counter while the changelog uses its own (they part
  after a ``put(key, None, ts)``, see :mod:`txstore.changelog.layer`): rows of one ``[key][ts]``
  whose values, in ``seq`` order, are the changelog's are *renumbered*, not different.

What cannot be told is skipped and counted, never reported: a key with a changelog record at
or after ``O`` (the store lags its changelog, and compaction may have removed the record the
store's value came from). Rows stored in an older format (legacy tiers of an upgraded
key-value store, old segments, values a lazy upgrade converted) are compared in the format
they are stored in, and also accepted as the upgrade conversion of the record in an older
format (counted as *upgraded*).

Every row is also checked against its format, changelog or not (a store without one, such as
a plain ``txstore.open`` store, gets only these): the value layout parses (``split_value``),
its headers decode, a window or session key parses under its key schema with non-negative
times (``start <= end`` for sessions, ``seq 0`` without ``retain_duplicates``) and lies in the
segment its timestamp belongs to.

Cost: one pass over the changelog and one over the store, a dict entry per changelog key
(``docs/cli.md`` gives the measured rate, ``perf/bench_check.py``).
"""

from __future__ import annotations

import contextlib
import operator
import struct
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import compress, repeat
from pathlib import Path
from typing import Any, Final

from txstore import codecs
from txstore.bytestores.adapters import ADAPTERS, UPGRADE_ORDER
from txstore.bytestores.segment_reads import read_all
from txstore.bytestores.upgrade import UpgradingBytesKeyValueStore
from txstore.changelog.log import FileChangelog
from txstore.codecs import ValueFormat
from txstore.engine.base import PartitionBase, Snapshot
from txstore.errors import TxStoreError
from txstore.runtime.catalog import RowDecoder, open_view, stored_format

__all__ = ["MAX_LISTED", "Finding", "StoreCheck", "check_store"]

#: Differences listed per store (all are counted; the rest are summed up in one finding).
MAX_LISTED: Final = 20

Record = tuple[bytes | None, int, bytes]
"""A changelog record as restore sees it: plain value (None: tombstone), timestamp, headers."""

_Q: Final = struct.Struct(">q")
_QI: Final = struct.Struct(">qi")
_QQ: Final = struct.Struct(">qq")
_SHOWN_BYTES: Final = 48
_FORMATS: Final = frozenset(f.value for f in ValueFormat)
#: What a key without a changelog record looks up (a tuple, so that rows convert as columns).
_NO_RECORD: Final[Record] = (None, -1, b"")
_FIRST, _SECOND, _THIRD = (operator.itemgetter(i) for i in range(3))


@dataclass
class Finding:
    """One difference of a store: ``what`` (``value differs``, ``row missing``, ``extra row``,
    ``bad row``...), the store key it concerns (None: the store as a whole) and a readable
    ``detail`` (key in hex and decoded, expected and found values)."""

    what: str
    key: bytes | None
    detail: str


@dataclass
class StoreCheck:
    """What the deep check of one store read and found."""

    rows: int = 0
    """Committed rows read (every tier and segment)."""
    verified: int = 0
    """Rows compared with the changelog and equal."""
    unverifiable: int = 0
    """Rows whose key has a changelog record at or after the store's offset (not compared)."""
    expired: int = 0
    """Rows equal to the changelog's but in a segment the replay expired (still present)."""
    renumbered: int = 0
    """Rows of a retain_duplicates window store whose ``[key][ts]`` holds the changelog's values
    under other sequence numbers (rows that also matched by key count as verified)."""
    upgraded: int = 0
    """Rows equal to the upgrade conversion of the changelog record in an older format."""
    changelog_records: int = 0
    """Changelog records replayed, every one read and CRC-checked (0: no changelog)."""
    has_changelog: bool = False
    replayed: bool = False
    """Whether the changelog was replayed (not when the store is ahead of it)."""
    changelog_error: str = ""
    """Why the changelog could not be replayed (damage): the rows got the format checks."""
    differences: int = 0
    """Every difference found, listed or not."""
    findings: list[Finding] = field(default_factory=list)
    """The first :data:`MAX_LISTED` differences, then one finding counting the rest."""


@dataclass
class _Replay:
    latest: dict[bytes, Record]  # the last record of each key before the store's offset
    later: set[bytes]  # keys with a record at or after it
    records: int


@dataclass
class _Diff:
    what: str
    key: bytes
    fmt: ValueFormat
    expected: bytes | None = None
    found: bytes | None = None
    why: str = ""


def _replay(log: FileChangelog, offset: int) -> _Replay:
    """Every committed record of ``log``: the last one of each key before ``offset``, and the
    keys written at or after it."""
    latest: dict[bytes, Record] = {}
    later: set[bytes] = set()
    records = 0
    with log.read_committed_batches(log.log_start_offset) as batches:
        for b in batches:
            n = len(b)
            records += n
            if n and b.offsets[-1] >= offset:
                cut = bisect_left(b.offsets, offset)
                later.update(b.keys[cut:])
                n = cut
            if n == len(b):
                latest.update(zip(b.keys, zip(b.values, b.timestamps, b.headers)))  # noqa: B905
            elif n:
                cols = (b.values[:n], b.timestamps[:n], b.headers[:n])
                latest.update(zip(b.keys[:n], zip(*cols)))  # noqa: B905
    return _Replay(latest, later, records)


def _records_to_values(
    fmt: ValueFormat, values: list[bytes | None], stamps: list[int], headers: list[bytes]
) -> list[bytes | None]:
    """:func:`txstore.codecs.records_to_values`, with a batch path for ``PLAIN_HEADERS``
    (which it converts record by record): ``varint(len(h)) h value``."""
    if fmt is not ValueFormat.PLAIN_HEADERS or not all(type(h) is bytes for h in headers):
        return codecs.records_to_values(fmt, values, stamps, headers)
    sizes: dict[int, bytes] = {}
    out: list[bytes | None] = []
    append = out.append
    for v, h in zip(values, headers, strict=True):
        if v is None:
            append(None)
            continue
        size = sizes.get(len(h))
        if size is None:
            size = sizes[len(h)] = codecs.encode_varint(len(h))
        append(b"".join((size, h, v)))
    return out


def _broken_headers(blobs: Iterable[bytes]) -> dict[bytes, str]:
    """The serialized headers among ``blobs`` that do not decode, with why."""
    broken: dict[bytes, str] = {}
    for blob in blobs:
        if blob:
            try:
                codecs.decode_headers(blob)
            except TxStoreError as exc:
                broken[blob] = str(exc)
    return broken


def _hex(raw: bytes | None) -> str:
    if raw is None:
        return "none"
    if len(raw) > _SHOWN_BYTES:
        return f"{raw[:_SHOWN_BYTES].hex()}... ({len(raw)} bytes)"
    return raw.hex() or "(empty)"


class _Store:
    """One store being checked: its layout, decoder, expected map and findings."""

    def __init__(self, meta: dict[str, Any], view: Any, limit: int) -> None:
        self.meta = meta
        self.kind: str = meta["kind"]
        self.store = view.store
        self.format: ValueFormat = stored_format(meta)
        self.legacy: list[tuple[bytes, ValueFormat]] = []
        if isinstance(self.store, UpgradingBytesKeyValueStore):
            self.legacy = [(db, fmt) for db, fmt, _ in self.store.legacy_tiers]
        self.retain = bool(meta.get("retain_duplicates", False))
        self.interval = int(meta.get("segment_interval") or 1)
        self.upgraded_kv = self.kind == "key_value" and "db" in meta
        self.limit = limit
        self.result = StoreCheck()
        self.diffs: list[_Diff] = []
        try:
            self.decoder: RowDecoder | None = RowDecoder(meta)
        except TxStoreError:
            self.decoder = None
        self.found: dict[bytes, tuple[bytes, ValueFormat]] = {}  # retain_duplicates only
        self.bad_keys: set[bytes] = set()  # keys of bad rows: never reported missing

    # -- the rows -----------------------------------------------------------------------------

    def tiers(self, snap: Snapshot) -> list[tuple[int | None, ValueFormat, list[Any]]]:
        """The store's databases as ``(segment id or None, format, committed rows)``."""
        st = self.store
        if self.kind == "key_value":
            dbs = [(st.db, self.format), *self.legacy]
            return [(None, fmt, read_all(snap.source(db))) for db, fmt in dbs]
        out: list[tuple[int | None, ValueFormat, list[Any]]] = []
        for k, v in read_all(snap.source(st.registry_db)):
            if len(k) != 8 or v is None or len(v) != 1 or v[0] not in _FORMATS:
                why = "not a segment id and a value format"
                self.add(_Diff("bad segment registry entry", k, self.format, found=v, why=why))
                continue
            sid = _Q.unpack(k)[0]
            out.append((sid, ValueFormat(v[0]), read_all(snap.source(st.segment_db(sid)))))
        return out

    def key_error(self, key: bytes, sid: int | None) -> str:
        """What is wrong with a window or session store key in segment ``sid`` ('' if
        nothing)."""
        try:
            if self.kind == "window":
                _, ts, seq = codecs.extract_window_key(key)
                if ts < 0:
                    return f"window start {ts} is negative"
                if seq < 0 or (seq and not self.retain):
                    return f"sequence number {seq} in a store without retain_duplicates"
                time, what = ts, "window start"
            else:
                _, start, time = codecs.extract_session_key(key)
                if start < 0 or time < start:
                    return f"session window [{start}, {time}] is not a window"
                what = "session end"
        except TxStoreError as exc:
            return str(exc)
        if sid is not None and time // self.interval != sid:
            return f"{what} {time} belongs to segment {time // self.interval}, not {sid}"
        return ""

    def keys_ok(self, keys: list[bytes], sid: int | None) -> bool:
        """Whether every key parses with sane times in segment ``sid`` (the fast path: with
        non-negative times, the smallest and largest tell the segment of all)."""
        width = 12 if self.kind == "window" else 16
        if min(map(len, keys)) < width:
            return False
        if self.kind == "window":
            unpack = _QI.unpack_from
            parsed = [unpack(k, len(k) - 12) for k in keys]
            times = list(map(_FIRST, parsed))
            seqs = list(map(_SECOND, parsed))
            if min(seqs) < 0 or (not self.retain and any(seqs)):
                return False
        else:
            unpack = _QQ.unpack_from
            parsed = [unpack(k, len(k) - 16) for k in keys]  # (end, start)
            times = list(map(_FIRST, parsed))
            starts = list(map(_SECOND, parsed))
            if min(starts) < 0 or not all(map(operator.le, starts, times)):
                return False
        lo, hi = min(times), max(times)
        return lo >= 0 and (sid is None or lo // self.interval == hi // self.interval == sid)

    def bad_rows(
        self,
        keys: list[bytes],
        values: list[bytes],
        fmt: ValueFormat,
        sid: int | None,
    ) -> dict[int, str]:
        """The rows that break their format or key schema: index -> what is wrong. The value
        layout parses (``split_values``, one C call), its headers decode (each distinct
        headers blob once), a window or session key parses into its segment."""
        bad: dict[int, str] = {}
        if not keys:
            return bad
        if self.kind != "key_value" and not self.keys_ok(keys, sid):
            for i, key in enumerate(keys):
                error = self.key_error(key, sid)
                if error:
                    bad[i] = error
        if fmt is ValueFormat.PLAIN:
            return bad
        parts: list[tuple[bytes, int | None, bytes] | None]
        try:
            parts = codecs.split_values(fmt, values)
        except TxStoreError:
            parts = []
            for i, value in enumerate(values):
                try:
                    parts.append(codecs.split_value(fmt, value))
                except TxStoreError as exc:
                    bad.setdefault(i, str(exc))
                    parts.append(None)
        broken = _broken_headers({p[2] for p in parts if p is not None})
        if broken:
            for i, part in enumerate(parts):
                if part is not None and part[2] in broken:
                    bad.setdefault(i, broken[part[2]])
        return bad

    # -- comparing ----------------------------------------------------------------------------

    def older_formats(self, fmt: ValueFormat) -> tuple[ValueFormat, ...]:
        """The formats a row stored in ``fmt`` may have been converted from by an upgrade:
        the older ones of its kind with an adapter to ``fmt`` (a timestamped session store
        has no upgrade from ``PLAIN_HEADERS``, nor the other way round)."""
        if self.kind == "key_value" and not self.upgraded_kv:
            return ()
        order = UPGRADE_ORDER[self.kind]
        older = order[: order.index(fmt)] if fmt in order else ()
        return tuple(old for old in older if (self.kind, old, fmt) in ADAPTERS)

    def matches(self, found: bytes, fmt: ValueFormat, rec: Record) -> int:
        """0: ``found`` is the record in ``fmt``; 1: it is its upgrade conversion from an
        older format; -1: neither."""
        value, ts, headers = rec
        if found == codecs.record_to_value(fmt, value, ts, headers):
            return 0
        for old in self.older_formats(fmt):
            try:
                converted = codecs.convert_value(
                    codecs.record_to_value(old, value, ts, headers), old, fmt
                )
            except TxStoreError:
                continue
            if converted == found:
                return 1
        return -1

    def add(self, diff: _Diff) -> None:
        self.diffs.append(diff)

    def compare(self, snap: Snapshot, replay: _Replay | None) -> None:
        """Check every row and diff the store with ``replay``."""
        min_live = None
        # The records no row was found for yet (every row takes its key's record out: one
        # dict operation a row); what is left at the end, live and not deleted, is missing.
        pending: dict[bytes, Record] = {}
        if replay is not None:
            min_live = self.min_live(replay.latest)
            pending = dict(replay.latest) if self.retain else replay.latest
        seen: set[bytes] = set()
        for sid, fmt, rows in self.tiers(snap):
            if self.legacy:  # a key-value store being upgraded: newer tiers hide older ones
                rows = [r for r in rows if r[0] not in seen]
                seen.update(k for k, _ in rows)
            if rows:
                expired = sid is not None and min_live is not None and sid < min_live
                self.compare_rows(sid, fmt, rows, replay, pending, expired)
        if replay is None:
            return
        for key, rec in pending.items():
            if rec[0] is None or key in replay.later or key in self.bad_keys:
                continue
            if not self.expired(key, min_live):
                exp = codecs.record_to_value(self.format, *rec)
                self.add(_Diff("row missing", key, self.format, expected=exp))
        if self.retain:
            self.forgive_renumbered(replay.latest, replay.later, min_live)

    def compare_rows(
        self,
        sid: int | None,
        fmt: ValueFormat,
        rows: list[tuple[bytes, bytes]],
        replay: _Replay | None,
        pending: dict[bytes, Record],
        expired: bool,
    ) -> None:
        """Check and compare the rows of one database (stored in ``fmt``; ``sid``: its
        segment, ``expired``: one the replay dropped); their keys leave ``pending``.

        Batch work for the rows equal to their changelog record in ``fmt`` (whose layout is
        then right by construction: only their keys and distinct headers are checked), a
        loop over the others."""
        res = self.result
        n = len(rows)
        res.rows += n
        keys = [k for k, _ in rows]
        values = [v for _, v in rows]
        if replay is None:
            for i, why in self.bad_rows(keys, values, fmt, sid).items():
                self.add(_Diff("bad row", keys[i], fmt, found=values[i], why=why))
            return
        recs = list(map(pending.pop, keys, repeat(_NO_RECORD)))
        stamps = list(map(_SECOND, recs))
        headers = list(map(_THIRD, recs))
        exp = _records_to_values(fmt, list(map(_FIRST, recs)), stamps, headers)
        equal = list(map(operator.eq, values, exp))
        others = [i for i in compress(range(n), map(operator.not_, equal))]
        bad = self.bad_rows([keys[i] for i in others], [values[i] for i in others], fmt, sid)
        bad = {others[j]: why for j, why in bad.items()}
        if self.kind != "key_value" and not self.keys_ok(keys, sid):
            for i in compress(range(n), equal):
                error = self.key_error(keys[i], sid)
                if error:
                    bad[i] = error
        if fmt.has_headers:  # the headers of the equal rows are their records': decode them
            broken = _broken_headers(set(compress(headers, equal)))
            if broken:
                for i in compress(range(n), equal):
                    if headers[i] in broken:
                        bad.setdefault(i, broken[headers[i]])
        for i, why in sorted(bad.items()):
            self.add(_Diff("bad row", keys[i], fmt, found=values[i], why=why))
            self.bad_keys.add(keys[i])
            if recs[i] is not _NO_RECORD:  # the record stays for a row of that key elsewhere
                pending[keys[i]] = recs[i]
        skip = set(bad)
        if not replay.later.isdisjoint(keys):
            later = {i for i, k in enumerate(keys) if k in replay.later and i not in skip}
            res.unverifiable += len(later)
            skip |= later
        same = sum(equal) - sum(1 for i in skip if equal[i])
        if expired:
            res.expired += same
        else:
            res.verified += same
        if self.retain:
            self.found.update(zip(keys, zip(values, repeat(fmt, n), strict=True), strict=True))
            for i in skip:
                del self.found[keys[i]]
        for i in others:
            if i in skip:
                continue
            key, value, rec = keys[i], values[i], recs[i]
            if rec is _NO_RECORD or rec[0] is None:
                why = (
                    "the changelog has no record of this key"
                    if rec is _NO_RECORD
                    else "its last changelog record before the store's offset deletes it"
                )
                self.add(_Diff("extra row", key, fmt, found=value, why=why))
            elif self.matches(value, fmt, rec) > 0:
                res.upgraded += 1
                if expired:
                    res.expired += 1
                else:
                    res.verified += 1
            else:
                why = "in an expired segment" if expired else ""
                self.add(_Diff("value differs", key, fmt, exp[i], value, why))

    def min_live(self, latest: dict[bytes, Record]) -> int | None:
        """The first live segment after replaying ``latest`` (None: a key-value store)."""
        if self.kind == "key_value":
            return None
        width = 12 if self.kind == "window" else 16
        observed = -1
        unpack = _Q.unpack_from
        for key in latest:
            if len(key) < width:
                why = f"too short for a {self.kind} store key"
                self.add(_Diff("bad changelog key", key, self.format, why=why))
                continue
            ts: int = unpack(key, len(key) - width)[0]
            if ts > observed:
                observed = ts
        segment_of: Callable[[int], int] = codecs.segment_id_function(self.interval)
        return segment_of(observed - int(self.meta["retention"]))

    def expired(self, key: bytes, min_live: int | None) -> bool:
        if min_live is None:
            return False
        width = 12 if self.kind == "window" else 16
        if len(key) < width:
            return True  # reported by min_live
        ts: int = _Q.unpack_from(key, len(key) - width)[0]
        return ts < 0 or ts // self.interval < min_live

    def forgive_renumbered(
        self, latest: dict[bytes, Record], later: set[bytes], min_live: int | None
    ) -> None:
        """Drop the differences of a retain_duplicates window ``[key][ts]`` whose rows hold the
        changelog's values in the same order under other sequence numbers."""
        prefixes = {d.key[:-4] for d in self.diffs if d.what != "bad row"}
        prefixes -= {d.key[:-4] for d in self.diffs if d.what == "bad row"}
        prefixes -= {k[:-4] for k in later}  # cannot be told: keep the differences
        if not prefixes:
            return
        exp_groups: dict[bytes, list[bytes]] = {p: [] for p in prefixes}
        for key, rec in latest.items():
            group = exp_groups.get(key[:-4])
            if group is not None and rec[0] is not None:
                group.append(key)
        found_groups: dict[bytes, list[bytes]] = {p: [] for p in prefixes}
        for key in self.found:
            group = found_groups.get(key[:-4])
            if group is not None:
                group.append(key)
        forgiven: set[bytes] = set()
        for prefix, exp_keys in exp_groups.items():
            got = sorted(found_groups[prefix])
            if self.expired(prefix + bytes(4), min_live) or len(got) != len(exp_keys):
                continue
            pairs = zip(got, sorted(exp_keys), strict=True)
            if all(self.matches(*self.found[g], latest[e]) >= 0 for g, e in pairs):
                forgiven.add(prefix)
        if forgiven:
            kept = [d for d in self.diffs if d.key[:-4] not in forgiven]
            self.result.renumbered += sum(
                1 for d in self.diffs if d.key[:-4] in forgiven and d.found is not None
            )
            self.diffs = kept

    # -- reporting ----------------------------------------------------------------------------

    def show_key(self, key: bytes) -> str:
        text = f"key {_hex(key)}"
        if self.decoder is not None:
            with contextlib.suppress(TxStoreError, ValueError, TypeError):
                text += f" ({self.decoder.key(key)!r})"
        return text

    def show_value(self, raw: bytes, fmt: ValueFormat) -> str:
        text = _hex(raw)
        if self.decoder is not None:
            try:
                obj = self.decoder.value(codecs.convert_value(raw, fmt, self.format))
                text = f"{obj!r} ({text})"
            except (TxStoreError, ValueError, TypeError):
                pass
        return text

    def findings(self) -> list[Finding]:
        out: list[Finding] = []
        for d in self.diffs[: self.limit]:
            parts = [self.show_key(d.key)]
            if d.what.startswith("bad "):
                parts.append(f"{d.why}; value {_hex(d.found)}")
            else:
                if d.what != "extra row":
                    assert d.expected is not None
                    parts.append(f"expected {self.show_value(d.expected, d.fmt)}")
                if d.found is not None:
                    parts.append(f"found {self.show_value(d.found, d.fmt)}")
                else:
                    parts.append("found no row")
                if d.why:
                    parts.append(d.why)
            out.append(Finding(d.what, d.key, ": ".join(parts[:1]) + ": " + ", ".join(parts[1:])))
        rest = len(self.diffs) - self.limit
        if rest > 0:
            out.append(Finding("more differences", None, f"{rest} more not listed"))
        return out


def check_store(
    part: PartitionBase, name: str, log_dir: Path | None, *, limit: int = MAX_LISTED
) -> StoreCheck:
    """The deep check of store ``name`` of ``part`` (see the module docstring) against the
    changelog in ``log_dir`` (None, or a missing directory: format checks only). The store's
    rows and committed offset are read in one snapshot, taken before the changelog is opened
    (a task commits its changelog first, so the changelog then holds everything the store
    committed). A store ahead of its changelog, or whose changelog cannot be read
    (``changelog_error``), gets the format checks only. Raises
    :class:`~txstore.errors.TxStoreError` for a store that cannot be read.
    """
    meta = part.store_meta(name)
    with part.snapshot() as snap, open_view(part, name, snap) as view:
        assert meta is not None  # open_view raised otherwise
        store = _Store(meta, view, limit)
        offset = snap.committed_offset(name) or 0
        replay = None
        if log_dir is not None and log_dir.is_dir():
            store.result.has_changelog = True
            try:
                with FileChangelog(log_dir, readonly=True) as log:
                    if offset <= log.committed_end_offset:
                        replay = _replay(log, offset)
                        store.result.changelog_records = replay.records
                        store.result.replayed = True
            except TxStoreError as exc:  # the rows still get their format checks
                replay = None
                store.result.changelog_error = str(exc)
        store.compare(snap, replay)
    store.result.differences = len(store.diffs)
    store.result.findings = store.findings()
    return store.result
