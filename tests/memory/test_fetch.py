"""Recall's reads on SQLite: one hand-off to the driver's thread each, the same rows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from sqlalchemy import text

from memstack.memory import HashingEmbedder, MemoryStore
from memstack.memory import fetch as fetch_module
from memstack.memory.fetch import fetch_all
from memstack.memory.queries import RecallQueries

WALKS = [f"Ana went hiking with friend {n} near lake {n % 7}" for n in range(30)]
QUESTIONS = ["hiking with a friend", "who went near the lake?", "Ana's sunday friend", "tea"]


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the calls handed to aiosqlite's thread, from now on."""
    calls: list[str] = []
    execute = aiosqlite.Connection._execute

    async def counted(self: aiosqlite.Connection, fn: Callable[..., Any], *a: Any, **k: Any) -> Any:
        calls.append(getattr(fn, "__name__", repr(fn)))
        return await execute(self, fn, *a, **k)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
    return calls


async def test_a_recall_on_sqlite_hands_one_call_per_statement_to_the_driver_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'm.db'}", embedder=HashingEmbedder())
    await store.remember_many([store.new_memory("ana", walk) for walk in WALKS])
    await store.recall("ana", "warm up the tables and caches", max_tokens=300)
    calls = _counting(monkeypatch)
    # New words: their document frequencies are read too (four statements in all), and
    # query expansion's one (its terms' frequencies and their impacts in the candidates).
    await store.recall("ana", "who went hiking with a friend on sunday?", max_tokens=300)
    handed = list(calls)
    await store.close()
    # SQLAlchemy's adapter took four hand-offs a statement (cursor, execute, fetch, close):
    # 17 for this recall. Now one a statement and the pool's rollback on return.
    assert handed == ["_execute_fetchall"] * (4 + 1) + ["rollback"]


@pytest.mark.parametrize("embedder", [None, HashingEmbedder()], ids=["full-text", "hybrid"])
async def test_recall_is_the_same_through_the_driver_and_through_sqlalchemy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embedder: HashingEmbedder | None
) -> None:
    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'm.db'}", embedder=embedder)
    await store.remember_many([store.new_memory("ana", walk) for walk in WALKS])
    fast = [await store.recall("ana", q, max_tokens=120) for q in QUESTIONS]
    store.index.invalidate("ana")  # frequencies read again, the other way
    monkeypatch.setattr(fetch_module, "_FAST_DRIVERS", frozenset())
    slow = [await store.recall("ana", q, max_tokens=120) for q in QUESTIONS]
    await store.close()
    assert [(r.text, [m.id for m in r.memories]) for r in fast] == [
        (r.text, [m.id for m in r.memories]) for r in slow
    ]
    assert any(r.memories for r in fast)


async def test_fetched_rows_read_like_sqlalchemy_rows(memory: MemoryStore, scope: str) -> None:
    """On every backend: the same values, by position and by column name."""
    await memory.remember(scope, "Ana keeps bees", kind="fact", confidence=0.5)
    await memory.search(scope, "bees", limit=1)  # tables ready
    queries = RecallQueries(memory.tables)
    [remembered] = await memory.list_memories(scope)
    sql = queries.live_by_ids(1)
    params = {"i0": remembered.id, "now": 0.0}
    async with memory.engine.connect() as conn:
        fetched = await fetch_all(conn, sql, params, row=queries.memory_row)
        expected = (await conn.execute(text(sql), params)).all()
    assert [tuple(row) for row in fetched] == [tuple(row) for row in expected]
    assert fetched[0].id == expected[0].id == remembered.id
    assert fetched[0].confidence == expected[0].confidence == 0.5
    assert bool(fetched[0].needs_review) is bool(expected[0].needs_review) is False
