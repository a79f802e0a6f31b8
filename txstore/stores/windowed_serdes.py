"""Kafka's ``WindowedSerdes``, byte for byte: time-windowed keys ``[key][L(start)]`` (and, in a
window changelog, ``[key][L(start)][I(seq)]``) and session-windowed keys
``[key][L(end)][L(start)]`` (``docs/formats.md``). :mod:`txstore.runtime.windowed_tables` reads
windowed
topics and changelogs with them."""

from __future__ import annotations

import datetime as _dt
import logging
import re
from collections.abc import Mapping
from typing import Any, Final, Generic, TypeVar

from txstore import codecs
from txstore.errors import InvalidArgumentError, InvalidTypeError
from txstore.stores.serdes import Serde, Serdes, serde_by_name  # noqa: F401 (Serdes: the doctests)
from txstore.types import SessionWindow, TimeWindow, Windowed, check_long

__all__ = [
    "WINDOWED_INNER_CLASS_SERDE",
    "WINDOWED_INNER_DESERIALIZER_CLASS",
    "WINDOW_SIZE_MS_CONFIG",
    "SessionWindowedSerde",
    "TimeWindowedSerde",
    "WindowedSerdes",
    "check_window_size",
    "windowed_serde_by_name",
]

K = TypeVar("K")
#: Kafka's ``StreamsConfig.WINDOW_SIZE_MS_CONFIG``.
WINDOW_SIZE_MS_CONFIG: Final = "window.size.ms"
#: Kafka's ``TimeWindowedDeserializer.WINDOWED_INNER_DESERIALIZER_CLASS``; the value is a
#: registered serde name (txstore's counterpart of a class name) or a serde.
WINDOWED_INNER_DESERIALIZER_CLASS: Final = "windowed.inner.deserializer.class"
#: Kafka's deprecated ``StreamsConfig.WINDOWED_INNER_CLASS_SERDE``, still accepted.
WINDOWED_INNER_CLASS_SERDE: Final = "windowed.inner.class.serde"
_LONG_MAX: Final = 2**63 - 1
_log = logging.getLogger("txstore")
_SIZE_TWICE: Final = (
    "Window size should not be set in both the time windowed deserializer constructor and "
    "the window.size.ms config"
)
_SIZE_NEVER: Final = (
    "Window size needs to be set either through the time windowed deserializer constructor or "
    "the window.size.ms config but not both"
)


def check_window_size(value: object) -> int:
    """A window size in ms from an ``int`` or a ``timedelta``; it must be > 0."""
    if isinstance(value, _dt.timedelta):
        value = value // _dt.timedelta(milliseconds=1)
    size = check_long("window size", value)
    if size <= 0:
        raise InvalidArgumentError("Window size (sizeMs) must be larger than zero.")
    return size


def _resolve_inner(inner: object) -> Serde[Any] | None:
    if inner is None:
        return None
    if isinstance(inner, str):
        return serde_by_name(inner)
    if isinstance(inner, (TimeWindowedSerde, SessionWindowedSerde)):
        raise InvalidArgumentError(f"the inner serde of a windowed serde cannot be {inner.name}")
    if not isinstance(inner, Serde):
        raise InvalidTypeError(
            "an inner serde is a serde or a registered serde name, got " + type(inner).__name__
        )
    return inner


def _time_window(start: int, size: int) -> TimeWindow:
    """Kafka's ``WindowKeySchema.timeWindowForSize``: the end clamped to Long.MAX on overflow."""
    if start + size > _LONG_MAX:
        _log.warning("Warning: window end time was truncated to Long.MAX")
    return TimeWindow.for_size(start, size)


