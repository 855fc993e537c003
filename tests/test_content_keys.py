"""Content keys and the memo that serve per-item caches (token counts, anchor hashes)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memstack import (
    EncryptedSession,
    PassthroughSession,
    SessionLayer,
    SlidingWindowSession,
    TTLSession,
)
from memstack.backends import open_backend
from memstack.compaction.records import item_hash
from memstack.content_keys import Memo, content_key, known_keys, note_key
from memstack.crypto import generate_key
from memstack.tokens import TokenCounter, item_digest


def test_equal_content_gives_equal_keys_and_any_change_a_new_one() -> None:
    item = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x": [1, 2]}'}
    assert content_key(item) == content_key(dict(item))
    for changed in (
        {**item, "arguments": '{"x": [1, 3]}'},
        {**item, "call_id": "c2"},
        {**item, "extra": None},
        {**item, "arguments": {"x": [1, 2]}},
    ):
        assert content_key(changed) != content_key(item)


def test_values_marshal_cannot_write_still_get_a_key() -> None:
    when = datetime(2026, 1, 2, tzinfo=UTC)
    assert content_key({"at": when}) == content_key({"at": when})
    assert content_key({"at": when}) != content_key({"at": datetime(2026, 1, 3, tzinfo=UTC)})


def test_memo_computes_once_per_content_and_stays_bounded() -> None:
    calls: list[Any] = []
    memo: Memo[int] = Memo(3)

    def compute(item: Any) -> int:
        calls.append(item["n"])
        return int(item["n"]) * 10

    assert [memo.get_or_compute({"n": n}, compute) for n in (1, 2, 1, 1)] == [10, 20, 10, 10]
    assert calls == [1, 2]
    for n in range(3, 10):
        memo.get_or_compute({"n": n}, compute)
    assert len(memo) == 3
    memo.get_or_compute({"n": 1}, compute)  # evicted long ago: computed again
    assert calls[-1] == 1


def test_memo_size_zero_caches_nothing() -> None:
    memo: Memo[int] = Memo(0)
    calls: list[int] = []
    for _ in range(3):
        memo.get_or_compute({"n": 1}, lambda item: calls.append(1) or 1)
    assert len(calls) == 3 and len(memo) == 0


def test_memoised_hashes_stay_canonical() -> None:
    """The anchors every process agrees on: key order and the memo change nothing."""
    a = {"role": "user", "content": "hi", "id": "m1"}
    b = {"id": "m1", "content": "hi", "role": "user"}
    assert content_key(a) != content_key(b)  # two cache entries ...
    assert item_hash(a) == item_hash(b) == item_hash(dict(b))  # ... one canonical hash
    assert item_digest(a) == item_digest(b)
    assert item_hash({**a, "content": "ho"}) != item_hash(a)


def test_memo_shared_by_threads() -> None:
    memo: Memo[int] = Memo(50)
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(2000):
                n = (i + offset) % 80
                assert memo.get_or_compute({"n": n}, lambda item: int(item["n"])) == n
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(memo) == 50


def test_noted_keys_answer_only_inside_the_block_and_only_for_that_object() -> None:
    item, twin = {"role": "user", "content": "hi"}, {"role": "user", "content": "hi"}
    fake = b"k" * 16
    note_key(item, fake)  # outside a block: ignored
    assert content_key(item) != fake
    with known_keys():
        note_key(item, fake)
        assert content_key(item) == fake
        assert content_key(twin) == content_key(dict(item))  # another object: hashed
    assert content_key(item) != fake


class Louder(SessionLayer):
    """A user's layer that alters, in place, the items it reads from below."""

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[Any]:
        items = await self.inner.get_items(limit)
        for item in items:
            if isinstance(item.get("content"), str):
                item["content"] += " and then a great many more words" * 20
        return items


class LouderPassthrough(PassthroughSession):
    """A user's layer built on a memstack one, altering in place what it reads from below."""

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[Any]:
        return await Louder.get_items(self, limit, wrapper=wrapper)  # type: ignore[arg-type]


@pytest.mark.parametrize("altering", [Louder, LouderPassthrough])
async def test_a_window_counts_what_a_layer_below_it_altered(
    tmp_path: Path, altering: type[SessionLayer]
) -> None:
    """Keys noted by encryption must not outlive an item's change by a user's layer,
    nor by a subclass of a memstack layer: ``alters_what_it_reads = False`` is the promise
    of the class that sets it, and a subclass may alter what it reads."""
    store, key = open_backend(f"sqlite:///{tmp_path / 'k.db'}", "s1"), generate_key()
    items = [{"role": "user", "content": f"short question {n}"} for n in range(40)]

    def window(below: Any) -> SlidingWindowSession:
        encrypted = EncryptedSession(TTLSession(store, ttl=3600), key=key)
        return SlidingWindowSession(below(encrypted), max_tokens=2000, model="gpt-4.1")

    plain = window(lambda encrypted: encrypted)
    await plain.add_items(items)  # type: ignore[arg-type]
    assert len(await plain.get_items()) == 40  # short items: all fit, and are counted so
    louder = window(altering)
    assert not louder.reads_unaltered()
    for _ in range(2):  # the second read reopens envelopes it has seen
        view = await louder.get_items()
        assert 0 < len(view) < 40
        assert TokenCounter("gpt-4.1").count_items(view) <= 2000
    store.close()
