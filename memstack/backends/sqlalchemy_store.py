"""Capabilities for the SDK's SQLAlchemySession on any database SQLAlchemy drives.

Plans run in the session's own transaction factory after ``_lock_session`` takes the
same row lock the SDK's writes take, so a rewrite and a concurrent ``add_items`` or
``pop_item`` serialise on PostgreSQL, MySQL/MariaDB and SQLite alike.

On PostgreSQL a stack's turn takes fewer round trips than the SDK's own: a raw read runs
outside any transaction (one statement, no BEGIN or ROLLBACK), and a write that reads its
tail locks the session row by touching it (one UPDATE where the SDK sends two SELECTs
before its insert and an UPDATE after). On loopback each round trip costs the client a
wake-up of the server and back, about what parsing a row costs.

Each of the SDK's writes (``add_items``, ``pop_item``, ``clear_session``) and each plan is
one transaction, so the adapter reruns one the database rolled back (a deadlock between
concurrent writers, a serialisation failure) under its ``retry`` policy
(``memstack.backends.retry``); layers reach the store through ``transaction``.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from agents.extensions.memory import SQLAlchemySession
from agents.memory.session import _await_mutation
from sqlalchemy import (
    Integer,
    Select,
    Update,
    bindparam,
    column,
    insert,
    select,
    table,
    text,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import TextClause

import memstack.backends.sql as sql
from memstack.backends.capabilities import StorageCapabilities, Tail, composed
from memstack.backends.mysql_tables import prepare_mysql_tables
from memstack.backends.retry import DEFAULT_RETRY, Retry
from memstack.backends.rows import newest_rows
from memstack.backends.translate import store_errors
from memstack.errors import CapabilityError

if TYPE_CHECKING:
    from agents.run_context import RunContextWrapper

T = TypeVar("T")

# Raw reads parse rows themselves: only while the store parses them this way.
_SDK_DESERIALIZE = SQLAlchemySession._deserialize_item
# A write read in its own transaction (``append_after``) does what the SDK's add_items
# does: only while the store writes that way, on a database whose reads after the row
# lock see every write committed before it (PostgreSQL and SQLite; MySQL's repeatable
# read would answer from the snapshot its transaction began with).
_SDK_WRITES = (SQLAlchemySession.add_items, SQLAlchemySession._serialize_item)
_READS_AFTER_LOCK = frozenset({"postgresql", "sqlite"})


@functools.lru_cache(maxsize=64)
def _newest_statement(name: str, schema: str | None) -> Select[tuple[Any, Any]]:
    """A table's ``(id, message_data)`` rows of one session, newest first, for every store.

    Built over a table clause of its own, not the store's ``Table``: a statement over the
    store's columns memoises comparators on them, about 4 KB per store, which a server
    holding thousands of stores (each with its own ``Table`` when not built by
    ``memstack.backends.prototypes``) would pay for each.
    """
    messages = table(
        name,
        column("id"),
        column("message_data"),
        column("session_id"),
        column("created_at"),
        schema=schema,
    )
    return (
        select(messages.c.id, messages.c.message_data)
        .where(messages.c.session_id == bindparam("session_id"))
        .order_by(messages.c.created_at.desc(), messages.c.id.desc())
    )


@functools.lru_cache(maxsize=256)
def _newest_limited(name: str, schema: str | None, window: int) -> Select[tuple[Any, Any]]:
    """``_newest_statement`` limited to ``window`` rows, built once: SQLAlchemy memoises a
    statement's cache key on the statement, so a new one costs a key each execution."""
    return _newest_statement(name, schema).limit(window)


@functools.lru_cache(maxsize=64)
def _newest_adaptive(messages: str) -> TextClause:
    """The ``(id, message_data)`` rows of one session, newest first, limited to ``:window``
    rows, or to all of them when the session holds at most ``:whole_up_to`` (PostgreSQL
    and SQLite take a subquery in LIMIT); ``messages``: the table, quoted for the dialect.

    A read with nothing to go by (a new process's first) then takes a small session in one
    statement, not a read of ``:window`` rows, a count and a read of them all. The count
    stops at ``:whole_up_to + 1`` rows: a long session costs no more to count than a
    short one. Written as SQL text: a new engine compiles it in a fifth of the time the
    same statement built of clauses took, and a new process's first read pays that.
    """
    sql = (
        f"SELECT id, message_data FROM {messages} WHERE session_id = :session_id "
        "ORDER BY created_at DESC, id DESC LIMIT CASE WHEN (SELECT count(*) FROM "
        f"(SELECT 1 FROM {messages} WHERE session_id = :session_id "
        "LIMIT :whole_up_to + 1) AS capped) <= :whole_up_to "
        "THEN :whole_up_to + 1 ELSE :window END"
    )
    return text(sql).bindparams(
        bindparam("whole_up_to", type_=Integer), bindparam("window", type_=Integer)
    )


_ADAPTIVE_DIALECTS = frozenset({"postgresql", "sqlite"})


