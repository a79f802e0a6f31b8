"""Format adapters and the upgrade order of value formats.

A store's bytes are kept in its *stored* format (the supplier's, or the format of the data on
disk); it is used in another, the *used* format (the builder's). Between the two, values are
converted on every read and write, as Kafka Streams' adapter stores do. txstore has no class per
adapter: a typed store holds one :class:`FormatAdapter`, found by :func:`find_adapter` from
``(kind, stored, used)``. Each Kafka adapter is a named constant of this module, so that
``PlainToHeadersWindowStoreAdapter.to_stored(raw)`` is the conversion Kafka's class of that name
does on ``put`` and ``from_stored`` the one it does on reads:

========================================================  =============  =============  =======
Kafka adapter                                             stored         used           kind
========================================================  =============  =============  =======
``KeyValueToTimestampedKeyValueByteStoreAdapter``         PLAIN          TIMESTAMPED    kv
``PlainToHeadersStoreAdapter``                            PLAIN          HEADERS        kv
``TimestampedToHeadersStoreAdapter``                      TIMESTAMPED    HEADERS        kv
``WindowToTimestampedWindowByteStoreAdapter``             PLAIN          TIMESTAMPED    window
``PlainToHeadersWindowStoreAdapter``                      PLAIN          HEADERS        window
``TimestampedToHeadersWindowStoreAdapter``                TIMESTAMPED    HEADERS        window
``PlainToPlainHeadersWindowStoreAdapter``                 PLAIN          PLAIN_HEADERS  window
``TimestampedToPlainHeadersWindowStoreAdapter``           TIMESTAMPED    PLAIN_HEADERS  window
``TimestampedHeadersToPlainHeadersWindowStoreAdapter``    HEADERS        PLAIN_HEADERS  window
``SessionToHeadersStoreAdapter``                          PLAIN          PLAIN_HEADERS  session
``SessionToTimestampedSessionByteStoreAdapter`` (*)       PLAIN          TIMESTAMPED    session
``PlainToHeadersSessionStoreAdapter`` (*)                 PLAIN          HEADERS        session
``TimestampedToHeadersSessionStoreAdapter`` (*)           TIMESTAMPED    HEADERS        session
``PlainHeadersToHeadersSessionStoreAdapter`` (*)          PLAIN_HEADERS  HEADERS        session
========================================================  =============  =============  =======

(*) Kafka has no timestamped session store (KIP-258 names one, no release ships it), hence no
such adapter: these four are txstore's, named after their window counterparts.

Reads add what the stored format lacks (timestamp -1, empty headers) and drop what the used
format has no room for; writes do the reverse. The same relation orders **upgrades** of data on
disk: a format may only be replaced by a later one of its kind (:data:`UPGRADE_ORDER`); the
reverse is a downgrade and is refused, because it would drop timestamps or headers. An upgrade
also needs an adapter between the two formats: session stores have none between
``TIMESTAMPED`` and ``PLAIN_HEADERS``, since either way would drop the timestamp (which a
timestamped session store exists to keep) or the headers; both upgrade to ``HEADERS``.

>>> PlainToPlainHeadersWindowStoreAdapter.from_stored(b"v").hex()
'0076'
>>> TimestampedToPlainHeadersWindowStoreAdapter.to_stored(bytes.fromhex("0076")).hex()
'ffffffffffffffff76'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from txstore.codecs import ValueConverter, ValueFormat, value_converter
from txstore.errors import ConfigConflictError, InvalidArgumentError

__all__ = [
    "ADAPTERS",
    "UPGRADE_ORDER",
    "FormatAdapter",
    "KeyValueToTimestampedKeyValueByteStoreAdapter",
    "PlainHeadersToHeadersSessionStoreAdapter",
    "PlainToHeadersSessionStoreAdapter",
    "PlainToHeadersStoreAdapter",
    "PlainToHeadersWindowStoreAdapter",
    "PlainToPlainHeadersWindowStoreAdapter",
    "SessionToHeadersStoreAdapter",
    "SessionToTimestampedSessionByteStoreAdapter",
    "StoreKind",
    "TimestampedHeadersToPlainHeadersWindowStoreAdapter",
    "TimestampedToHeadersSessionStoreAdapter",
    "TimestampedToHeadersStoreAdapter",
    "TimestampedToHeadersWindowStoreAdapter",
    "TimestampedToPlainHeadersWindowStoreAdapter",
    "WindowToTimestampedWindowByteStoreAdapter",
    "check_upgrade",
    "find_adapter",
]

StoreKind = Literal["key_value", "window", "session"]

PLAIN, TIMESTAMPED, HEADERS, PLAIN_HEADERS = (
    ValueFormat.PLAIN,
    ValueFormat.TIMESTAMPED,
    ValueFormat.HEADERS,
    ValueFormat.PLAIN_HEADERS,
)

#: The formats of each store kind, oldest first. Data may be upgraded along this order only.
#: For window stores the plain window store with headers (``PLAIN_HEADERS``, the
#: WindowStoreWithHeaders proposal) comes last: it replaces the timestamped-with-headers layout
#: and saves the 8-byte timestamp of every record. For session stores the timestamped formats
#: come from this release (Kafka shipped only ``PLAIN`` and ``PLAIN_HEADERS``); ``HEADERS``
#: carries both a timestamp and headers, so it comes last. ``TIMESTAMPED`` -> ``PLAIN_HEADERS``
#: has no adapter (it would drop the timestamp) and is refused like a downgrade.
UPGRADE_ORDER: Final[dict[str, tuple[ValueFormat, ...]]] = {
    "key_value": (PLAIN, TIMESTAMPED, HEADERS),
    "window": (PLAIN, TIMESTAMPED, HEADERS, PLAIN_HEADERS),
    "session": (PLAIN, TIMESTAMPED, PLAIN_HEADERS, HEADERS),
}


@dataclass(frozen=True, slots=True)
class FormatAdapter:
    """Converts values between a store's stored format and the format it is used in."""

    name: str
    kind: str
    stored: ValueFormat
    used: ValueFormat

    #: The write side: a value of the used format, as stored. O(len(raw)).
    to_stored: ValueConverter = field(repr=False, compare=False)

    #: The read side: a stored value, in the used format. O(len(raw)).
    from_stored: ValueConverter = field(repr=False, compare=False)


