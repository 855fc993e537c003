"""Which sessions a store holds: for maintenance that walks every session of a deployment.

    >>> import asyncio
    >>> from memstack.backends import open_backend
    >>> from memstack.backends.sessions import session_ids
    >>> store = open_backend("sqlite://:memory:", "user-1")
    >>> asyncio.run(store.add_items([{"role": "user", "content": "hi"}]))
    >>> asyncio.run(session_ids(store))
    ['user-1']

Any session object of a store answers for the whole store (its table, its key prefix):
SQL stores list the distinct ``session_id`` of the SDK's messages table; Redis scans the
session keys under the store's key prefix. Sessions with no stored item are not listed.
Other stores raise ``CapabilityError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from agents.memory import Session, SQLiteSession

from memstack.backends.translate import store_errors
from memstack.errors import CapabilityError

__all__ = ["session_ids"]

_DISTINCT = "SELECT DISTINCT session_id FROM {table}"


async def session_ids(store: Session) -> list[str]:
    """Every session id with stored items in the store behind ``store``, sorted."""
    lister = _listers().get(type(store))
    if lister is None:
        raise CapabilityError(
            f"{type(store).__name__} cannot list its sessions; name them one by one"
        )
    with store_errors(store, doing=f"listing the sessions of {type(store).__name__}"):
        return sorted(await lister(store))


async def _sqlite(store: Any) -> list[str]:
    def read() -> list[str]:
        with store._locked_connection() as conn:
            rows = conn.execute(_DISTINCT.format(table=store.messages_table)).fetchall()
        return [row[0] for row in rows]

    return await asyncio.to_thread(read)


async def _aiosqlite(store: Any) -> list[str]:
    async with store._write_connection() as conn:
        cursor = await conn.execute(_DISTINCT.format(table=store.messages_table))
        return [row[0] for row in await cursor.fetchall()]


async def _sqlalchemy(store: Any) -> list[str]:
    from sqlalchemy import text

    await store._ensure_tables()
    async with store._session() as sess:
        result = await sess.execute(text(_DISTINCT.format(table=store._messages.name)))
        return [row[0] for row in result.all()]


async def _redis(store: Any) -> list[str]:
    prefix, suffix = f"{store._key_prefix}:", ":messages"
    found: list[str] = []
    async for key in store._redis.scan_iter(match=f"{prefix}*{suffix}", count=500):
        name = key.decode() if isinstance(key, bytes) else str(key)
        found.append(name[len(prefix) : -len(suffix)])
    return found


def _listers() -> dict[type, Callable[[Any], Awaitable[list[str]]]]:
    listers: dict[type, Callable[[Any], Awaitable[list[str]]]] = {SQLiteSession: _sqlite}
    try:
        from agents.extensions.memory import AsyncSQLiteSession, SQLAlchemySession

        from memstack.backends.sqlalchemy_store import MySQLSQLAlchemySession

        listers[AsyncSQLiteSession] = _aiosqlite
        listers[SQLAlchemySession] = _sqlalchemy
        listers[MySQLSQLAlchemySession] = _sqlalchemy
    except ImportError:  # pragma: no cover - sqlalchemy and aiosqlite are dependencies
        pass
    try:
        from agents.extensions.memory import RedisSession

        listers[RedisSession] = _redis
    except ImportError:  # the redis extra is not installed
        pass
    return listers
