"""Several processes opening a new memory database at once: every one of them remembers.
So do several opening tables an older memstack made, which each adds an index to.

Real processes (forked from a server that imported memstack once: ``tests.forked``),
started together behind a barrier, each calling ``MemoryStore.from_url`` then
``remember`` on tables nobody has created yet (a new SQLite file, or a new
``table_prefix`` on PostgreSQL and MariaDB).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.exc import DBAPIError

from memstack.memory import MemoryStore
from memstack.memory.database import _lost_race
from memstack.memory.schema import ranked_index

from ..forked import CONTEXT
from .conftest import MEMORY_BACKENDS, memory_url

PROCESSES = 3
ROUNDS = 2


def _remember(url: str, prefix: str, name: str, barrier: Any, results: Any) -> None:
    async def run() -> str:
        store = MemoryStore.from_url(url, table_prefix=prefix)
        try:
            barrier.wait(timeout=60)
            memory = await store.remember("shared", f"written by {name}")
            return memory.id
        finally:
            await store.close()

    try:
        results.put((name, "ok", asyncio.run(run())))
    except BaseException as exc:  # reported to the parent, which asserts on it
        results.put((name, "error", f"{type(exc).__name__}: {exc}"))


async def _drop(url: str, prefix: str) -> None:
    store = MemoryStore.from_url(url, table_prefix=prefix)
    async with store.engine.begin() as conn:
        await conn.run_sync(store.tables.metadata.drop_all)
    await store.close()


def _race(url: str, prefix: str) -> list[tuple[str, str, str]]:
    """``PROCESSES`` processes open the store and remember at once (behind a barrier)."""
    barrier = CONTEXT.Barrier(PROCESSES)
    results = CONTEXT.Queue()
    workers = [
        CONTEXT.Process(target=_remember, args=(url, prefix, f"p{i}", barrier, results))
        for i in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    return outcomes


@pytest.mark.parametrize("backend", MEMORY_BACKENDS)
def test_processes_creating_the_tables_at_once_all_remember(backend: str, tmp_path: Path) -> None:
    failures: list[str] = []
    for round_ in range(ROUNDS):
        folder = tmp_path / f"round{round_}"
        folder.mkdir()
        url = memory_url(backend, folder)
        prefix = f"race{uuid.uuid4().hex[:8]}_"
        outcomes = _race(url, prefix)
        failures += [
            f"round {round_} {name}: {what}" for name, status, what in outcomes if status != "ok"
        ]

        async def stored(url: str, prefix: str) -> list[str]:
            store = MemoryStore.from_url(url, table_prefix=prefix)
            try:
                return sorted(m.text for m in await store.list_memories("shared"))
            finally:
                await store.close()

        texts = asyncio.run(stored(url, prefix))
        if backend != "sqlite":
            asyncio.run(_drop(url, prefix))
        if not failures:
            assert texts == [f"written by p{i}" for i in range(PROCESSES)]
    assert failures == []


async def _tables_before_the_ranked_index(url: str, prefix: str) -> None:
    """Tables as an older memstack made them: terms indexed (scope, term, impact)."""
    store = MemoryStore.from_url(url, table_prefix=prefix, embedder=None)
    try:
        await store.remember_many(
            [store.new_memory("shared", f"older note {i}", source="observed") for i in range(300)]
        )
        ranked = str(ranked_index(store.tables).name)
        terms = store.tables.terms.name
        on = f" ON {terms}" if store.engine.dialect.name in ("mysql", "mariadb") else ""
        async with store.engine.begin() as conn:
            await conn.execute(text(f"DROP INDEX {ranked}{on}"))
            await conn.execute(
                text(
                    f"CREATE INDEX {ranked.removesuffix('_ranked')}_impact ON {terms} "
                    "(scope, term, impact)"
                )
            )
    finally:
        await store.close()


async def _terms_indexes(url: str, prefix: str) -> set[str]:
    store = MemoryStore.from_url(url, table_prefix=prefix, embedder=None)
    try:
        async with store.engine.connect() as conn:
            found = await conn.run_sync(
                lambda sync: inspect(sync).get_indexes(store.tables.terms.name)
            )
        return {str(index["name"]) for index in found}
    finally:
        await store.close()


@pytest.mark.parametrize("backend", MEMORY_BACKENDS)
def test_processes_opening_tables_made_before_the_ranked_index_all_remember(
    backend: str, tmp_path: Path
) -> None:
    """Each process adds the index where it is missing; one does, the others find it."""
    url = memory_url(backend, tmp_path)
    prefix = f"old{uuid.uuid4().hex[:8]}_"
    asyncio.run(_tables_before_the_ranked_index(url, prefix))
    outcomes = _race(url, prefix)
    indexes = asyncio.run(_terms_indexes(url, prefix))
    if backend != "sqlite":
        asyncio.run(_drop(url, prefix))
    assert [what for _, status, what in outcomes if status != "ok"] == []
    assert f"ix_{prefix}y_terms_ranked" in indexes
    assert f"ix_{prefix}y_terms_impact" not in indexes


async def test_an_index_another_process_dropped_first_is_a_race_lost_not_a_failure(
    tmp_path: Path,
) -> None:
    """Two processes saw the older index and both drop it: SQLite tells the second "no such
    index" (seen in this module's race under load), which must be looked at again, as a
    table another process created first is."""
    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'm.db'}", embedder=None)
    try:
        async with store.engine.connect() as conn:
            with pytest.raises(DBAPIError) as dropped:
                await conn.execute(text("DROP INDEX ix_gone_y_terms_impact"))
            with pytest.raises(DBAPIError) as unreachable:
                await conn.execute(text("SELECT * FROM no_such_table"))
    finally:
        await store.close()
    assert _lost_race(dropped.value)
    assert not _lost_race(unreachable.value)  # not every error is a race
