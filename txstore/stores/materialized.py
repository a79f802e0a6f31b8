"""``Materialized``: the target store of a windowed or sessioned table, with the checks that
explain, in Kafka's terms, why each setting is needed."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, replace
from typing import Any, Final

from txstore.codecs import ValueFormat
from txstore.errors import InvalidArgumentError, InvalidTypeError
from txstore.stores.builders import (
    SessionBytesStoreSupplier,
    SessionStoreBuilder,
    WindowBytesStoreSupplier,
    WindowStoreBuilder,
)
from txstore.stores.serdes import Serde, Serdes
from txstore.stores.windowed_serdes import (
    SessionWindowedSerde,
    TimeWindowedSerde,
    check_window_size,
)

__all__ = [
    "Materialized",
    "session_builder",
    "window_builder",
]


def _ms(value: object, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, _dt.timedelta):
        return value // _dt.timedelta(milliseconds=1)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{what} must be an int (ms) or a timedelta")
    return value


@dataclass(frozen=True)
class Materialized:
    """The store a windowed or sessioned table is materialized into (Kafka's
    ``Materialized``, with the settings a windowed topic cannot provide made explicit).

    ``retention``, ``segment_interval`` and ``format`` are required, and ``window_size`` for a
    windowed table (or its ``window_size`` argument); :func:`windowed_table` and
    :func:`sessioned_table` say which are missing and why. Durations are ``int`` ms or
    ``timedelta``. Serdes default to bytes; ``persistent=False`` (:meth:`in_memory`) builds an
    in-memory store, which needs no database.

    >>> m = Materialized.as_("views").with_retention(120_000).with_format(ValueFormat.PLAIN)
    >>> m.retention, m.window_size
    (120000, None)
    """

    name: str
    """The store's name."""
    key_serde: Serde[Any] | None = None
    """Serde of the key inside the window (``None``: bytes)."""
    value_serde: Serde[Any] | None = None
    """Serde of the values (``None``: bytes)."""
    retention: int | _dt.timedelta | None = None
    """How long windows or sessions are kept, in milliseconds (required)."""
    window_size: int | _dt.timedelta | None = None
    """A windowed table's window size in milliseconds (required there; none for sessions)."""
    segment_interval: int | _dt.timedelta | None = None
    """Segment interval in milliseconds (required: Kafka's default depends on the store)."""
    format: ValueFormat | None = None
    """The value format (required: a topic does not say which one its store used)."""
    retain_duplicates: bool = False
    """Window stores: keep every record of a ``(key, window)``."""
    persistent: bool = True
    """``False`` for an in-memory store."""
    transactional: bool = True
    """Whether writes are buffered until a commit (KIP-892)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgumentError("a materialized store needs a non-empty str name")
        for label in ("retention", "window_size", "segment_interval"):
            object.__setattr__(self, label, _ms(getattr(self, label), label))
        if self.format is not None:
            try:
                object.__setattr__(self, "format", ValueFormat(self.format))
            except ValueError:
                raise InvalidArgumentError(f"unknown value format {self.format!r}") from None
        for label in ("key_serde", "value_serde"):
            serde = getattr(self, label)
            if isinstance(serde, (TimeWindowedSerde, SessionWindowedSerde)):
                raise InvalidArgumentError(
                    f"{label} of the store is the serde of the key inside the window "
                    f"({serde.inner.name if serde.inner else 'its inner serde'}), not "
                    f"{serde.name}: the store keeps the window in its own key layout"
                )
            if serde is not None and not isinstance(serde, Serde):
                raise InvalidTypeError(f"{label} must be a serde, got {type(serde).__name__}")
        for label in ("retain_duplicates", "persistent", "transactional"):
            if not isinstance(getattr(self, label), bool):
                raise InvalidTypeError(f"{label} must be a bool")

    @classmethod
    def as_(cls, name: str) -> Materialized:
        """Kafka's ``Materialized.as(storeName)``."""
        return cls(name)

    def with_key_serde(self, key_serde: Serde[Any]) -> Materialized:
        """A copy with the store's key serde (the inner key, not the windowed serde)."""
        return replace(self, key_serde=key_serde)

    def with_value_serde(self, value_serde: Serde[Any]) -> Materialized:
        """A copy with the store's value serde."""
        return replace(self, value_serde=value_serde)

    def with_retention(self, retention: int | _dt.timedelta) -> Materialized:
        """A copy with the retention period (Kafka's ``withRetention``)."""
        return replace(self, retention=retention)

    def with_window_size(self, window_size: int | _dt.timedelta) -> Materialized:
        """A copy with the window size (windowed tables)."""
        return replace(self, window_size=window_size)

    def with_segment_interval(self, segment_interval: int | _dt.timedelta) -> Materialized:
        """A copy with the segment interval."""
        return replace(self, segment_interval=segment_interval)

    def with_format(self, format: ValueFormat) -> Materialized:
        """A copy with the store's value format."""
        return replace(self, format=format)

    def with_retain_duplicates(self, retain_duplicates: bool = True) -> Materialized:
        """A copy that keeps every record of a window under its own sequence number."""
        return replace(self, retain_duplicates=retain_duplicates)

    def in_memory(self) -> Materialized:
        """A copy that builds an in-memory store."""
        return replace(self, persistent=False)


