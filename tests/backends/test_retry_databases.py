"""Real deadlocks on MariaDB and PostgreSQL, provoked deterministically, and a commit whose
connection dies: a stack's write is rerun after the first, stored once, and the second is
never rerun. The bare SDK store, in the same deadlock, loses the write.

The deadlocks: a second connection (the "adversary") first takes a lock the store's
``add_items`` will need after it has locked its session row, waits until the store's
transaction queues behind it, then asks for that session row: a cycle. The store is made
the victim: on MariaDB the adversary has written more rows (InnoDB rolls back the lighter
transaction); on PostgreSQL its deadlock_timeout is longer (the first to check is aborted).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.util import await_only

from memstack.backends import capabilities_of, open_backend
from memstack.backends.retry import Retry, transient_cause
from memstack.backends.sqlalchemy_store import SQLAlchemyCapabilities
from memstack.errors import BackendError, TransientError
from memstack.layers import PassthroughSession

from ..conftest import MYSQL_URL, POSTGRES_URL, require_service

Item = dict[str, Any]
FIRST: Item = {"role": "user", "content": "first"}
SECOND: Item = {"role": "user", "content": "second"}


class Tables:
    """Session tables of this test's own, so parallel tests never lock each other's rows."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        self.sessions = f"retry_{tag}_sessions"
        self.messages = f"retry_{tag}_messages"
        self.ballast = f"retry_{tag}_ballast"

    def options(self) -> dict[str, str]:
        return {"sessions_table": self.sessions, "messages_table": self.messages}

    async def drop(self, engine: AsyncEngine) -> None:
        async with engine.begin() as conn:
            for table in (self.messages, self.sessions, self.ballast):
                await conn.execute(text(f"DROP TABLE IF EXISTS {table}"))


@pytest.fixture
async def mariadb() -> AsyncIterator[tuple[AsyncEngine, Tables]]:
    require_service("MariaDB", MYSQL_URL)
    engine = create_async_engine(MYSQL_URL)
    tables = Tables()
    yield engine, tables
    await tables.drop(engine)
    await engine.dispose()


@pytest.fixture
async def postgres() -> AsyncIterator[tuple[AsyncEngine, Tables]]:
    require_service("PostgreSQL", POSTGRES_URL)
    # The store checks for deadlocks after 3 s of waiting, the adversary after 60 s.
    engine = create_async_engine(
        POSTGRES_URL, connect_args={"server_settings": {"deadlock_timeout": "3s"}}
    )
    tables = Tables()
    yield engine, tables
    await tables.drop(engine)
    await engine.dispose()


async def stored(engine: AsyncEngine, tables: Tables, session_id: str) -> list[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(f"SELECT message_data FROM {tables.messages} WHERE session_id = :s ORDER BY id"),
            {"s": session_id},
        )
        return [row[0] for row in rows]


async def until(engine: AsyncEngine, query: str, params: dict[str, Any]) -> None:
    """Poll ``query`` (a count) until it is positive: the store's transaction is waiting.

    A new connection each time: one held open keeps seeing what it saw first."""
    for _ in range(500):
        async with engine.connect() as conn:
            if (await conn.execute(text(query), params)).scalar():
                return
        await asyncio.sleep(0.02)
    raise AssertionError("the store's transaction never queued behind the adversary")


Write = Callable[[], Awaitable[None]]


