"""Reading and changing a session's rows in the store itself, bypassing every session object.

Tests use these to check what a layer really left in the database, and to age rows the
way only time (or another process) could.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from typing import Any

from sqlalchemy import text

from .conftest import REDIS_URL, Store


async def stored(store: Store, session_id: str) -> list[Any]:
    """The session's values as the database holds them, bypassing every session object."""
    if store.backend == "memory":
        return [json.loads(row) for row in store.opened[session_id].rows]  # type: ignore[attr-defined]
    if store.backend == "redis":
        import redis.asyncio as redis

        client = redis.from_url(REDIS_URL)
        try:
            raw = await client.lrange(f"{store.redis_prefix}:{session_id}:messages", 0, -1)
        finally:
            await client.aclose()
        return [json.loads(value) for value in raw]
    query = "SELECT message_data FROM agent_messages WHERE session_id = :sid ORDER BY id"
    if store.engine is not None:
        async with store.engine.connect() as conn:
            rows = (await conn.execute(text(query), {"sid": session_id})).all()
    elif store.backend == "sqlite-memory":
        session: Any = store.opened[session_id]
        with session._locked_connection() as conn:
            rows = conn.execute(query, {"sid": session_id}).fetchall()
    else:
        with sqlite3.connect(store.url.split(":///", 1)[1]) as conn:
            rows = conn.execute(query, {"sid": session_id}).fetchall()
    return [json.loads(row[0]) for row in rows]


async def backdate(store: Store, session_id: str, n: int) -> None:
    """Set the store's own ``created_at`` of the ``n`` oldest rows to the year 2000."""
    old: Any = datetime(2000, 1, 1)
    select = "SELECT id FROM agent_messages WHERE session_id = :sid ORDER BY id LIMIT :n"
    update = "UPDATE agent_messages SET created_at = :old WHERE id = :id"
    if store.engine is not None:
        async with store.engine.begin() as conn:
            rows = await conn.execute(text(select), {"sid": session_id, "n": n})
            ids = [row[0] for row in rows]
            for row_id in ids:
                await conn.execute(text(update), {"old": old, "id": row_id})
        return
    old = "2000-01-01 00:00:00"
    if store.backend == "sqlite-memory":
        session: Any = store.opened[session_id]
        with session._locked_connection() as conn:
            ids = [r[0] for r in conn.execute(select, {"sid": session_id, "n": n})]
            conn.executemany(update, [{"old": old, "id": i} for i in ids])
            conn.commit()
        return
    with sqlite3.connect(store.url.split(":///", 1)[1]) as conn:
        ids = [r[0] for r in conn.execute(select, {"sid": session_id, "n": n})]
        conn.executemany(update, [{"old": old, "id": i} for i in ids])