@functools.lru_cache(maxsize=64)
def _touch_statement(name: str, schema: str | None) -> Update:
    """Lock one session's row by touching it, as the SDK's writes touch it after inserting.

    PostgreSQL's UPDATE takes the row lock that conflicts with the SDK's ``FOR UPDATE`` and
    with itself, so writers serialise as they do through ``_lock_session``; the touch sets
    ``CURRENT_TIMESTAMP``, the transaction's start, whenever in it it runs. RETURNING says
    whether the row exists (a first write creates it the SDK's way).
    """
    sessions = table(name, column("session_id"), column("updated_at"), schema=schema)
    return (
        update(sessions)
        .where(sessions.c.session_id == bindparam("sid"))
        .values(updated_at=text("CURRENT_TIMESTAMP"))
        .returning(sessions.c.session_id)
    )


class _NothingToWrite(Exception):
    """Rolls back a write whose ``compose`` made nothing: the touch must not stay."""


@asynccontextmanager
async def _reading(store: SQLAlchemySession) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
    """``execute`` for the statements of one read.

    On PostgreSQL outside any transaction: each statement reads one snapshot of its own,
    which is all a read of the newest rows needs (a longer read starts over), and the
    driver sends no BEGIN and ROLLBACK around it. Elsewhere in the SDK's session: MySQL's
    AUTOCOMMIT costs a statement each way, and SQLite may share one connection.
    """
    if store.engine.dialect.name != "postgresql":
        async with store._session() as sess:
            yield sess.execute
        return
    async with store._connection_guard():
        opened = AsyncExitStack()
        try:
            conn = await opened.enter_async_context(store.engine.connect())
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            yield conn.execute
        finally:
            # As the SDK's reads: a cancelled read still hands its connection back whole.
            await _await_mutation(opened.aclose())


async def _lock_and_touch(store: SQLAlchemySession, sess: AsyncSession) -> bool:
    """Take the SDK's row lock for a write; True when that also touched ``updated_at``.

    On PostgreSQL one UPDATE does both for a session that exists; elsewhere, or for a
    first write, the SDK's ``_lock_session`` (which creates the row).
    """
    if store.engine.dialect.name == "postgresql":
        sessions = store._sessions
        touch = _touch_statement(sessions.name, sessions.schema)
        found = await sess.execute(touch, {"sid": store.session_id})
        if found.first() is not None:
            return True
    await store._lock_session(sess, create=True)
    return False