async def mariadb_deadlock(
    engine: AsyncEngine,
    tables: Tables,
    session_id: str,
    write: Write,
    *,
    waits_in: str = "INSERT INTO",
) -> asyncio.Future[None]:
    """Run ``write`` (an add to ``session_id``) into a real InnoDB deadlock it loses; the
    adversary then lets go. Returns ``write``'s finished task."""
    adversary = await engine.connect()
    try:
        await adversary.execute(text(f"CREATE TABLE IF NOT EXISTS {tables.ballast} (n INT)"))
        await adversary.commit()
        await adversary.begin()
        # Weight: InnoDB rolls back the transaction that changed fewer rows.
        values = ", ".join(f"({n})" for n in range(500))
        await adversary.execute(text(f"INSERT INTO {tables.ballast} VALUES {values}"))
        # Gap locks on the session's range: the store's INSERT will queue behind them.
        await adversary.execute(
            text(f"SELECT id FROM {tables.messages} WHERE session_id = :s FOR UPDATE"),
            {"s": session_id},
        )
        task = asyncio.ensure_future(write())
        await until(
            engine,
            # (INNODB_TRX leaves the waiting transaction out while the adversary's is large)
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
            "WHERE info LIKE :q AND time_ms > 300",
            {"q": f"{waits_in} {tables.messages}%"},
        )
        # The store holds its session row; asking for it closes the cycle.
        await adversary.execute(
            text(f"SELECT session_id FROM {tables.sessions} WHERE session_id = :s FOR UPDATE"),
            {"s": session_id},
        )
        await adversary.rollback()
    finally:
        await adversary.close()
    await asyncio.wait([task])
    return task


async def postgres_deadlock(
    engine: AsyncEngine, lock_first: str, then: str, write: Write
) -> asyncio.Future[None]:
    """Run ``write`` into a real PostgreSQL deadlock it loses: the adversary locks table
    ``lock_first`` (which ``write`` inserts into second), then runs ``then`` (a statement
    that waits for what ``write`` locked first). Returns ``write``'s finished task."""
    adversary = await engine.connect()
    try:
        await adversary.begin()
        await adversary.execute(text("SET LOCAL deadlock_timeout = '60s'"))
        await adversary.execute(text(f"LOCK TABLE {lock_first} IN SHARE MODE"))
        task = asyncio.ensure_future(write())
        await until(
            engine,
            "SELECT COUNT(*) FROM pg_locks l JOIN pg_class c ON l.relation = c.oid "
            "WHERE NOT l.granted AND c.relname = :t",
            {"t": lock_first},
        )
        await adversary.execute(text(then))
        await adversary.rollback()
    finally:
        await adversary.close()
    await asyncio.wait([task])
    return task


@contextlib.contextmanager
def inserts_into(engine: AsyncEngine, table: str, verb: str = "INSERT INTO") -> Iterator[list[str]]:
    """Every INSERT (or ``verb``) statement sent to ``table`` meanwhile: one per attempt."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith(f"{verb} {table} "):
            sent.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


def lock_session_row(tables: Tables) -> str:
    return f"SELECT session_id FROM {tables.sessions} WHERE session_id = 's1' FOR UPDATE"


def _outcome(task: asyncio.Future[None]) -> BaseException | None:
    return task.exception()


# -- MariaDB --------------------------------------------------------------------------


async def test_mariadb_deadlock_is_retried_through_a_stack(mariadb: Any) -> None:
    engine, tables = mariadb
    store = open_backend(MYSQL_URL, "s1", engine=engine, **tables.options())
    stack = PassthroughSession(store)
    await stack.add_items([FIRST])  # type: ignore[list-item]

    async def write() -> None:
        await stack.add_items([SECOND])  # type: ignore[list-item]

    with inserts_into(engine, tables.messages) as sent:
        task = await mariadb_deadlock(engine, tables, "s1", write)
    assert _outcome(task) is None
    assert len(sent) == 2  # the deadlocked attempt, rolled back, and the retry
    assert await stack.get_items() == [FIRST, SECOND]
    assert len(await stored(engine, tables, "s1")) == 2  # stored once


async def test_mariadb_deadlock_loses_the_bare_sdk_stores_write(mariadb: Any) -> None:
    """What the stack's retry fixes: the SDK store alone raises, and the item is not stored."""
    engine, tables = mariadb
    store = open_backend(MYSQL_URL, "s1", engine=engine, **tables.options())
    await store.add_items([FIRST])  # type: ignore[list-item]

    async def write() -> None:
        await store.add_items([SECOND])  # type: ignore[list-item]

    with inserts_into(engine, tables.messages) as sent:
        task = await mariadb_deadlock(engine, tables, "s1", write)
    error = _outcome(task)
    assert error is not None and transient_cause(error) == "deadlock (MySQL 1213)"
    assert len(sent) == 1
    assert len(await stored(engine, tables, "s1")) == 1