def _why_retention(kind: str) -> str:
    if kind == "window":
        keeps = (
            "a window store keeps a window until the observed stream time passes its start by "
            "the retention period, and drops whole segments older than that; Kafka Streams "
            "derives it from the windows' size and grace period when it aggregates"
        )
    else:
        keeps = (
            "a session store keeps a session until the observed stream time passes its end by "
            "the retention period, and drops whole segments older than that; Kafka Streams "
            "derives it from the inactivity gap and grace period when it aggregates"
        )
    return (
        f"retention (Materialized.with_retention): {keeps}, but a table read back from a topic "
        "has no windows definition to derive it from, and the records it keeps depend on it"
    )


_WHY_WINDOW_SIZE: Final = (
    "window size (the window_size argument or Materialized.with_window_size): a windowed topic "
    "key holds only the window start, [key][L(start)] as TimeWindowedSerializer writes it (a "
    "window changelog key adds only a sequence number), so the window end, start + size, is "
    "not in the data; as KIP-300 says, the window size is required to initialize the time "
    "windowed serde because windowed records store only the window start, for space efficiency"
)


def _why_segments(retention: int | None) -> str:
    default = "max(retention / 2, 60000) ms"
    if retention is not None and retention >= 0:
        default += f", {max(retention // 2, 60_000)} for this retention"
    return (
        "segment interval (Materialized.with_segment_interval): expiry drops whole segments "
        "(segment id = timestamp / interval), so the interval decides which late records are "
        "kept or dropped; use the interval of the store that wrote the data (Kafka's Stores "
        f"default is {default})"
    )


def _why_format(kind: str) -> str:
    # Window and session stores both take every format (timestamped session stores are
    # txstore's: KIP-258 names one, Kafka never shipped it).
    formats = "PLAIN, TIMESTAMPED, HEADERS or PLAIN_HEADERS"
    return (
        "format (Materialized.with_format): topic and changelog values are plain, the timestamp "
        "and headers travel as record fields, and the store's format decides which of them it "
        f"keeps (the record converters of KIP-258 and KIP-1271); one of {formats}"
    )


def _missing(fn: str, name: str, reasons: list[str]) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{fn}: the materialized store {name!r} is missing what a windowed topic cannot "
        "provide:\n- " + "\n- ".join(reasons)
    )