class _WindowedSerde(Generic[K]):
    """What both windowed serdes share: the inner serde and its configuration."""

    _kafka = ""  # Kafka's class name prefix: "TimeWindowed" or "SessionWindowed"

    def __init__(self, inner: Serde[K] | str | None = None) -> None:
        self._inner: Serde[K] | None = _resolve_inner(inner)

    @property
    def inner(self) -> Serde[K] | None:
        """The serde of the key inside the window (``None`` until configured)."""
        return self._inner

    def _inner_label(self) -> str:
        return "?" if self._inner is None else self._inner.name

    def _require_inner(self, role: str) -> Serde[K]:
        if self._inner is None:
            java = "Serializer" if role == "serializer" else "Deserializer"
            raise InvalidArgumentError(
                f"Inner {role} is `null`. User code must use constructor "
                f"`{self._kafka}{java}(final {java}<T> inner)` instead of the no-arg constructor "
                f"(here: {type(self).__name__}(inner, ...), or configure "
                f"{WINDOWED_INNER_DESERIALIZER_CLASS})."
            )
        return self._inner

    def _configured_inner(self, configs: Mapping[str, object]) -> Serde[K] | None:
        """Kafka's ``configureWindowInnerDeserializerClass``: the inner serde after ``configs``."""
        key = WINDOWED_INNER_DESERIALIZER_CLASS
        value = configs.get(key)
        if value is None and configs.get(WINDOWED_INNER_CLASS_SERDE) is not None:
            key, value = WINDOWED_INNER_CLASS_SERDE, configs[WINDOWED_INNER_CLASS_SERDE]
        configured = _resolve_inner(value)
        if configured is not None and self._inner is not None:
            if configured.name != self._inner.name:
                raise InvalidArgumentError(
                    f"Inner class deserializer set using constructor ({self._inner.name}) is "
                    f"different from the one set in {key} config ({configured.name})."
                )
            return self._inner
        if configured is None and self._inner is None:
            raise InvalidArgumentError(
                "Inner class deserializer should be set either via constructor or via the "
                f"{WINDOWED_INNER_DESERIALIZER_CLASS} config"
            )
        return self._inner if configured is None else configured

    def _key_bytes(self, value: object) -> tuple[bytes, int, int]:
        """``(inner key bytes, start, end)`` of a ``Windowed`` to serialize."""
        inner = self._require_inner("serializer")
        if not isinstance(value, Windowed):
            raise InvalidTypeError(f"a windowed serde needs a Windowed, got {type(value).__name__}")
        window = value.window
        if not isinstance(window, (TimeWindow, SessionWindow)):
            raise InvalidTypeError(
                f"a Windowed needs a TimeWindow or a SessionWindow, got {type(window).__name__}"
            )
        kb = inner.serialize(value.key)
        if kb is None:
            raise InvalidArgumentError(
                f"the inner serde {inner.name} turned {value.key!r} into null"
            )
        return kb, window.start, window.end

    def serialize_base_key(self, value: Windowed[K]) -> bytes | None:
        """The inner key alone (Kafka's ``serializeBaseKey``, used to partition on the base
        key: ``WindowedStreamPartitioner``).

        >>> SessionWindowedSerde(Serdes.string()).serialize_base_key(
        ...     Windowed("a", SessionWindow(0, 5)))
        b'a'
        """
        inner = self._require_inner("serializer")
        if value is None:
            raise InvalidArgumentError("a windowed key cannot be null")
        if not isinstance(value, Windowed):
            raise InvalidTypeError(f"a windowed serde needs a Windowed, got {type(value).__name__}")
        return inner.serialize(value.key)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    @property
    def name(self) -> str:
        raise NotImplementedError