async def test_mariadb_deadlock_after_the_last_attempt_is_a_transient_error(
    mariadb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, tables = mariadb
    monkeypatch.setattr(SQLAlchemyCapabilities, "retry", Retry(attempts=1))
    stack = PassthroughSession(open_backend(MYSQL_URL, "s1", engine=engine, **tables.options()))
    await stack.add_items([FIRST])  # type: ignore[list-item]

    async def write() -> None:
        await stack.add_items([SECOND])  # type: ignore[list-item]

    with inserts_into(engine, tables.messages) as sent:
        task = await mariadb_deadlock(engine, tables, "s1", write)
    error = _outcome(task)
    assert isinstance(error, TransientError)
    assert len(sent) == 1
    assert (error.layer, error.session_id, error.attempts) == ("PassthroughSession", "s1", 1)
    assert error.cause == "deadlock (MySQL 1213)"
    assert "SQLAlchemySession(mysql+aiomysql://root@127.0.0.1" in str(error)
    assert "retried 0 times" in str(error)
    assert len(await stored(engine, tables, "s1")) == 1


async def test_mariadb_deadlock_in_a_rewrite_plan_is_retried(mariadb: Any) -> None:
    """The capabilities' plans (rewrites, purges) are retried as the store's own writes are."""
    engine, tables = mariadb
    store = open_backend(MYSQL_URL, "s1", engine=engine, **tables.options())
    stack = PassthroughSession(store)
    await stack.add_items([FIRST, SECOND])  # type: ignore[list-item]
    capabilities = capabilities_of(stack)
    assert isinstance(capabilities, SQLAlchemyCapabilities)

    async def write() -> None:
        assert await capabilities.delete_oldest(1) == 1

    with inserts_into(engine, tables.messages, "DELETE FROM") as sent:
        task = await mariadb_deadlock(engine, tables, "s1", write, waits_in="DELETE FROM")
    assert _outcome(task) is None
    assert len(sent) == 2
    assert await stack.get_items() == [SECOND]


# -- PostgreSQL -------------------------------------------------------------------------


@pytest.mark.parametrize("layer", ["passthrough", "ttl"])
async def test_postgres_deadlock_is_retried_through_a_stack(postgres: Any, layer: str) -> None:
    """A TTL write reads its tail in its own transaction: the rerun reads and stamps again."""
    from memstack.layers import TTLSession

    engine, tables = postgres
    store = open_backend(POSTGRES_URL, "s1", engine=engine, **tables.options())
    stack = (
        PassthroughSession(store)
        if layer == "passthrough"
        else TTLSession(store, ttl=3600, purge_every=None)
    )
    await stack.add_items([FIRST])  # type: ignore[list-item]

    async def write() -> None:
        await stack.add_items([SECOND])  # type: ignore[list-item]

    # add_items locks the session row, then inserts messages: lock them the other way round.
    with inserts_into(engine, tables.messages) as sent:
        task = await postgres_deadlock(engine, tables.messages, lock_session_row(tables), write)
    assert _outcome(task) is None
    assert len(sent) == 2  # the deadlocked attempt, rolled back, and the retry
    assert await stack.get_items() == [FIRST, SECOND]
    assert len(await stored(engine, tables, "s1")) == 2


async def test_postgres_deadlock_loses_the_bare_sdk_stores_write(postgres: Any) -> None:
    engine, tables = postgres
    store = open_backend(POSTGRES_URL, "s1", engine=engine, **tables.options())
    await store.add_items([FIRST])  # type: ignore[list-item]

    async def write() -> None:
        await store.add_items([SECOND])  # type: ignore[list-item]

    with inserts_into(engine, tables.messages) as sent:
        task = await postgres_deadlock(engine, tables.messages, lock_session_row(tables), write)
    error = _outcome(task)
    assert error is not None and transient_cause(error) == "deadlock (SQLSTATE 40P01)"
    assert len(sent) == 1
    assert len(await stored(engine, tables, "s1")) == 1


async def test_a_connection_lost_at_commit_is_not_retried(postgres: Any) -> None:
    """Whether that commit happened is unknown to the client: never written a second time."""
    engine, tables = postgres
    stack = PassthroughSession(open_backend(POSTGRES_URL, "s1", engine=engine, **tables.options()))
    await stack.add_items([FIRST])  # type: ignore[list-item]
    killer = await engine.connect()
    killer_raw = (await killer.get_raw_connection()).driver_connection
    commits: list[int] = []

    def kill_before_commit(conn: Any) -> None:
        commits.append(1)
        pid = conn.connection.driver_connection.get_server_pid()
        await_only(killer_raw.execute("SELECT pg_terminate_backend($1)", pid))

    event.listen(engine.sync_engine, "commit", kill_before_commit)
    try:
        with pytest.raises(BackendError) as raised:
            await stack.add_items([SECOND])  # type: ignore[list-item]
    finally:
        event.remove(engine.sync_engine, "commit", kill_before_commit)
        await killer.close()
    assert not isinstance(raised.value, TransientError)
    assert transient_cause(raised.value) is None
    assert commits == [1]  # one attempt
    assert await stack.get_items() == [FIRST]


async def test_postgres_serialization_failure_is_classified_transient(postgres: Any) -> None:
    """A real 40001, as SQLAlchemy raises it: two SERIALIZABLE transactions update one row."""
    engine, tables = postgres
    async with engine.begin() as conn:
        await conn.execute(text(f"CREATE TABLE {tables.ballast} (n INT)"))
        await conn.execute(text(f"INSERT INTO {tables.ballast} VALUES (1)"))
    one: AsyncConnection = await engine.connect()
    two: AsyncConnection = await engine.connect()
    try:
        for conn in (one, two):
            await conn.execute(text("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"))
            await conn.execute(text(f"SELECT n FROM {tables.ballast}"))
        await one.execute(text(f"UPDATE {tables.ballast} SET n = 2"))
        await one.commit()
        with pytest.raises(Exception) as raised:
            await two.execute(text(f"UPDATE {tables.ballast} SET n = 3"))
        await two.rollback()
    finally:
        await one.close()
        await two.close()
    assert transient_cause(raised.value) == "serialization failure (SQLSTATE 40001)"


# -- the memory store ---------------------------------------------------------------------


async def test_memory_store_write_is_retried_after_a_deadlock(postgres: Any) -> None:
    from memstack.memory import MemoryStore

    engine, _ = postgres
    prefix = f"retry_{uuid.uuid4().hex[:8]}_memor"
    memory = MemoryStore(engine, table_prefix=prefix)
    try:
        await memory.remember("ana", "Likes green tea")
        terms, memories = f"{prefix}y_terms", f"{prefix}ies"

        async def write() -> None:
            await memory.remember("ana", "Prefers answers in French")

        # remember() inserts the memory, then its postings: lock them the other way round.
        with inserts_into(engine, memories) as sent:
            task = await postgres_deadlock(
                engine, terms, f"LOCK TABLE {memories} IN SHARE MODE", write
            )
        assert _outcome(task) is None
        assert len(sent) == 2  # the deadlocked attempt, rolled back, and the retry
        texts = sorted(m.text for m in await memory.list_memories("ana"))
        assert texts == ["Likes green tea", "Prefers answers in French"]
        assert [m.text for m in await memory.recall("ana", "French answers")][:1] == [
            "Prefers answers in French"
        ]
    finally:
        async with engine.begin() as conn:
            for table in reversed(memory.tables.metadata.sorted_tables):
                await conn.execute(text(f"DROP TABLE IF EXISTS {table.name}"))
