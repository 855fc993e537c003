"""Operations over every session of one store: list, delete, and memstack's side tables.

    >>> import asyncio
    >>> from memstack.backends import open_backend
    >>> from memstack.backends.whole_store import whole_store
    >>> store = open_backend("sqlite://:memory:", "ann:t1")
    >>> asyncio.run(store.add_items([{"role": "user", "content": "hi"}]))
    >>> [(s.session_id, s.items) for s in asyncio.run(whole_store(store).list_sessions())]
    [('ann:t1', 1)]

The SDK's sessions each see one session id; retention jobs, "forget this user" and the
redaction vault need the whole store. ``whole_store(session)`` gives the adapter for the
store that ``session`` lives in (SQLite, aiosqlite, SQLAlchemy on any database, Redis),
matched by exact type like the capability adapters; other sessions raise
``CapabilityError``. Side tables live in the same database as the sessions:
``agent_sessions_vault`` and ``agent_sessions_audit`` (named after the sessions table)
on SQL stores, ``<prefix>::memstack:…`` keys on Redis.
"""

from __future__ import annotations

from agents.memory import Session

from memstack.backends.whole_base import AuditRow, SessionInfo, WholeStore
from memstack.errors import CapabilityError

__all__ = ["AuditRow", "SessionInfo", "WholeStore", "whole_store"]


def whole_store(session: Session) -> WholeStore:
    """The store-wide adapter for the store ``session`` lives in (its bottom session)."""
    from memstack.base import iter_chain

    *_, store = iter_chain(session)
    from memstack.backends.whole_sql import sql_whole_store

    sql = sql_whole_store(store)
    if sql is not None:
        return sql
    try:
        from memstack.backends.whole_redis import RedisWholeStore, is_redis_session
    except ImportError:  # the redis extra is not installed
        pass
    else:
        if is_redis_session(store):
            return RedisWholeStore(store)
    raise CapabilityError(
        f"{type(store).__name__} cannot list or address the other sessions of its store; "
        "whole-store operations work on SQLiteSession, AsyncSQLiteSession, "
        "SQLAlchemySession and RedisSession"
    )