class TimeWindowedSerde(_WindowedSerde[K]):
    """Kafka's ``WindowedSerdes.TimeWindowedSerde``: ``Windowed`` keys of time windows.

    ``serialize`` writes ``[inner key][L(start)]`` (``TimeWindowedSerializer``: no end, no
    sequence number); ``deserialize`` reads it back with the end set to ``start +
    window_size``, clamped to Long.MAX on overflow. With ``for_changelog=True`` (Kafka's
    ``forChangelog(true)``) ``deserialize`` reads window changelog keys ``[key][L(start)]
    [I(seq)]`` instead; as in Kafka this changes only the deserializer, so use
    :meth:`serialize_store_key` to build changelog keys. ``None`` and empty data deserialize
    to ``None``.

    The window size is set exactly once: in the constructor or through the
    ``window.size.ms`` config (:meth:`configure`), never both, never neither; otherwise
    ``InvalidArgumentError`` with Kafka's message. ``inner`` may be a registered serde name.

    >>> serde = TimeWindowedSerde(Serdes.string(), 60_000)
    >>> serde.name
    'time-windowed(string,60000)'
    >>> serde.deserialize(bytes.fromhex("6100000000000003e8"))
    Windowed(key='a', window=TimeWindow(start=1000, end=61000))
    >>> serde.deserialize(b"") is None
    True
    """

    _kafka = "TimeWindowed"

    def __init__(
        self,
        inner: Serde[K] | str | None = None,
        window_size: int | _dt.timedelta | None = None,
        *,
        for_changelog: bool = False,
    ) -> None:
        super().__init__(inner)
        self._size = None if window_size is None else check_window_size(window_size)
        if not isinstance(for_changelog, bool):
            raise InvalidTypeError("for_changelog must be a bool")
        self._changelog = for_changelog

    @property
    def name(self) -> str:
        """``time-windowed(<inner>,<size>)``, or ``time-windowed-changelog(...)``."""
        base = "time-windowed-changelog" if self._changelog else "time-windowed"
        size = "" if self._size is None else f",{self._size}"
        return f"{base}({self._inner_label()}{size})"

    @property
    def window_size(self) -> int | None:
        """The window size in ms (``None`` until set by :meth:`configure`)."""
        return self._size

    @property
    def is_changelog_topic(self) -> bool:
        """True if :meth:`deserialize` reads window changelog keys (with a sequence number)."""
        return self._changelog

    def for_changelog(self, is_changelog_topic: bool = True) -> TimeWindowedSerde[K]:
        """A copy of this serde reading changelog keys (or topic keys, with ``False``).

        >>> s = TimeWindowedSerde(Serdes.string(), 10).for_changelog()
        >>> s.deserialize(bytes.fromhex("61 0000000000000005 00000007"))
        Windowed(key='a', window=TimeWindow(start=5, end=15))
        """
        copy: TimeWindowedSerde[K] = TimeWindowedSerde(
            self._inner, self._size, for_changelog=bool(is_changelog_topic)
        )
        return copy

    def configure(self, configs: Mapping[str, object]) -> TimeWindowedSerde[K]:
        """Kafka's ``configure``: ``window.size.ms`` (an int, or a str parsed as a long) and
        ``windowed.inner.deserializer.class`` (or the deprecated
        ``windowed.inner.class.serde``: a registered serde name). Returns ``self``.

        >>> TimeWindowedSerde().configure(
        ...     {"window.size.ms": "500", "windowed.inner.class.serde": "long"}).name
        'time-windowed(long,500)'
        >>> TimeWindowedSerde(Serdes.long(), 500).configure({"window.size.ms": 1})
        ... # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        txstore.errors.InvalidArgumentError: Window size should not be set in both the time ...
        """
        raw = configs.get(WINDOW_SIZE_MS_CONFIG)
        configured: int | None
        if raw is None:
            configured = None
        elif isinstance(raw, str):
            if not re.fullmatch(r"[+-]?[0-9]+", raw):
                raise InvalidArgumentError(f"{WINDOW_SIZE_MS_CONFIG}={raw!r} is not a long")
            configured = int(raw)
        elif isinstance(raw, int) and not isinstance(raw, bool):
            configured = raw
        else:
            raise InvalidTypeError(
                f"{WINDOW_SIZE_MS_CONFIG} must be an int or a str, got {type(raw).__name__}"
            )
        if self._size is not None and configured is not None:
            raise InvalidArgumentError(_SIZE_TWICE)
        if self._size is None and configured is None:
            raise InvalidArgumentError(_SIZE_NEVER)
        size = self._size if configured is None else check_window_size(configured)
        self._inner = self._configured_inner(configs)
        self._size = size
        return self

    def serialize(self, value: Windowed[K] | None) -> bytes | None:
        """``[inner key][L(window start)]``; ``None`` gives ``None``.

        >>> TimeWindowedSerde(Serdes.integer(), 1).serialize(
        ...     Windowed(5, TimeWindow(0, 1))).hex()
        '000000050000000000000000'
        """
        self._require_inner("serializer")
        if value is None:
            return None
        kb, start, _ = self._key_bytes(value)
        return codecs.time_windowed_key(kb, start)

    def serialize_store_key(self, value: Windowed[K], seq: int = 0) -> bytes:
        """The window store and changelog key ``[inner key][L(start)][I(seq)]`` (Kafka's
        ``WindowKeySchema.toStoreKeyBinary``), what ``for_changelog`` serdes read.

        >>> TimeWindowedSerde(Serdes.string(), 10).serialize_store_key(
        ...     Windowed("a", TimeWindow(1000, 1010)), 1).hex()
        '6100000000000003e800000001'
        """
        if value is None:
            raise InvalidArgumentError("a windowed key cannot be null")
        kb, start, _ = self._key_bytes(value)
        return codecs.window_key(kb, start, seq)

    def deserialize(self, data: bytes | None) -> Windowed[K] | None:
        """The ``Windowed`` key of ``data``; ``None`` or empty data gives ``None``."""
        inner = self._require_inner("deserializer")
        if not data:
            return None
        if self._size is None:
            raise InvalidArgumentError(_SIZE_NEVER)
        if self._changelog:
            kb, start, _ = codecs.extract_window_key(data)
        else:
            kb, start = codecs.parse_time_windowed_key(data)
        key: Any = inner.deserialize(kb)
        return Windowed(key, _time_window(start, self._size))

    def __repr__(self) -> str:
        return f"<TimeWindowedSerde {self.name}>"


