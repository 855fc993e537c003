"""Capabilities for the SDK's SQLiteSession and AsyncSQLiteSession.

Both run the shared SQL plans inside the session's own write connection and lock, so
they serialise with the session's own reads and writes; ``BEGIN IMMEDIATE`` makes each
operation one transaction against other processes too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agents.extensions.memory.async_sqlite_session import AsyncSQLiteSession
from agents.memory import SQLiteSession

import memstack.backends.sql as sql
from memstack.backends.capabilities import StorageCapabilities
from memstack.backends.translate import store_errors


class _SqliteBase(sql.PlanCapabilities):
    def table(self) -> sql.Table:
        session: Any = self.session
        return sql.Table(session.messages_table, session.session_id)

    def written_before(self, older_than: float) -> tuple[str, dict[str, Any]]:
        return sqlite_written_before(older_than)

    def write_age(self) -> str:
        return SQLITE_WRITE_AGE


# created_at is CURRENT_TIMESTAMP text; julianday() counts days, in the same UTC.
SQLITE_WRITE_AGE = "(julianday('now') - julianday(created_at)) * 86400.0"


def sqlite_written_before(older_than: float) -> tuple[str, dict[str, Any]]:
    # created_at is SQLite's CURRENT_TIMESTAMP text (UTC, whole seconds), as is datetime().
    return "datetime('now', :age)", {"age": f"-{older_than:.6f} seconds"}


class SQLiteCapabilities(_SqliteBase):
    """Adapter for ``agents.SQLiteSession`` (file or in-memory)."""

    session: SQLiteSession

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
