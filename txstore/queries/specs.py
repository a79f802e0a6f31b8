"""The application's stores as the query layer sees them: builder, kind and format.

A :class:`StoreSpec` wraps one store builder of an application's topology. It knows how to
open the store on a partition's task (active) or on a read-only database (standby), and how
the store describes itself to queries (the kind and format a queryable store type
``accepts``, and the HTTP API's ``/v1/stores``).
"""

from __future__ import annotations

from typing import Any

from txstore.errors import InvalidArgumentError, InvalidTypeError, UnsupportedOperationError
from txstore.queries.types import QueryableStoreTypes
from txstore.stores.builders import KeyValueStoreBuilder, SessionStoreBuilder, WindowStoreBuilder

__all__ = ["Builder", "StoreSpec"]

Builder = (
    KeyValueStoreBuilder[Any, Any] | WindowStoreBuilder[Any, Any] | SessionStoreBuilder[Any, Any]
)


class StoreSpec:
    """One store of the application: its builder, kind and format (what ``accepts`` sees)."""

    __slots__ = ("builder", "format", "kind", "name")

    def __init__(self, builder: Builder) -> None:
        if isinstance(builder, KeyValueStoreBuilder):
            self.kind = "key_value"
        elif isinstance(builder, WindowStoreBuilder):
            self.kind = "window"
        elif isinstance(builder, SessionStoreBuilder):
            self.kind = "session"
        else:
            raise InvalidTypeError(
                f"stores must be key-value, window or session store builders, got "
                f"{type(builder).__name__}"
            )
        if not builder.supplier.persistent:
            raise InvalidArgumentError(
                f"store {builder.name!r} is in-memory: an application's stores are persistent "
                "(their partitions move between instances through the state directory)"
            )
        self.builder = builder
        self.name = builder.name
        self.format = builder.format

    @property
    def key_serde(self) -> Any:
        """The store's key serde."""
        return self.builder.key_serde

    @property
    def value_serde(self) -> Any:
        """The store's value serde."""
        return self.builder.value_serde

    def open(self, task: Any) -> Any:
        """Open this store on ``task`` (before ``task.initialize()``)."""
        opener = getattr(task, f"{self.kind}_store", None)
        if opener is None:
            raise UnsupportedOperationError(
                f"store {self.name!r}: this txstore's Task cannot open {self.kind} stores yet"
            )
        return opener(self.builder)

    def open_readonly(self, db: Any) -> Any:
        """Open this store on a read-only database (a standby)."""
        opener = getattr(db, f"open_{self.kind}_store")
        return opener(self.builder)

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description (the HTTP API's ``/v1/stores``)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "format": self.format.name,
            "key_serde": self.key_serde.name,
            "value_serde": self.value_serde.name,
            "default_type": QueryableStoreTypes.default_for(self.kind, self.format).name,
        }
