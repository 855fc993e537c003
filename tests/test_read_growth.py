"""A read that needs more rows always asks for more: writers that append after it counted
the store must not keep it asking for the same number forever (found in review: a TTL
reader on PostgreSQL asked for 155 rows ~1,200 times a second while writers had made 198).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from agents.memory import SQLiteSession
from sqlalchemy import event
from sqlalchemy.ext.asyncio import create_async_engine

from memstack import TTLSession, cache, pipeline
from memstack.backends import GenericCapabilities, open_backend
from memstack.backends.capabilities import Tail
from memstack.testing import InMemorySession

from .conftest import Store


def message(n: int) -> dict[str, Any]:
    return {"role": "user", "content": f"message {n}"}


async def test_a_read_grows_past_a_count_that_writers_made_stale(tmp_path: Path) -> None:
    store = SQLiteSession("s", db_path=str(tmp_path / "s.db"))
    await store.add_items([message(n) for n in range(300)])  # type: ignore[misc]
    sizes: list[int] = []

    async def newest(size: int) -> Tail:
        sizes.append(size)
        assert len(sizes) < 12, f"the read asked for {sizes}: it does not grow"
        if len(sizes) <= 3:  # other writers append 50 rows during each of the first reads
            start = 1000 + 50 * len(sizes)
            await store.add_items([message(n) for n in range(start, start + 50)])  # type: ignore[misc]
        items = await store.get_items(limit=size)
        return Tail.undated(items, complete=len(items) < size)

    async def everything(tail: Tail) -> list[Any] | None:
        return list(tail.items) if tail.complete else None  # a layer that needs it all

    try:
        found = await pipeline.read([], store, newest, everything, None, hinted=False)
        assert len(found) == 450 and found == await store.get_items()
        assert sizes == sorted(set(sizes)), sizes  # every read longer than the one before
    finally:
        store.close()


@pytest.mark.parametrize("held", [127, 128, 129, 300])
async def test_a_first_read_returns_every_item_on_every_backend(store: Store, held: int) -> None:
    """A read with nothing to go by (an empty process cache) may take a small session
    whole in one statement (``whole_up_to``): it still returns exactly what is stored."""
    stack = TTLSession(store.open(f"first-{uuid.uuid4().hex}"), ttl=3600, purge_every=None)
    written = [message(n) for n in range(held)]
    for start in range(0, held, 100):
        await stack.add_items(written[start : start + 100])  # type: ignore[arg-type]
    cache.clear()  # what a new process starts with
    assert await stack.get_items() == written
    cache.clear()
    assert await stack.get_items(limit=5) == written[-5:]


async def test_a_first_read_of_a_small_sqlite_session_is_one_statement(tmp_path: Path) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'sa.db'}")
    stack = TTLSession(open_backend("sqlite+aiosqlite://", "s", engine=engine), ttl=3600)
    await stack.add_items([message(n) for n in range(300)])  # type: ignore[arg-type]
    cache.clear()
    sent: list[str] = []

    def statement(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        sent.append(sql.split()[0])

    event.listen(engine.sync_engine, "before_cursor_execute", statement)
    try:
        assert await stack.get_items() == [message(n) for n in range(300)]
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", statement)
        await engine.dispose()
    assert sent == ["SELECT"], sent


async def test_an_adapter_of_your_own_is_never_passed_whole_up_to() -> None:
    """``read_newest``'s ``whole_up_to`` goes only to adapters that say they take it
    (``reads_whole_up_to``): one written before it existed keeps working."""
    reads: list[int] = []

    class OwnCapabilities(GenericCapabilities):
        async def read_newest(self, n: int, *, wrapper: Any = None) -> Tail:
            reads.append(n)
            return await super().read_newest(n, wrapper=wrapper)

    class OwnStore(InMemorySession):
        def storage_capabilities(self) -> OwnCapabilities:
            return OwnCapabilities(self)

    store = OwnStore("s")
    await store.add_items([message(n) for n in range(300)])  # type: ignore[arg-type]
    cache.clear()
    stack = TTLSession(store, ttl=3600, purge_every=None)
    assert await stack.get_items() == [message(n) for n in range(300)]
    assert reads and reads[0] == 128


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
async def test_a_first_read_quotes_a_table_name_that_needs_it(
    database: str, tmp_path: Path
) -> None:
    """The one-statement first read is SQL text: a table the SDK was told to name with
    capitals and a space is quoted as the dialect quotes it."""
    from agents.extensions.memory import SQLAlchemySession

    from .conftest import POSTGRES_URL, require_service

    if database == "postgres":
        require_service("PostgreSQL", POSTGRES_URL)
    url = POSTGRES_URL if database == "postgres" else f"sqlite+aiosqlite:///{tmp_path}/q.db"
    engine = create_async_engine(url)
    suffix = uuid.uuid4().hex[:8]
    tables = {"sessions_table": f"Quoted S {suffix}", "messages_table": f"Quoted M {suffix}"}
    store = SQLAlchemySession("s", engine=engine, create_tables=True, **tables)
    stack = TTLSession(store, ttl=3600, purge_every=None)
    try:
        await stack.add_items([message(n) for n in range(200)])  # type: ignore[arg-type]
        cache.clear()  # a new process: the first read takes the adaptive statement
        assert await stack.get_items() == [message(n) for n in range(200)]
    finally:
        async with engine.begin() as conn:
            for name in reversed(tables.values()):  # messages first: they refer to sessions
                await conn.exec_driver_sql(f'DROP TABLE IF EXISTS "{name}"')
        await engine.dispose()
