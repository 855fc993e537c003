"""Values reused between reads: the same answer as a fresh read, never a stale one."""

from __future__ import annotations

import itertools
import json
import sqlite3
from typing import Any

import pytest
from sqlalchemy import text

from memstack import EncryptedSession, TTLSession, capabilities_of
from memstack.backends.reuse import Identity, Reuse
from memstack.crypto import generate_key
from memstack.testing import sample_items

from ..conftest import Store

# Backends whose adapter reads raw rows, so unchanged rows come back as the same objects.
REUSING = ("sqlite-memory", "sqlite-file", "aiosqlite", "sqlalchemy-sqlite", "postgres", "mariadb")


async def execute(store: Store, session: Any, statement: str, params: dict[str, Any]) -> None:
    """Run SQL on the store's database as another process would ({table}: its messages)."""
    table = getattr(session, "messages_table", None) or session._messages.name
    statement = statement.format(table=table)
    if store.engine is not None:
        async with store.engine.begin() as conn:
            await conn.execute(text(statement), params)
    elif store.backend == "sqlite-memory":  # one connection is the whole database
        conn = session._get_connection()
        conn.execute(statement, params)
        conn.commit()
    else:
        with sqlite3.connect(str(session.db_path)) as conn:
            conn.execute(statement, params)


def test_reuse_returns_the_same_object_only_for_the_same_text():
    reuse = Reuse()
    first = reuse.value(1, '{"a": 1}')
    assert reuse.value(1, '{"a": 1}') is first
    changed = reuse.value(1, '{"a": 2}')  # rewritten in place: same id, new text
    assert changed == {"a": 2} and changed is not first
    assert reuse.value(2, '{"a": 2}') is not changed  # another row, parsed on its own
    with pytest.raises(ValueError):
        reuse.value(3, "not json")
    assert len(reuse) == 2


def test_reuse_is_bounded_by_the_characters_it_holds():
    reuse = Reuse(max_chars=800)
    for row in range(100):
        reuse.value(row, json.dumps({"n": row, "pad": "x" * 50}))
    assert len(reuse) < 20
    newest = reuse.value(99, json.dumps({"n": 99, "pad": "x" * 50}))
    assert reuse.value(99, json.dumps({"n": 99, "pad": "x" * 50})) is newest


def test_identity_never_answers_for_another_object_with_the_same_content():
    memo: Identity[int] = Identity(size=2)
    a, b = {"x": 1}, {"x": 1}
    memo.put(a, 1)
    assert memo.get(a) == 1 and memo.get(b) is None
    memo.put(b, 2)
    memo.put({"y": 1}, 3)  # past its size: emptied, never wrong
    assert memo.get(a) is None


def test_a_derived_value_is_kept_only_while_its_row_is_held():
    reuse, calls = Reuse(), []

    def derive(value: Any) -> int:
        calls.append(value)
        return len(calls)

    held = reuse.value(1, '{"a": 1}')
    assert reuse.derived(held, derive) == 1 and reuse.derived(held, derive) == 1
    reuse.value(1, '{"a": 2}')  # the row rewritten: the old value is no longer held
    assert reuse.derived(held, derive) == 2 and reuse.derived(held, derive) == 3
    assert reuse.derived({"a": 1}, derive) == 4  # never held: never kept


def test_identity_is_bounded_by_what_its_entries_weigh():
    memo: Identity[int] = Identity(max_chars=800)
    big, small = {"x": 1}, [{"y": n} for n in range(9)]
    assert memo.put(big, 1, chars=101) == 1 and memo.get(big) is None  # over an eighth
    for n, obj in enumerate(small):
        memo.put(obj, n, chars=100)
    assert memo.get(small[-1]) == 8 and memo.get(small[0]) is None  # emptied past 800


async def test_read_values_reads_what_get_items_reads(store: Store):
    session = store.open(f"reuse-{id(store)}")
    await session.clear_session()
    items = sample_items(9)
    await session.add_items(items)
    caps, reuse = capabilities_of(session), Reuse()
    for n in (1, 4, 9, 50):
        assert await caps.read_values(n, reuse=reuse) == await session.get_items(limit=n)
    first = await caps.read_values(9, reuse=reuse)
    again = await caps.read_values(9, reuse=reuse)
    if store.backend in REUSING:
        assert all(a is b for a, b in zip(first, again, strict=True))
    await session.pop_item()
    new = {"role": "user", "content": "new"}
    await session.add_items([new])
    assert await caps.read_values(9, reuse=reuse) == [*items[:-1], new]
    await session.clear_session()
    assert await caps.read_values(9, reuse=reuse) == []


