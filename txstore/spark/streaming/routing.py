"""Routing: every record to the partition that owns its key, as Kafka's default partitioner.

The partition of a record is ``toPositive(murmur2(serialized key)) % num_partitions``, computed
on an Arrow batch at a time: the key column is serialized once (a string column is already its
UTF-8 bytes, a binary column its bytes; any other column goes through the key serde) and hashed
by one C call (:func:`txstore.codecs.partitions_for_keys`), so there is no Python UDF per row.

>>> import pyarrow as pa
>>> from txstore.stores.serdes import Serdes
>>> batch = pa.record_batch({"user": ["alice", "bob", "carol"]})
>>> partitions(batch, "user", Serdes.string(), 4).to_pylist()
[1, 2, 2]
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from txstore.codecs import partitions_for_keys
from txstore.errors import InvalidArgumentError, SerializationError
from txstore.stores.serdes import BytesSerde, Serde, StringSerde

__all__ = ["PARTITION_COLUMN", "partitions", "serialized_keys"]

#: The column that routing adds to every record (dropped before the processor sees it).
PARTITION_COLUMN = "__txstore_partition"


def serialized_keys(batch: pa.RecordBatch, key: str, serde: Serde[Any]) -> list[bytes]:
    """The serialized key of every row of ``batch``: the bytes Kafka's partitioner hashes.

    Raises :class:`~txstore.errors.InvalidArgumentError` for a missing column and
    :class:`~txstore.errors.SerializationError` for a null key or one the serde refuses."""
    if key not in batch.schema.names:
        raise InvalidArgumentError(
            f"the key column {key!r} is not in the input (columns: {batch.schema.names})"
        )
    column = batch.column(key)
    if column.null_count:
        raise SerializationError(
            f"key column {key!r} holds {column.null_count} null key(s): Kafka's partitioner "
            "needs a key for every record; filter or fill them before the stateful step"
        )
    kind = column.type
    if isinstance(serde, StringSerde) and pa.types.is_string(kind):
        return column.cast(pa.binary()).to_pylist()  # type: ignore[no-any-return]  # UTF-8 already: the serde's own bytes
    if isinstance(serde, BytesSerde) and pa.types.is_binary(kind):
        return column.to_pylist()  # type: ignore[no-any-return]
    out: list[bytes] = []
    for value in column.to_pylist():
        try:
            data = serde.serialize(value)
        except Exception as exc:
            raise SerializationError(
                f"key column {key!r}: the key serde {type(serde).__name__} refused "
                f"{value!r} ({exc})"
            ) from exc
        if data is None:
            raise SerializationError(
                f"key column {key!r}: the key serde made no bytes of {value!r}"
            )
        out.append(data)
    return out


def partitions(batch: pa.RecordBatch, key: str, serde: Serde[Any], num_partitions: int) -> pa.Array:
    """The partition of every row of ``batch`` (an ``int32`` Arrow array)."""
    keys = serialized_keys(batch, key, serde)
    return pa.array(partitions_for_keys(keys, num_partitions), type=pa.int32())


def add_partition_column(
    batch: pa.RecordBatch, key: str, serde: Serde[Any], num_partitions: int
) -> pa.RecordBatch:
    """``batch`` with :data:`PARTITION_COLUMN` appended."""
    column = partitions(batch, key, serde, num_partitions)
    return pa.RecordBatch.from_arrays(
        [*batch.columns, column], names=[*batch.schema.names, PARTITION_COLUMN]
    )
