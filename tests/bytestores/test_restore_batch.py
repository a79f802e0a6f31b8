"""``BytesKeyValueStore.restore_batch`` and the engine's ``commit_rows``: the restore path that
writes changelog records and the offset in one transaction, past the overlay."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bytestores.test_kv_bytes import FLAVOURS, Env, committed
from txstore.errors import IllegalStateError, InvalidArgumentError, InvalidTypeError, OffsetError

pytestmark = pytest.mark.filterwarnings("error")


@pytest.fixture(params=FLAVOURS)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    e = Env(request.param, tmp_path)
    yield e
    e.close()


def test_the_last_record_of_a_key_wins_and_tombstones_delete(env: Env) -> None:
    s = env.store
    s.put_all([(b"a", b"old"), (b"gone", b"x"), (b"z", b"1")])
    s.commit(3)
    keys = [b"m", b"a", b"gone", b"m", b"b", b"b", b"never"]
    values: list[bytes | None] = [b"1", b"new", None, b"2", b"3", None, None]
    s.restore_batch(keys, values, 10)
    expected = [(b"a", b"new"), (b"m", b"2"), (b"z", b"1")]
    assert committed(s) == expected and list(s.all()) == expected
    assert s.committed_offset == 10
    s.restore_batch([], [], 10)  # nothing to write, the same offset: allowed
    if env.persistent:
        s = env.reopen()
    assert committed(s) == expected and s.committed_offset == 10


def test_many_records_in_random_order_into_an_empty_and_a_full_store(env: Env) -> None:
    import random

    rng = random.Random(5)
    keys = [rng.randbytes(rng.randint(1, 40)) for _ in range(3000)]
    env.store.restore_batch(keys, [k[::-1] for k in keys], 3000)  # an empty database: append
    more = [rng.randbytes(8) for _ in range(3000)] + keys[:100]
    env.store.restore_batch(more, [b"v"] * len(more), 6100)  # interleaved with what is there
    want = {k: k[::-1] for k in keys} | dict.fromkeys(more, b"v")
    assert committed(env.store) == sorted(want.items())


@pytest.mark.parametrize(
    ("keys", "values", "error", "text"),
    [
        ([b"ok", b""], [b"1", b"2"], InvalidArgumentError, "must not be empty"),
        ([b"ok", b"k" * 512], [b"1", b"2"], InvalidArgumentError, "above LMDB's maximum"),
        ([b"ok", "str"], [b"1", b"2"], InvalidTypeError, "key must be bytes"),
        ([b"ok", None], [b"1", b"2"], InvalidArgumentError, "must not be None"),
        ([b"ok", b"b"], [b"1", "2"], InvalidTypeError, "value must be bytes or None"),
        ([b"ok", b"b"], [b"1"], ValueError, "shorter"),  # columns of different lengths
    ],
)
def test_bad_records_are_refused_before_anything_is_written(
    env: Env, keys: Any, values: Any, error: type, text: str
) -> None:
    s = env.store
    s.put(b"a", b"1")
    s.commit(1)
    with pytest.raises(error, match=text):
        s.restore_batch(keys, values, 5)
    assert committed(s) == [(b"a", b"1")] and s.committed_offset == 1


def test_a_backwards_offset_or_staged_writes_are_refused(env: Env) -> None:
    s = env.store
    s.put(b"a", b"1")
    s.commit(7)
    with pytest.raises(OffsetError, match="backwards"):
        s.restore_batch([b"b"], [b"2"], 6)
    if env.transactional or not env.persistent:  # an overlay can hold staged writes
        s.put(b"c", b"3")
        if env.transactional:
            with pytest.raises(IllegalStateError, match="staged writes"):
                s.restore_batch([b"b"], [b"2"], 8)
            assert s.get(b"c") == b"3"  # the staged write is still there
            s.recover(7)
    assert committed(s)[:1] == [(b"a", b"1")] and s.committed_offset == 7
    assert s.read_committed().get(b"b") is None
