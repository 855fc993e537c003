"""Content keys, which the process cache keys per-item values by (counts, anchor hashes)."""

from __future__ import annotations

import hashlib
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
    cache,
)
from memstack.backends import open_backend
from memstack.compaction.records import item_hash
from memstack.content_keys import content_key, derived_key, keyed_by
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


def test_memoised_hashes_stay_canonical() -> None:
    """The anchors every process agrees on: key order and the memo change nothing."""
    a = {"role": "user", "content": "hi", "id": "m1"}
    b = {"id": "m1", "content": "hi", "role": "user"}
    assert content_key(a) != content_key(b)  # two cache entries ...
    assert item_hash(a) == item_hash(b) == item_hash(dict(b))  # ... one canonical hash
    assert item_digest(a) == item_digest(b)
    assert item_hash({**a, "content": "ho"}) != item_hash(a)


def test_a_derived_key_names_what_a_function_made_of_the_item() -> None:
    key = content_key({"role": "user", "content": "hi"})
    assert derived_key(key, b"ttl record") == derived_key(key, b"ttl record")
    assert derived_key(key, b"ttl record") != derived_key(key, b"opened envelope") != key
    assert keyed_by(key, "a", b"mask") != keyed_by(key, "b", b"mask")


def test_derived_keys_are_blake2b_personalised_by_their_tag_however_many_tags() -> None:
    """Hashers copied per tag give the digests made afresh, for more tags than are kept."""
    for n in range(300):
        key, tag = content_key({"n": n}), b"tag %d" % n + b"-" * (n % 20)
        made = hashlib.blake2b(key, digest_size=16, person=tag[:16]).digest()
        assert derived_key(key, tag) == made
        text = "é" * (n % 5) + "\ud800"
        with_text = key + text.encode("utf-8", "surrogatepass")
        assert (
            keyed_by(key, text, tag)
            == hashlib.blake2b(with_text, digest_size=16, person=tag[:16]).digest()
        )


def test_counts_are_kept_once_for_the_process_and_shared_by_counters_alike() -> None:
    cache.clear()
    item = {"role": "user", "content": "count me once"}
    assert TokenCounter("gpt-4.1").count_item(item) == TokenCounter("gpt-4o").count_item(item)
    stats = cache.stats()["tokens"]
    assert (stats.misses, stats.hits, stats.entries) == (1, 1, 1)
    assert TokenCounter("gpt-4", cache_size=0).count_item(item) > 0  # 0: nothing cached
    assert cache.stats()["tokens"].entries == 1


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
    """A user's layer that changes, in place, what it reads (a subclass of a memstack
    layer too) changes copies: what the cache shares, and the counts kept by key, stay
    what they were, and the window above counts the items it is given."""
    store, key = open_backend(f"sqlite:///{tmp_path / 'k.db'}", "s1"), generate_key()
    items = [{"role": "user", "content": f"short question {n}"} for n in range(40)]

    def window(below: Any) -> SlidingWindowSession:
        encrypted = EncryptedSession(TTLSession(store, ttl=3600), key=key)
        return SlidingWindowSession(below(encrypted), max_tokens=2000, model="gpt-4.1")

    plain = window(lambda encrypted: encrypted)
    await plain.add_items(items)  # type: ignore[arg-type]
    assert len(await plain.get_items()) == 40  # short items: all fit, and are counted so
    louder = window(altering)
    for _ in range(2):  # the second read reopens envelopes it has seen
        view = await louder.get_items()
        assert 0 < len(view) < 40
        assert TokenCounter("gpt-4.1").count_items(view) <= 2000
    store.close()