def _adapter(name: str, kind: str, stored: ValueFormat, used: ValueFormat) -> FormatAdapter:
    # The two conversions are resolved once here (value_converter), so an adapted store's
    # reads and writes call a function specialised to the pair of formats.
    return FormatAdapter(
        name, kind, stored, used, value_converter(used, stored), value_converter(stored, used)
    )


KeyValueToTimestampedKeyValueByteStoreAdapter: Final = _adapter(
    "KeyValueToTimestampedKeyValueByteStoreAdapter", "key_value", PLAIN, TIMESTAMPED
)
PlainToHeadersStoreAdapter: Final = _adapter(
    "PlainToHeadersStoreAdapter", "key_value", PLAIN, HEADERS
)
TimestampedToHeadersStoreAdapter: Final = _adapter(
    "TimestampedToHeadersStoreAdapter", "key_value", TIMESTAMPED, HEADERS
)
WindowToTimestampedWindowByteStoreAdapter: Final = _adapter(
    "WindowToTimestampedWindowByteStoreAdapter", "window", PLAIN, TIMESTAMPED
)
PlainToHeadersWindowStoreAdapter: Final = _adapter(
    "PlainToHeadersWindowStoreAdapter", "window", PLAIN, HEADERS
)
TimestampedToHeadersWindowStoreAdapter: Final = _adapter(
    "TimestampedToHeadersWindowStoreAdapter", "window", TIMESTAMPED, HEADERS
)
PlainToPlainHeadersWindowStoreAdapter: Final = _adapter(
    "PlainToPlainHeadersWindowStoreAdapter", "window", PLAIN, PLAIN_HEADERS
)
TimestampedToPlainHeadersWindowStoreAdapter: Final = _adapter(
    "TimestampedToPlainHeadersWindowStoreAdapter", "window", TIMESTAMPED, PLAIN_HEADERS
)
TimestampedHeadersToPlainHeadersWindowStoreAdapter: Final = _adapter(
    "TimestampedHeadersToPlainHeadersWindowStoreAdapter", "window", HEADERS, PLAIN_HEADERS
)
SessionToHeadersStoreAdapter: Final = _adapter(
    "SessionToHeadersStoreAdapter", "session", PLAIN, PLAIN_HEADERS
)
SessionToTimestampedSessionByteStoreAdapter: Final = _adapter(
    "SessionToTimestampedSessionByteStoreAdapter", "session", PLAIN, TIMESTAMPED
)
PlainToHeadersSessionStoreAdapter: Final = _adapter(
    "PlainToHeadersSessionStoreAdapter", "session", PLAIN, HEADERS
)
TimestampedToHeadersSessionStoreAdapter: Final = _adapter(
    "TimestampedToHeadersSessionStoreAdapter", "session", TIMESTAMPED, HEADERS
)
PlainHeadersToHeadersSessionStoreAdapter: Final = _adapter(
    "PlainHeadersToHeadersSessionStoreAdapter", "session", PLAIN_HEADERS, HEADERS
)