class SessionWindowedSerde(_WindowedSerde[K]):
    """Kafka's ``WindowedSerdes.SessionWindowedSerde``: ``[inner key][L(end)][L(start)]``.

    The session topic key and the session changelog key are the same bytes. ``None`` and
    empty data deserialize to ``None``.

    >>> serde = SessionWindowedSerde(Serdes.string())
    >>> serde.serialize(Windowed("a", SessionWindow(10, 20))).hex()
    '610000000000000014000000000000000a'
    >>> serde.deserialize(bytes.fromhex("610000000000000014000000000000000a"))
    Windowed(key='a', window=SessionWindow(start=10, end=20))
    """

    _kafka = "SessionWindowed"

    @property
    def name(self) -> str:
        """``session-windowed(<inner>)``."""
        return f"session-windowed({self._inner_label()})"

    def configure(self, configs: Mapping[str, object]) -> SessionWindowedSerde[K]:
        """Kafka's ``configure``: the inner serde from ``windowed.inner.deserializer.class``
        (or ``windowed.inner.class.serde``) when the constructor did not set one."""
        self._inner = self._configured_inner(configs)
        return self

    def serialize(self, value: Windowed[K] | None) -> bytes | None:
        """``[inner key][L(end)][L(start)]``; ``None`` gives ``None``."""
        self._require_inner("serializer")
        if value is None:
            return None
        kb, start, end = self._key_bytes(value)
        return codecs.session_key(kb, start, end)

    def deserialize(self, data: bytes | None) -> Windowed[K] | None:
        """The ``Windowed`` key of ``data``; ``None`` or empty data gives ``None``."""
        inner = self._require_inner("deserializer")
        if not data:
            return None
        kb, start, end = codecs.extract_session_key(data)
        key: Any = inner.deserialize(kb)
        return Windowed(key, SessionWindow(start, end))

    def __repr__(self) -> str:
        return f"<SessionWindowedSerde {self.name}>"


class WindowedSerdes:
    """Factories named after Kafka's ``WindowedSerdes``; a registered serde name plays the
    part of Kafka's ``Class<T>``.

    >>> WindowedSerdes.time_windowed_serde_from("string", 60_000).name
    'time-windowed(string,60000)'
    """

    @staticmethod
    def time_windowed_serde_from(
        inner: Serde[K] | str, window_size: int | _dt.timedelta
    ) -> TimeWindowedSerde[K]:
        """Kafka's ``timeWindowedSerdeFrom(Class<T>, long windowSize)``."""
        return TimeWindowedSerde(inner, window_size)

    @staticmethod
    def session_windowed_serde_from(inner: Serde[K] | str) -> SessionWindowedSerde[K]:
        """Kafka's ``sessionWindowedSerdeFrom(Class<T>)``."""
        return SessionWindowedSerde(inner)


_NAME = re.compile(
    r"(?P<kind>time-windowed|time-windowed-changelog|session-windowed)"
    r"\((?P<inner>[^,()]+)(?:,(?P<size>[0-9]+))?\)"
)


def windowed_serde_by_name(name: str) -> TimeWindowedSerde[Any] | SessionWindowedSerde[Any]:
    """The windowed serde a :attr:`~TimeWindowedSerde.name` describes (store metadata and
    tools record serdes by name); the inner serde must be registered.

    >>> windowed_serde_by_name("time-windowed-changelog(string,60000)")
    <TimeWindowedSerde time-windowed-changelog(string,60000)>
    """
    m = _NAME.fullmatch(name) if isinstance(name, str) else None
    if m is None:
        raise InvalidArgumentError(f"{name!r} is not the name of a windowed serde")
    kind, size = m["kind"], m["size"]
    if kind == "session-windowed":
        if size is not None:
            raise InvalidArgumentError(f"{name!r}: a session-windowed serde has no window size")
        return SessionWindowedSerde(m["inner"])
    return TimeWindowedSerde(
        m["inner"],
        None if size is None else int(size),
        for_changelog=kind == "time-windowed-changelog",
    )
