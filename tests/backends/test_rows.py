"""Rows parsed once for the process: the same answer as a fresh read, never a stale one."""

from __future__ import annotations

import hashlib
import itertools
import json
import sqlite3
from typing import Any

import pytest
from sqlalchemy import text

from memstack import EncryptedSession, PassthroughSession, TTLSession, cache, capabilities_of
from memstack.backends.rows import parsed, text_key
from memstack.crypto import generate_key
from memstack.testing import sample_items

from ..conftest import Store

# Backends whose adapter reads raw rows, so unchanged rows come back as the same objects.
RAW = ("sqlite-memory", "sqlite-file", "aiosqlite", "sqlalchemy-sqlite", "postgres", "mariadb")


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


def test_a_rows_key_is_the_blake2b_digest_of_its_text() -> None:
    for text_ in ("", "a", "é\ud800" * 50, '{"role":"user"}' * 400):
        made = hashlib.blake2b(text_.encode("utf-8", "surrogatepass"), digest_size=16)
        assert text_key(text_) == made.digest()


def test_a_row_answers_with_its_value_only_for_the_same_text():
    first, key = parsed("t", "s1", 1, '{"a": 1}')
    again, same_key = parsed("t", "s1", 1, '{"a": 1}')
    assert again is first and same_key == key
    changed, other_key = parsed("t", "s1", 1, '{"a": 2}')  # rewritten in place: same id
    assert changed == {"a": 2} and changed is not first and other_key != key
    assert parsed("t", "s2", 1, '{"a": 2}')[0] is not changed  # another session's row
    with pytest.raises(ValueError):
        parsed("t", "s1", 3, "not json")


def test_rows_live_under_the_process_budget():
    cache.clear()
    cache.configure(max_bytes=40_000)
    try:
        for row in range(200):
            parsed("t", "s1", row, json.dumps({"n": row, "pad": "x" * 50}))
        assert cache.total_bytes() <= 40_000
        assert cache.stats()["row"].evictions > 0
        newest = parsed("t", "s1", 199, json.dumps({"n": 199, "pad": "x" * 50}))[0]
        assert parsed("t", "s1", 199, json.dumps({"n": 199, "pad": "x" * 50}))[0] is newest
    finally:
        cache.configure(max_bytes=cache.DEFAULT_MAX_BYTES)


async def newest(session: Any, n: int) -> list[Any]:
    return list((await capabilities_of(session).read_newest(n)).items)


async def test_read_newest_reads_what_get_items_reads(store: Store):
    session = store.open(f"rows-{id(store)}")
    await session.clear_session()
    items = sample_items(9)
    await session.add_items(items)
    for n in (1, 4, 9, 50):
        tail = await capabilities_of(session).read_newest(n)
        assert list(tail.items) == await session.get_items(limit=n)
        assert tail.complete == (n > 9)
    first, again = await newest(session, 9), await newest(session, 9)
    if store.backend in RAW:
        assert all(a is b for a, b in zip(first, again, strict=True))
    await session.pop_item()
    new = {"role": "user", "content": "new"}
    await session.add_items([new])
    assert await newest(session, 9) == [*items[:-1], new]
    await session.clear_session()
    assert await newest(session, 9) == []


@pytest.mark.parametrize("store", RAW, indirect=True)
async def test_a_row_rewritten_in_place_by_another_writer_is_read_afresh(store: Store):
    session = store.open(f"rows-rewrite-{id(store)}")
    await session.clear_session()
    await session.add_items(sample_items(3))
    before = await newest(session, 3)
    rewritten = json.dumps({"role": "user", "content": "rewritten"})
    await execute(  # another process: the same row id, new text
        store,
        session,
        "UPDATE {table} SET message_data = :data WHERE id = "
        "(SELECT MIN(id) FROM (SELECT id FROM {table} WHERE session_id = :sid) AS t)",
        {"data": rewritten, "sid": session.session_id},
    )
    after = await newest(session, 3)
    assert after[0] == {"role": "user", "content": "rewritten"}
    assert after[1:] == before[1:] and after[1] is before[1]
    await session.clear_session()


@pytest.mark.parametrize("store", RAW, indirect=True)
async def test_a_corrupt_row_is_skipped_and_the_limit_counts_readable_rows(store: Store):
    session = store.open(f"rows-corrupt-{id(store)}")
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
    for n in (1, 3, 4, 10):
        assert await newest(session, n) == await session.get_items(limit=n)
    await session.clear_session()


@pytest.mark.parametrize("store", RAW, indirect=True)
async def test_what_a_stack_returns_is_never_what_it_shares(store: Store):
    """A caller altering what it read changes nothing the next read returns."""
    key = generate_key()
    session = store.open(f"rows-stack-{id(store)}")
    await session.clear_session()
    items = sample_items(6)
    await session.add_items(items[:2])  # plaintext, written before any layer
    stacks = [
        EncryptedSession(TTLSession(session, ttl=3600), key=key, allow_plaintext=True),
        TTLSession(session, ttl=3600),  # on top: its records' items go to the caller
        # On the store itself: rows are reused, TTL's records go to the caller as stored.
        PassthroughSession(session),
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
async def test_a_row_too_large_for_the_budget_leaves_nothing_behind(store: Store):
    """A tool output over an eighth of the budget is read, never kept: 30 reads of one
    1.9 MB row hold no more than one."""
    import gc
    import os
    import tracemalloc

    session = store.open(f"rows-memory-{id(store)}")
    await session.clear_session()
    stack = EncryptedSession(TTLSession(session, ttl=3600), key=generate_key(), compress=False)
    big = {"role": "user", "content": os.urandom(700_000).hex()}  # a 1.9 MB stored row
    await stack.add_items([big])
    cache.configure(max_bytes=8 << 20)
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
        cache.configure(max_bytes=cache.DEFAULT_MAX_BYTES)
    assert grown < 4_000_000, f"{grown / 1e6:.0f} MB still held after 30 reads of one row"
    await session.clear_session()


async def test_a_raw_read_leaves_the_sdk_stores_table_as_it_was(tmp_path):
    # A server keeps thousands of stores alive, each with its own Table when built
    # directly: a raw read must not memoise anything on their columns (about 4 KB each).
    from agents.extensions.memory import SQLAlchemySession
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'raw.db'}")
    try:
        store = SQLAlchemySession("s1", engine=engine, create_tables=True)
        await store.add_items(sample_items(3))
        columns = store._messages.c
        before = {column.key: set(vars(column)) for column in columns}
        assert len(await newest(store, 2)) == 2
        assert {column.key: set(vars(column)) for column in columns} == before
    finally:
        await engine.dispose()
