"""The SQLAlchemy adapter on PostgreSQL: what a stack's turn sends, and that it stays correct.

A round trip is a statement, or a BEGIN, COMMIT or ROLLBACK the driver sends. On loopback
each one costs the client a wake-up of the server and back, so a stack's turn should take
no more of them than the bare SDK store's.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from memstack import cache
from memstack.backends import capabilities_of, open_backend
from memstack.layers import PassthroughSession, TTLSession

from ..conftest import POSTGRES_URL, require_service

Item = dict[str, Any]


@pytest.fixture
async def postgres() -> AsyncIterator[tuple[AsyncEngine, dict[str, str]]]:
    require_service("PostgreSQL", POSTGRES_URL)
    engine = create_async_engine(POSTGRES_URL)
    tag = uuid.uuid4().hex[:8]
    tables = {"sessions_table": f"trips_{tag}_sessions", "messages_table": f"trips_{tag}_messages"}
    yield engine, tables
    async with engine.begin() as conn:
        for name in (tables["messages_table"], tables["sessions_table"]):
            await conn.execute(text(f"DROP TABLE IF EXISTS {name}"))
    await engine.dispose()


@contextmanager
def round_trips(engine: AsyncEngine) -> Iterator[list[str]]:
    """What the driver sends meanwhile: each statement's verb and table, and BEGIN / COMMIT /
    ROLLBACK of the transactions it opens (none under autocommit)."""
    sent: list[str] = []

    def autocommit(conn: Any) -> bool:
        return bool(conn.connection.dbapi_connection.autocommit)

    def statement(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        table = "messages" if "_messages" in sql.split(" WHERE ")[0] else "sessions"
        sent.append(f"{sql.split()[0]} {table}")

    def begin(conn: Any) -> None:
        if not autocommit(conn):
            sent.append("BEGIN")

    def commit(conn: Any) -> None:
        if not autocommit(conn):
            sent.append("COMMIT")

    def rollback(conn: Any) -> None:
        if not autocommit(conn):
            sent.append("ROLLBACK")

    hooks = {"before_cursor_execute": statement, "begin": begin, "commit": commit}
    hooks["rollback"] = rollback
    for name, hook in hooks.items():
        event.listen(engine.sync_engine, name, hook)
    try:
        yield sent
    finally:
        for name, hook in hooks.items():
            event.remove(engine.sync_engine, name, hook)


def turn(n: int) -> list[Item]:
    return [
        {"role": "user", "content": f"question {n}"},
        {"role": "assistant", "content": f"answer {n}"},
    ]


async def test_a_stack_turn_takes_fewer_round_trips_than_the_bare_store(postgres: Any) -> None:
    engine, tables = postgres
    bare = open_backend(POSTGRES_URL, "bare", engine=engine, **tables)
    stack = TTLSession(
        open_backend(POSTGRES_URL, "stack", engine=engine, **tables), ttl=3600, purge_every=None
    )
    for session in (bare, stack):
        await session.add_items(turn(0))  # type: ignore[arg-type]
        await session.get_items()
    trips: dict[str, list[str]] = {}
    for name, session in (("bare", bare), ("stack", stack)):
        with round_trips(engine) as sent:
            await session.add_items(turn(1))  # type: ignore[arg-type]
            await session.get_items()
        trips[name] = sent
    # The write: the session row locked and touched at once, the tail the stamps follow,
    # the insert. The read: one statement, outside any transaction.
    write = ["BEGIN", "UPDATE sessions", "SELECT messages", "INSERT messages", "COMMIT"]
    assert trips["stack"] == [*write, "SELECT messages"], trips["stack"]
    assert len(trips["stack"]) < len(trips["bare"]), trips
    assert await stack.get_items() == turn(0) + turn(1)


async def test_a_write_touches_the_session_row_as_the_sdk_does(postgres: Any) -> None:
    engine, tables = postgres
    stack = PassthroughSession(open_backend(POSTGRES_URL, "s1", engine=engine, **tables))
    # TTL writes go through the adapter's own transaction; a passthrough's through the SDK.
    ttl = TTLSession(open_backend(POSTGRES_URL, "s2", engine=engine, **tables), ttl=3600)

    async def updated(session_id: str) -> Any:
        async with engine.connect() as conn:
            query = f"SELECT updated_at FROM {tables['sessions_table']} WHERE session_id = :s"
            return (await conn.execute(text(query), {"s": session_id})).scalar_one()

    for session, session_id in ((stack, "s1"), (ttl, "s2")):
        await session.add_items(turn(0))  # type: ignore[arg-type]  # creates the row
        first = await updated(session_id)
        await asyncio.sleep(0.01)
        await session.add_items(turn(1))  # type: ignore[arg-type]
        assert await updated(session_id) > first
        assert await session.get_items() == turn(0) + turn(1)


async def test_concurrent_stack_writers_lose_and_reorder_nothing(postgres: Any) -> None:
    """Each writer's turns stay whole and in its order; every turn is stored once."""
    engine, tables = postgres
    stacks = [
        TTLSession(open_backend(POSTGRES_URL, "shared", engine=engine, **tables), ttl=3600)
        for _ in range(4)
    ]

    async def writer(number: int, stack: TTLSession) -> None:
        for n in range(15):
            await stack.add_items(turn(100 * number + n))  # type: ignore[arg-type]
            await stack.get_items()

    await asyncio.gather(*(writer(i, s) for i, s in enumerate(stacks)))
    items = await stacks[0].get_items()
    assert len(items) == 4 * 15 * 2
    pairs = [(items[i]["content"], items[i + 1]["content"]) for i in range(0, len(items), 2)]
    assert all(q.split()[1] == a.split()[1] for q, a in pairs)  # turns whole
    for number in range(4):
        mine = [int(q.split()[1]) for q, _ in pairs if int(q.split()[1]) // 100 == number]
        assert mine == [100 * number + n for n in range(15)]


async def test_a_write_that_composes_nothing_leaves_the_session_row_untouched(
    postgres: Any,
) -> None:
    engine, tables = postgres
    store = open_backend(POSTGRES_URL, "s1", engine=engine, **tables)
    await store.add_items(turn(0))  # type: ignore[arg-type]
    query = f"SELECT updated_at FROM {tables['sessions_table']} WHERE session_id = 's1'"
    async with engine.connect() as conn:
        before = (await conn.execute(text(query))).scalar_one()
    await asyncio.sleep(0.01)
    await capabilities_of(store).append_after(lambda tail: [], first=1)
    async with engine.connect() as conn:
        assert (await conn.execute(text(query))).scalar_one() == before
    assert await store.get_items() == turn(0)


async def test_a_cancelled_read_hands_its_connection_back(postgres: Any) -> None:
    engine, tables = postgres
    stack = TTLSession(open_backend(POSTGRES_URL, "s1", engine=engine, **tables), ttl=3600)
    await stack.add_items(turn(0))  # type: ignore[arg-type]
    sent = asyncio.Event()

    def started(*args: Any) -> None:
        sent.set()

    event.listen(engine.sync_engine, "before_cursor_execute", started)
    try:
        for _ in range(3):
            sent.clear()
            read = asyncio.ensure_future(stack.get_items())
            await sent.wait()
            read.cancel()  # while its statement is in flight
            await asyncio.sleep(0)
            read.cancel()  # and again while it closes
            with pytest.raises(asyncio.CancelledError):
                await read
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", started)
    for _ in range(100):
        if engine.pool.checkedout() == 0:  # type: ignore[attr-defined]
            break
        await asyncio.sleep(0.01)
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    assert await stack.get_items() == turn(0)


@pytest.mark.parametrize("held", [127, 128, 129, 400, 513, 2100])
async def test_a_new_process_reads_a_small_session_in_one_statement(
    postgres: Any, held: int
) -> None:
    """With nothing to go by (an empty process cache), a read of a session of a few hundred
    items is one statement, not the newest 128 rows, a count, then every row. Exactly 128
    rows look like the newest 128 of a longer session: that one edge reads on."""
    engine, tables = postgres
    bare = open_backend(POSTGRES_URL, "s", engine=engine, **tables)
    stack = TTLSession(
        open_backend(POSTGRES_URL, "s", engine=engine, **tables), ttl=3600, purge_every=None
    )
    for start in range(0, held, 100):
        await stack.add_items([turn(n)[0] for n in range(start, min(held, start + 100))])  # type: ignore[arg-type]
    cache.clear()  # what a new process starts with
    with round_trips(engine) as sent:
        items = await stack.get_items()
    assert items == [turn(n)[0] for n in range(held)]
    assert len(await bare.get_items()) == held
    if held <= 4 * 128 and held != 128:  # up to four first reads long: read whole
        assert sent == ["SELECT messages"], sent
    else:  # the newest 128, a count, then longer reads: all outside any transaction
        assert set(sent) == {"SELECT messages"} and len(sent) <= 4, sent
    with round_trips(engine) as sent:
        assert await stack.get_items() == items
    assert sent == ["SELECT messages"], sent  # the next read starts from this one's size
