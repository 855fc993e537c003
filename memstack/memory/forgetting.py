"""Forgetting: the ways memory rows leave, and leave no text behind.

    >>> from memstack.memory import MemoryStore
    >>> from memstack.memory.forgetting import target
    >>> parts = MemoryStore.from_url("sqlite://:memory:").parts
    >>> whole = target(parts, "ana")
    >>> whole.scope, whole.whole_scope
    ('ana', True)
    >>> target(parts, "ana", key="diet").whole_scope
    False

Consolidation never deletes; these functions do, and each one removes a memory's row,
postings and vectors together and logs the deletion without the text. Where the database
keeps deleted bytes around (PostgreSQL's dead tuples) ``scrub`` rewrites the tables; SQLite
overwrites freed pages itself (``secure_delete``, ``memstack.memory.database``).
``target`` is separate from ``forget`` so the arguments are checked before the store
touches its database.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, and_, delete, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from memstack.backends.translate import store_errors
from memstack.errors import ConfigurationError
from memstack.memory.events import delete_events
from memstack.memory.models import check_scope
from memstack.memory.parts import LAYER, StoreParts
from memstack.memory.semantic import delete_vectors, forget_cached

__all__ = ["Target", "erase", "forget", "purge_expired", "scrub", "target"]

_BATCH = 500


@dataclass(frozen=True, slots=True)
class Target:
    """The memories a ``forget`` deletes: one id, one key's, or the whole scope's."""

    scope: str
    where: ColumnElement[bool]
    whole_scope: bool


def target(
    parts: StoreParts, scope: str, memory_id: str | None = None, *, key: str | None = None
) -> Target:
    """Check the arguments of a forget and say which rows it deletes."""
    check_scope(scope)
    if memory_id is not None and key is not None:
        raise ConfigurationError("give memory_id or key, not both", layer=LAYER)
    m = parts.tables.memories
    where = m.c.scope == scope
    if memory_id is not None:
        where = and_(where, m.c.id == memory_id)
    elif key is not None:
        where = and_(where, m.c.key_digest.in_(parts.cipher.key_digests(scope, key)))
    return Target(scope, where, memory_id is None and key is None)


async def forget(parts: StoreParts, chosen: Target, *, actor: str) -> int:
    """Delete the ``chosen`` memories; a whole scope is also scrubbed. Returns the count."""
    tables, scope = parts.tables, chosen.scope
    m, t = tables.memories, tables.terms

    async def delete_chosen(conn: AsyncConnection) -> list[str]:
        ids = list((await conn.execute(select(m.c.id).where(chosen.where))).scalars())
        for start in range(0, len(ids), _BATCH):
            batch = ids[start : start + _BATCH]
            await conn.execute(delete(t).where(t.c.scope == scope, t.c.memory_id.in_(batch)))
            await delete_vectors(conn, tables, scope, batch)
            await conn.execute(delete(m).where(m.c.id.in_(batch)))
        detail = {"whole_scope": True} if chosen.whole_scope else None
        await parts.log(conn, [(i, scope) for i in ids], "forgotten", actor=actor, detail=detail)
        return ids

    ids = await parts.transact("forgetting memories", delete_chosen)
    # Whatever the store's embedder (none: the CLI, a governance job), vectors cached by
    # any store on this engine go now.
    if ids:
        forget_cached(parts.engine, tables, scope, None if chosen.whole_scope else ids)
    if ids and chosen.whole_scope:
        with store_errors(None, layer=LAYER, doing="forgetting memories"):
            await scrub(parts)
    parts.index.invalidate(scope)
    return len(ids)


async def erase(parts: StoreParts, chosen: Target, *, actor: str) -> int:
    """Forget the ``chosen`` memories and every event of their scope. Returns the count."""
    count = await forget(parts, chosen, actor=actor)
    doing = "erasing the scope's memory events"

    async def delete_scope_events(conn: AsyncConnection) -> None:
        await delete_events(conn, parts.tables, chosen.scope)

    await parts.transact(doing, delete_scope_events)
    if parts.engine.dialect.name == "postgresql":  # dead tuples keep the scope's bytes
        async with parts.connect(doing) as conn:
            auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await auto.execute(text(f"VACUUM FULL {parts.tables.events.name}"))
    return count


async def scrub(parts: StoreParts) -> None:
    """On PostgreSQL, rewrite the tables that hold text or vectors; vacuum the index."""
    tables = parts.tables
    if parts.engine.dialect.name == "postgresql":
        async with parts.engine.connect() as conn:
            auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await auto.execute(text(f"VACUUM FULL {tables.memories.name}"))
            # Vectors leak meaning (and are plaintext when the store has no key).
            await auto.execute(text(f"VACUUM FULL {tables.vectors.name}"))
            await auto.execute(text(f"VACUUM {tables.terms.name}"))


async def purge_expired(parts: StoreParts, scope: str, *, actor: str) -> int:
    """Hard-delete the scope's memories whose expiry has passed. Returns the count."""
    m, t = parts.tables.memories, parts.tables.terms
    expired = select(m.c.id).where(m.c.scope == scope, m.c.expires_at <= parts.now())

    async def delete_expired(conn: AsyncConnection) -> list[str]:
        ids = list((await conn.execute(expired)).scalars())
        if ids:
            await conn.execute(delete(t).where(t.c.memory_id.in_(ids)))
            await delete_vectors(conn, parts.tables, scope, ids)
            await conn.execute(delete(m).where(m.c.id.in_(ids)))
            await parts.log(conn, [(i, scope) for i in ids], "expired", actor=actor)
        return ids

    ids = await parts.transact("purging expired memories", delete_expired)
    if ids:
        forget_cached(parts.engine, parts.tables, scope, ids)
    parts.index.invalidate(scope)
    return len(ids)