def window_builder(
    materialized: object, window_size: int | _dt.timedelta | None
) -> WindowStoreBuilder[Any, Any]:
    """The window store builder ``windowed_table`` materializes into: ``materialized`` itself
    if it is one (its window size must match ``window_size``, when given), else one made of a
    :class:`Materialized` (serdes default to bytes). Opens nothing.

    Raises :class:`~txstore.errors.InvalidArgumentError` for a session store builder, two
    different window sizes, or a :class:`Materialized` missing a setting a windowed topic
    cannot provide (the message says why each is needed);
    :class:`~txstore.errors.InvalidTypeError` for anything else.
    """
    size = None if window_size is None else check_window_size(window_size)
    if isinstance(materialized, WindowStoreBuilder):
        have = materialized.supplier.window_size
        if size is not None and size != have:
            raise InvalidArgumentError(
                f"windowed_table: window_size={size} but the store {materialized.name!r} has "
                f"window size {have}; the window size is set once"
            )
        check_window_size(have)
        return materialized
    if isinstance(materialized, SessionStoreBuilder):
        raise InvalidArgumentError(
            f"windowed_table needs a window store; {materialized.name!r} is a session store "
            "(use sessioned_table)"
        )
    if not isinstance(materialized, Materialized):
        raise InvalidTypeError(
            "materialized must be a Materialized or a window store builder (Stores."
            f"window_store_builder...), got {type(materialized).__name__}"
        )
    m = materialized
    msize = None if m.window_size is None else check_window_size(m.window_size)
    if size is not None and msize is not None and size != msize:
        raise InvalidArgumentError(
            f"windowed_table: window_size={size} but Materialized {m.name!r} has window size "
            f"{msize}; the window size is set once"
        )
    size = size if size is not None else msize
    reasons = []
    if size is None:
        reasons.append(_WHY_WINDOW_SIZE)
    if m.retention is None:
        reasons.append(_why_retention("window"))
    if m.segment_interval is None:
        reasons.append(_why_segments(_ms(m.retention, "retention")))
    if m.format is None:
        reasons.append(_why_format("window"))
    if reasons:
        raise _missing("windowed_table", m.name, reasons)
    assert size is not None and m.format is not None
    supplier = WindowBytesStoreSupplier(
        m.name,
        m.persistent,
        m.format,
        _ms(m.retention, "retention"),  # type: ignore[arg-type]
        size,
        m.retain_duplicates,
        _ms(m.segment_interval, "segment_interval"),  # type: ignore[arg-type]
        m.transactional,
    )
    return WindowStoreBuilder(
        supplier, m.key_serde or Serdes.bytes(), m.value_serde or Serdes.bytes(), supplier.format
    )


def session_builder(materialized: object) -> SessionStoreBuilder[Any, Any]:
    """The session store builder ``sessioned_table`` materializes into: ``materialized``
    itself if it is one, else one made of a :class:`Materialized` (serdes default to bytes).
    Opens nothing.

    Raises :class:`~txstore.errors.InvalidArgumentError` for a window store builder, a
    :class:`Materialized` with a window size or ``retain_duplicates``, or one missing a
    setting (the message says why each is needed); :class:`~txstore.errors.InvalidTypeError`
    for anything else.
    """
    if isinstance(materialized, SessionStoreBuilder):
        return materialized
    if isinstance(materialized, WindowStoreBuilder):
        raise InvalidArgumentError(
            f"sessioned_table needs a session store; {materialized.name!r} is a window store "
            "(use windowed_table)"
        )
    if not isinstance(materialized, Materialized):
        raise InvalidTypeError(
            "materialized must be a Materialized or a session store builder (Stores."
            f"session_store_builder...), got {type(materialized).__name__}"
        )
    m = materialized
    if m.window_size is not None:
        raise InvalidArgumentError(
            f"sessioned_table: Materialized {m.name!r} has a window size, but sessions have "
            "none: each session's start and end are in its key, [key][L(end)][L(start)]"
        )
    if m.retain_duplicates:
        raise InvalidArgumentError(
            f"sessioned_table: Materialized {m.name!r} retains duplicates, which session "
            "stores do not (a session key is unique)"
        )
    reasons = []
    if m.retention is None:
        reasons.append(_why_retention("session"))
    if m.segment_interval is None:
        reasons.append(_why_segments(_ms(m.retention, "retention")))
    if m.format is None:
        reasons.append(_why_format("session"))
    if reasons:
        raise _missing("sessioned_table", m.name, reasons)
    assert m.format is not None
    supplier = SessionBytesStoreSupplier(
        m.name,
        m.persistent,
        m.format,
        _ms(m.retention, "retention"),  # type: ignore[arg-type]
        _ms(m.segment_interval, "segment_interval"),  # type: ignore[arg-type]
        m.transactional,
    )
    return SessionStoreBuilder(
        supplier, m.key_serde or Serdes.bytes(), m.value_serde or Serdes.bytes(), supplier.format
    )