#: Every adapter, by ``(kind, stored, used)``.
ADAPTERS: Final[dict[tuple[str, ValueFormat, ValueFormat], FormatAdapter]] = {
    (a.kind, a.stored, a.used): a
    for a in (
        KeyValueToTimestampedKeyValueByteStoreAdapter,
        PlainToHeadersStoreAdapter,
        TimestampedToHeadersStoreAdapter,
        WindowToTimestampedWindowByteStoreAdapter,
        PlainToHeadersWindowStoreAdapter,
        TimestampedToHeadersWindowStoreAdapter,
        PlainToPlainHeadersWindowStoreAdapter,
        TimestampedToPlainHeadersWindowStoreAdapter,
        TimestampedHeadersToPlainHeadersWindowStoreAdapter,
        SessionToHeadersStoreAdapter,
        SessionToTimestampedSessionByteStoreAdapter,
        PlainToHeadersSessionStoreAdapter,
        TimestampedToHeadersSessionStoreAdapter,
        PlainHeadersToHeadersSessionStoreAdapter,
    )
}


def check_format(kind: str, fmt: ValueFormat, name: str = "") -> ValueFormat:
    """``fmt`` if stores of ``kind`` have that format, else ``InvalidArgumentError``."""
    order = UPGRADE_ORDER.get(kind)
    if order is None:
        raise InvalidArgumentError(f"unknown store kind {kind!r}")
    if isinstance(fmt, bool) or fmt not in set(ValueFormat):
        raise InvalidArgumentError(
            f"unknown value format {fmt!r}: one of " + ", ".join(f.name for f in ValueFormat)
        )
    if fmt not in order:
        what = f"store {name!r}" if name else f"a {kind} store"
        raise InvalidArgumentError(
            f"{what} cannot have the {ValueFormat(fmt).name} format; {kind} stores are "
            + ", ".join(f.name for f in order)
        )
    return ValueFormat(fmt)


def find_adapter(
    kind: str, stored: ValueFormat, used: ValueFormat, name: str = ""
) -> FormatAdapter | None:
    """The adapter between ``stored`` and ``used`` for a store of ``kind``; None if they are
    the same format. A ``used`` format older than ``stored`` raises ``InvalidArgumentError``
    (the adapter would drop timestamps or headers on every read).

    >>> find_adapter("window", ValueFormat.HEADERS, ValueFormat.PLAIN_HEADERS).name
    'TimestampedHeadersToPlainHeadersWindowStoreAdapter'
    """
    check_format(kind, stored, name)
    check_format(kind, used, name)
    if stored == used:
        return None
    adapter = ADAPTERS.get((kind, stored, used))
    if adapter is None:
        raise InvalidArgumentError(
            f"store {name!r} keeps {stored.name} values and cannot be used as a {used.name} "
            "store: downgrades are not supported (they would drop timestamps or headers)"
        )
    return adapter


def check_upgrade(kind: str, name: str, on_disk: ValueFormat, asked: ValueFormat) -> bool:
    """Whether reopening ``name`` (data in ``on_disk``) in ``asked`` is an upgrade (True), no
    change (False), or a downgrade (``ConfigConflictError``)."""
    order = UPGRADE_ORDER[kind]
    check_format(kind, asked, name)
    if on_disk == asked:
        return False
    if (
        on_disk in order
        and order.index(asked) > order.index(on_disk)
        and (kind, on_disk, asked) in ADAPTERS
    ):
        return True
    raise ConfigConflictError(
        f"store {name!r} holds {on_disk.name} data and cannot be reopened as {asked.name}: "
        "downgrades are not supported (they would drop timestamps or headers). Open it with "
        f"a {on_disk.name} (or later) supplier, or use another store name"
    )
