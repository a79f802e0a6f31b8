"""Typed stores: serdes applied once, value formats, the key-value, window and session store
classes, Kafka's ``Stores`` factories and builders, and the one function that assembles a
store's stack of layers (:mod:`txstore.stores.assembly`).

May import: ``txstore.changelog``, ``txstore.bytestores`` and below.
"""

from txstore.stores.builders import (
    KeyValueStoreBuilder,
    KeyValueStoreSupplier,
    SessionBytesStoreSupplier,
    SessionStoreBuilder,
    WindowBytesStoreSupplier,
    WindowStoreBuilder,
)
from txstore.stores.factories import Stores

__all__ = [
    "KeyValueStoreBuilder",
    "KeyValueStoreSupplier",
    "SessionBytesStoreSupplier",
    "SessionStoreBuilder",
    "Stores",
    "WindowBytesStoreSupplier",
    "WindowStoreBuilder",
]
