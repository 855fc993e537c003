"""Capabilities for the SDK's SQLiteSession and AsyncSQLiteSession.

Both run the shared SQL plans inside the session's own write connection and lock, so
they serialise with the session's own reads and writes; ``BEGIN IMMEDIATE`` makes each
operation one transaction against other processes too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, ClassVar

from agents.extensions.memory.async_sqlite_session import AsyncSQLiteSession
from agents.memory import SQLiteSession

import memstack.backends.sql as sql
from memstack.backends.capabilities import StorageCapabilities, Tail
from memstack.backends.rows import newest_rows
from memstack.backends.translate import store_errors

if TYPE_CHECKING:
    from agents.run_context import RunContextWrapper


class _SqliteBase(sql.PlanCapabilities):
    reads_whole_up_to: ClassVar[bool] = True

    def table(self) -> sql.Table:
        session: Any = self.session
        return sql.Table(session.messages_table, session.session_id)

    def written_before(self, older_than: float) -> tuple[str, dict[str, Any]]:
        return sqlite_written_before(older_than)

    def write_age(self) -> str:
        return SQLITE_WRITE_AGE

    async def read_newest(
        self, n: int, *, wrapper: RunContextWrapper[Any] | None = None, whole_up_to: int = 0
    ) -> Tail:
        if n <= 0:
            return await super().read_newest(n, wrapper=wrapper)
        return await self._read_raw(n, whole_up_to if whole_up_to > n else 0)

    async def _read_raw(self, n: int, whole_up_to: int) -> Tail:
        """The newest ``n`` rows (all, when ``whole_up_to`` or fewer), read raw through the
        session's own connection."""
        raise NotImplementedError

    def place(self) -> Hashable:
        where = self._where()
        return super().place() if ":memory:" in where[0] else where  # each its own database

    def _statement(self, window: int, whole_up_to: int) -> tuple[str, dict[str, Any]]:
        """The read of the newest rows and its parameters (``_newest`` or ``_adaptive``)."""
        params = {"session_id": self.session.session_id, "window": window}
        if not whole_up_to:
            return self._newest(), params
        return self._adaptive(), {**params, "whole_up_to": whole_up_to}

    def _where(self) -> tuple[str, str]:
        """The rows' place for the process cache: this database file and table."""
        session: Any = self.session
        return (str(session.db_path), session.messages_table)

    def _newest(self) -> str:
        # The SDK's own tail query (newest first by id), with the id for the row cache.
        session: Any = self.session
        return (
            f"SELECT id, message_data FROM {session.messages_table} "
            "WHERE session_id = :session_id ORDER BY id DESC LIMIT :window"
        )

    def _adaptive(self) -> str:
        """``_newest``, or every row when the session holds at most ``:whole_up_to``: a
        read with nothing to go by (a new process's first) takes a small session in one
        statement. The count stops at ``:whole_up_to + 1`` rows, whatever the session holds.
        """
        table = self.session.messages_table  # type: ignore[attr-defined]
        capped = f"SELECT 1 FROM {table} WHERE session_id = :session_id LIMIT :whole_up_to + 1"
        limit = (
            f"CASE WHEN (SELECT COUNT(*) FROM ({capped})) <= :whole_up_to "
            "THEN :whole_up_to + 1 ELSE :window END"
        )
        return self._newest().replace(":window", limit)


# created_at is CURRENT_TIMESTAMP text; julianday() counts days, in the same UTC.
SQLITE_WRITE_AGE = "(julianday('now') - julianday(created_at)) * 86400.0"


def sqlite_written_before(older_than: float) -> tuple[str, dict[str, Any]]:
    # created_at is SQLite's CURRENT_TIMESTAMP text (UTC, whole seconds), as is datetime().
    return "datetime('now', :age)", {"age": f"-{older_than:.6f} seconds"}


class SQLiteCapabilities(_SqliteBase):
    """Adapter for ``agents.SQLiteSession`` (file or in-memory)."""

    session: SQLiteSession

    async def _read_raw(self, n: int, whole_up_to: int) -> Tail:
        store = self.session

        def fetch_in_thread(window: int, up_to: int) -> list[Any]:
            statement, params = self._statement(window, up_to)
            with store._locked_connection() as conn:
                return conn.execute(statement, params).fetchall()

        async def fetch(window: int, up_to: int) -> list[Any]:
            return await asyncio.to_thread(fetch_in_thread, window, up_to)

        with store_errors(store):  # the SDK's read skips rows that are not JSON, or NULL
            return await newest_rows(
                fetch, n, store=self._where(), session_id=store.session_id,
                skip=(ValueError, TypeError), whole_up_to=whole_up_to,
            )  # fmt: skip

    async def run(self, make_plan: Callable[[], sql.Plan]) -> Any:
        def in_thread() -> Any:
            # The session's write connection rolls back if anything below raises.
            with self.session._write_connection() as conn:
                conn.execute("BEGIN IMMEDIATE")

                def execute(statement: str, params: dict[str, Any]) -> list[Any]:
                    return conn.execute(statement, params).fetchall()

                result = sql.run_sync(execute, make_plan())
                conn.commit()
                return result

        with store_errors(self.session):
            return await asyncio.to_thread(in_thread)


class AsyncSQLiteCapabilities(_SqliteBase):
    """Adapter for ``agents.extensions.memory.AsyncSQLiteSession``."""

    session: AsyncSQLiteSession

    async def _read_raw(self, n: int, whole_up_to: int) -> Tail:
        store = self.session
        with store_errors(store):
            async with store._locked_connection() as conn:

                async def fetch(window: int, up_to: int) -> list[Any]:
                    cursor = await conn.execute(*self._statement(window, up_to))
                    return list(await cursor.fetchall())

                return await newest_rows(
                    fetch, n, store=self._where(), session_id=store.session_id,
                    whole_up_to=whole_up_to,
                )  # fmt: skip

    async def run(self, make_plan: Callable[[], sql.Plan]) -> Any:
        with store_errors(self.session):
            async with self.session._write_connection() as conn:
                await conn.execute("BEGIN IMMEDIATE")

                async def execute(statement: str, params: dict[str, Any]) -> list[Any]:
                    cursor = await conn.execute(statement, params)
                    return list(await cursor.fetchall())

                result = await sql.run_async(execute, make_plan())
                await conn.commit()
                return result


ADAPTERS: dict[type, type[StorageCapabilities]] = {
    SQLiteSession: SQLiteCapabilities,
    AsyncSQLiteSession: AsyncSQLiteCapabilities,
}
__all__ = ["ADAPTERS", "AsyncSQLiteCapabilities", "SQLiteCapabilities"]
