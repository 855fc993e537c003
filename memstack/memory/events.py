"""The audit trail: what happened to a memory, who did it and when, never its text.

    >>> import asyncio
    >>> from sqlalchemy.ext.asyncio import create_async_engine
    >>> from memstack.memory.events import log_event, read_history
    >>> from memstack.memory.schema import tables
    >>> async def demo():
    ...     engine, t = create_async_engine("sqlite+aiosqlite://"), tables()
    ...     async with engine.begin() as conn:
    ...         await conn.run_sync(t.metadata.create_all)
    ...         await log_event(conn, t, [("m1", "ana")], "verified", actor="api", at=5.0)
    ...         events = await read_history(conn, t, "m1")
    ...     await engine.dispose()
    ...     return [(e.action, e.actor, e.at, e.scope) for e in events]
    >>> asyncio.run(demo())
    [('verified', 'api', 5.0, 'ana')]

Every module that changes memories (writing, forgetting, maintenance) logs in the same
transaction as the change, so the trail and the rows cannot disagree; a plain function of
the connection lets them share it without reaching into ``MemoryStore``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from memstack.memory.models import Event, Memory
from memstack.memory.schema import Tables

__all__ = ["delete_events", "log_event", "read_history"]


async def log_event(
    conn: AsyncConnection,
    tables: Tables,
    memories: Iterable[Memory] | Iterable[tuple[str, str]],
    action: str,
    *,
    actor: str,
    at: float,
    detail: Mapping[str, Any] | None = None,
) -> None:
    """One event per memory (a ``Memory`` or an ``(id, scope)`` pair); none for none."""
    encoded = json.dumps(dict(detail or {}), sort_keys=True)
    rows = []
    for entry in memories:
        memory_id, scope = (entry.id, entry.scope) if isinstance(entry, Memory) else entry
        rows.append(
            {
                "memory_id": memory_id,
                "scope": scope,
                "action": action,
                "actor": actor,
                "at": at,
                "detail": encoded,
            }
        )
    if rows:
        await conn.execute(insert(tables.events), rows)


async def read_history(conn: AsyncConnection, tables: Tables, memory_id: str) -> list[Event]:
    """Every event of ``memory_id``, oldest first."""
    e = tables.events
    rows = (await conn.execute(select(e).where(e.c.memory_id == memory_id).order_by(e.c.id))).all()
    return [
        Event(row.memory_id, row.scope, row.action, row.actor, row.at, json.loads(row.detail))
        for row in rows
    ]


async def delete_events(conn: AsyncConnection, tables: Tables, scope: str) -> None:
    """Drop the scope's events (erasing a user: the trail must not keep naming them)."""
    await conn.execute(delete(tables.events).where(tables.events.c.scope == scope))
