"""Recall's reads in one hand-off each to SQLite's thread: the driver's call, not the adapter's.

    >>> import asyncio
    >>> from memstack.memory import MemoryStore
    >>> from memstack.memory.fetch import fetch_all
    >>> async def demo():
    ...     store = MemoryStore.from_url("sqlite://:memory:", embedder=None)
    ...     async with store.engine.connect() as conn:
    ...         rows = await fetch_all(conn, "SELECT :a + 1 AS b", {"a": 41})
    ...     await store.close()
    ...     return [tuple(row) for row in rows]
    >>> asyncio.run(demo())
    [(42,)]

aiosqlite runs each call on the connection's own thread, and SQLAlchemy's adapter makes
four calls a statement (open a cursor, execute, fetch, close it): four wake-ups of that
thread and four of the event loop, each a wait for a core on a busy machine, and ~0.2 ms
of the adapter's Python (benchmarks/README.md, "One hand-off a statement"). Recall reads
three or four statements a turn; here each is one call, aiosqlite's ``execute_fetchall``.
Other drivers read through SQLAlchemy as before. The SQL is the same text either way:
named ``:params``, which sqlite3 binds as they are, and the statement's rows are plain
values on every path (text SQL has no column types to convert them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncConnection

__all__ = ["fetch_all"]

# Drivers whose connection runs ``execute_fetchall`` in one call on its thread.
_FAST_DRIVERS = frozenset({"aiosqlite"})


async def fetch_all(
    conn: AsyncConnection,
    sql: str,
    params: Mapping[str, Any],
    *,
    row: Callable[[Sequence[Any]], Any] | None = None,
) -> list[Any]:
    """The rows of ``sql``; with ``row`` (a named tuple's maker), each made by it, so
    columns read by name on every driver (SQLAlchemy's rows do already)."""
    if conn.dialect.driver in _FAST_DRIVERS:
        driver = (await conn.get_raw_connection()).driver_connection
        if driver is not None:
            found = await driver.execute_fetchall(sql, params)
            return [row(values) for values in found] if row is not None else list(found)
    return list((await conn.execute(_clause(sql), params)).all())


@lru_cache(maxsize=512)
def _clause(sql: str) -> TextClause:
    # ``text`` parses its parameters out of the SQL: once per statement, not per read.
    return text(sql)