@pytest.mark.parametrize("store", REUSING, indirect=True)
async def test_a_row_rewritten_in_place_by_another_writer_is_read_afresh(store: Store):
    session = store.open(f"reuse-rewrite-{id(store)}")
    await session.clear_session()
    await session.add_items(sample_items(3))
    caps, reuse = capabilities_of(session), Reuse()
    before = await caps.read_values(3, reuse=reuse)
    rewritten = json.dumps({"role": "user", "content": "rewritten"})
    await execute(  # another process: the same row id, new text
        store,
        session,
        "UPDATE {table} SET message_data = :data WHERE id = "
        "(SELECT MIN(id) FROM (SELECT id FROM {table} WHERE session_id = :sid) AS t)",
        {"data": rewritten, "sid": session.session_id},
    )
    after = await caps.read_values(3, reuse=reuse)
    assert after[0] == {"role": "user", "content": "rewritten"}
    assert after[1:] == before[1:] and after[1] is before[1]
    await session.clear_session()


@pytest.mark.parametrize("store", REUSING, indirect=True)
async def test_a_corrupt_row_is_skipped_and_the_limit_counts_readable_rows(store: Store):
    session = store.open(f"reuse-corrupt-{id(store)}")
    await session.clear_session()
    items = sample_items(4)
    await session.add_items(items[:2])
    await execute(
        store,
        session,
        "INSERT INTO {table} (session_id, message_data) VALUES (:sid, '{{broken')",
        {"sid": session.session_id},
    )
    await session.add_items(items[2:])
    caps = capabilities_of(session)
    for n in (1, 3, 4, 10):
        assert await caps.read_values(n, reuse=Reuse()) == await session.get_items(limit=n)
    await session.clear_session()


@pytest.mark.parametrize("store", REUSING, indirect=True)
async def test_what_a_stack_returns_is_never_what_it_shares(store: Store):
    """A caller altering what it read changes nothing the next read returns."""
    key = generate_key()
    session = store.open(f"reuse-stack-{id(store)}")
    await session.clear_session()
    items = sample_items(6)
    await session.add_items(items[:2])  # plaintext, written before any layer
    stacks = [
        EncryptedSession(TTLSession(session, ttl=3600), key=key, allow_plaintext=True),
        TTLSession(session, ttl=3600),  # on top: its records' items go to the caller
        # On the store itself: rows are reused, records read as admitted plaintext.
        EncryptedSession(session, key=key, allow_plaintext=True),
    ]
    await stacks[0].add_items(items[2:])
    for stack, limit in itertools.product(stacks, (None, 4)):
        first = await stack.get_items(limit)
        for item in first:
            item["content"] = "altered"
            item.pop("call_id", None)
        again = await stack.get_items(limit)
        assert all(a is not b for a, b in zip(first, again, strict=True))
        assert "altered" not in str(again)
    assert await stacks[0].get_items() == items
    await session.clear_session()


@pytest.mark.parametrize("store", ["memory", "sqlite-file"], indirect=True)
async def test_memos_by_identity_hold_no_more_than_a_bounded_amount(store: Store):
    """Rows too large to reuse, or a store that reads fresh values, leave nothing behind.

    Identity memos keep their objects alive: one entry per value read, each read a new
    object, must not add up to 4096 tool outputs.
    """
    import gc
    import os
    import tracemalloc

    session = store.open(f"reuse-memory-{id(store)}")
    await session.clear_session()
    stack = EncryptedSession(TTLSession(session, ttl=3600), key=generate_key(), compress=False)
    big = {"role": "user", "content": os.urandom(700_000).hex()}  # a 1.9 MB stored row
    await stack.add_items([big])
    tracemalloc.start()
    try:
        await stack.get_items()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(30):
            await stack.get_items()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 10_000_000, f"{grown / 1e6:.0f} MB still held after 30 reads of one row"
    await session.clear_session()