class SQLAlchemyCapabilities(sql.PlanCapabilities):
    """Adapter for ``agents.extensions.memory.SQLAlchemySession``."""

    session: SQLAlchemySession
    #: How transactions the database rolled back are rerun (a subclass may set another).
    retry: ClassVar[Retry] = DEFAULT_RETRY
    reads_whole_up_to: ClassVar[bool] = True  # on PostgreSQL and SQLite; elsewhere ignored

    def place(self) -> Hashable:
        url = self.session.engine.url
        if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
            return super().place()  # an in-memory database is the engine's own
        return (str(url), self.session._messages.name)

    async def transaction(self, call: Callable[[], Awaitable[T]]) -> T:
        store = self.session
        where = f"{type(store).__name__}({store.engine.url.render_as_string(hide_password=True)})"
        return await self.retry.call(call, store=where, session_id=store.session_id)

    def table(self) -> sql.Table:
        # The SDK orders history by (created_at, id); so do the plans.
        return sql.Table(self.session._messages.name, self.session.session_id, ("created_at", "id"))

    def written_before(self, older_than: float) -> tuple[str, dict[str, Any]]:
        # created_at holds the database's CURRENT_TIMESTAMP; compare against its own clock.
        dialect = self.session.engine.dialect.name
        if dialect == "sqlite":
            from memstack.backends.sqlite import sqlite_written_before

            return sqlite_written_before(older_than)
        if dialect == "postgresql":
            return "LOCALTIMESTAMP - make_interval(secs => :age)", {"age": float(older_than)}
        if dialect in ("mysql", "mariadb"):
            return "NOW(6) - INTERVAL :age MICROSECOND", {"age": round(older_than * 1e6)}
        raise CapabilityError(
            f"delete_written_before does not know how {dialect} computes a past timestamp"
        )

    def write_age(self) -> str:
        dialect = self.session.engine.dialect.name
        if dialect == "sqlite":
            from memstack.backends.sqlite import SQLITE_WRITE_AGE

            return SQLITE_WRITE_AGE
        if dialect == "postgresql":
            return "EXTRACT(EPOCH FROM (LOCALTIMESTAMP - created_at))"
        if dialect in ("mysql", "mariadb"):
            return "TIMESTAMPDIFF(MICROSECOND, created_at, NOW(6)) / 1000000.0"
        raise CapabilityError(f"write_ages does not know how {dialect} computes an age")

    async def read_newest(
        self, n: int, *, wrapper: RunContextWrapper[Any] | None = None, whole_up_to: int = 0
    ) -> Tail:
        store = self.session
        if type(store)._deserialize_item is not _SDK_DESERIALIZE or n <= 0:
            return await super().read_newest(n, wrapper=wrapper)
        messages = store._messages
        name, schema = messages.name, messages.schema
        params = {"session_id": store.session_id}
        place = (str(store.engine.url), messages.name)  # a str: hashed once, not per row
        if whole_up_to <= n or store.engine.dialect.name not in _ADAPTIVE_DIALECTS:
            whole_up_to = 0
        with store_errors(store):
            await store._ensure_tables()
            async with _reading(store) as execute:

                async def fetch(window: int, up_to: int) -> Sequence[Any]:
                    if up_to:
                        adaptive = {**params, "window": window, "whole_up_to": up_to}
                        quoted = store.engine.dialect.identifier_preparer.format_table(messages)
                        found = await execute(_newest_adaptive(quoted), adaptive)
                    else:
                        found = await execute(_newest_limited(name, schema, window), params)
                    rows: Sequence[Any] = found.all()
                    return rows

                return await newest_rows(
                    fetch, n, store=place, session_id=store.session_id, whole_up_to=whole_up_to
                )

    async def append_after(
        self,
        compose: Callable[[Tail], Sequence[Any] | None],
        *,
        first: int,
        wrapper: RunContextWrapper[Any] | None = None,
    ) -> None:
        """One transaction: the SDK's row lock, the newest rows, then the SDK's insert.

        Its rows are read after the lock is granted, in a statement of their own, so they
        include every write committed before it (a statement that waited for the lock
        would answer from the snapshot it began with).
        """
        store = self.session
        kind = type(store)
        if (
            (kind.add_items, kind._serialize_item) != _SDK_WRITES
            or kind._deserialize_item is not _SDK_DESERIALIZE
            or store.engine.dialect.name not in _READS_AFTER_LOCK
        ):
            await super().append_after(compose, first=first, wrapper=wrapper)
            return
        messages = store._messages
        name, schema = messages.name, messages.schema
        params = {"session_id": store.session_id}
        place = (str(store.engine.url), messages.name)

        async def attempt() -> None:
            async with store._session() as sess, sess.begin():
                touched = await _lock_and_touch(store, sess)

                async def fetch(window: int, _: int) -> Sequence[Any]:
                    rows: Sequence[Any] = (
                        await sess.execute(_newest_limited(name, schema, window), params)
                    ).all()
                    return rows

                def read(n: int) -> Awaitable[Tail]:
                    return newest_rows(fetch, n, store=place, session_id=store.session_id)

                values = await composed(read, compose, first=first, session_id=store.session_id)
                if not values:
                    if touched:
                        raise _NothingToWrite
                    return
                payload = [
                    {"session_id": store.session_id, "message_data": await store._serialize_item(v)}  # type: ignore[arg-type]
                    for v in values
                ]
                await sess.execute(insert(messages), payload)
                if not touched:
                    await sess.execute(
                        update(store._sessions)
                        .where(store._sessions.c.session_id == store.session_id)
                        .values(updated_at=text("CURRENT_TIMESTAMP"))
                    )

        with store_errors(store):
            await store._ensure_tables()
            # As the SDK's writes: a cancelled caller still waits for the commit's outcome.
            with suppress(_NothingToWrite):
                await self.transaction(
                    lambda: _await_mutation(store._run_sqlite_write_with_retry(attempt))
                )

    async def query(self, make_plan: Callable[[], sql.Plan]) -> Any:
        # A read (a count): the session's row lock would only make it wait for writers, and
        # on PostgreSQL it runs outside any transaction, as the rows' reads do (``_reading``).
        store = self.session
        with store_errors(store):
            await store._ensure_tables()
            async with _reading(store) as run:

                async def execute(statement: str, params: dict[str, Any]) -> list[Any]:
                    return list((await run(text(statement), params)).all())

                return await sql.run_async(execute, make_plan())

    async def run(self, make_plan: Callable[[], sql.Plan]) -> Any:
        store = self.session

        async def attempt() -> Any:
            async with store._session() as sess, sess.begin():
                await store._lock_session(sess)

                async def execute(statement: str, params: dict[str, Any]) -> list[Any]:
                    result = await sess.execute(text(statement), params)
                    return list(result.all()) if result.returns_rows else []  # type: ignore[attr-defined]

                return await sql.run_async(execute, make_plan())

        with store_errors(store):
            await store._ensure_tables()
            return await self.transaction(lambda: store._run_sqlite_write_with_retry(attempt))


class MySQLSQLAlchemySession(SQLAlchemySession):
    """SQLAlchemySession that creates its tables on MySQL/MariaDB.

    The SDK's schema declares VARCHAR without a length, which MySQL refuses; this
    subclass changes only table creation. Storage and queries are the SDK's.
    """

    def __init__(self, session_id: str, *, engine: Any, **options: Any) -> None:
        super().__init__(session_id, engine=engine, create_tables=False, **options)
        self._tables_ready = False

    async def _ensure_tables(self) -> None:
        if not self._tables_ready:
            await prepare_mysql_tables(self.engine, self._sessions.name, self._messages.name)
            self._tables_ready = True


ADAPTERS: dict[type, type[StorageCapabilities]] = {
    SQLAlchemySession: SQLAlchemyCapabilities,
    MySQLSQLAlchemySession: SQLAlchemyCapabilities,
}
