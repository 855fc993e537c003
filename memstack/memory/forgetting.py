"""Forgetting: the ways memory rows leave, and leave no text behind.

    >>> from memstack.memory.cipher import MemoryCipher
    >>> from memstack.memory.forgetting import target
    >>> from memstack.memory.schema import tables
    >>> whole = target(tables(), MemoryCipher(None), "ana")
    >>> whole.scope, whole.whole_scope
    ('ana', True)
    >>> target(tables(), MemoryCipher(None), "ana", key="diet").whole_scope
    False

Consolidation never deletes; these functions do, and each one removes a memory's row,
postings and vectors together and logs the deletion without the text. Where the database
keeps deleted bytes around (PostgreSQL's dead tuples) ``scrub`` rewrites the tables; SQLite
overwrites freed pages itself (``secure_delete``, ``memstack.memory.database``).
``target`` is separate from ``forget`` so the arguments are checked before the store
touches its database.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import ColumnElement, and_, delete, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from memstack.backends.translate import store_errors
from memstack.errors import ConfigurationError
from memstack.memory.cipher import MemoryCipher
from memstack.memory.events import delete_events, log_event
from memstack.memory.fulltext import FullTextIndex
from memstack.memory.models import check_scope
from memstack.memory.schema import Tables
from memstack.memory.semantic import SemanticIndex, delete_vectors

__all__ = ["Target", "erase", "forget", "purge_expired", "scrub", "target"]

_LAYER = "MemoryStore"
_BATCH = 500


@dataclass(frozen=True, slots=True)
class Target:
    """The memories a ``forget`` deletes: one id, one key's, or the whole scope's."""

    scope: str
    where: ColumnElement[bool]
    whole_scope: bool


def target(
    tables: Tables,
    cipher: MemoryCipher,
    scope: str,
    memory_id: str | None = None,
    *,
    key: str | None = None,
) -> Target:
    """Check the arguments of a forget and say which rows it deletes."""
    check_scope(scope)
    if memory_id is not None and key is not None:
        raise ConfigurationError("give memory_id or key, not both", layer=_LAYER)
    m = tables.memories
    where = m.c.scope == scope
    if memory_id is not None:
        where = and_(where, m.c.id == memory_id)
    elif key is not None:
        where = and_(where, m.c.key_digest.in_(cipher.key_digests(scope, key)))
    return Target(scope, where, memory_id is None and key is None)


async def forget(
    engine: AsyncEngine,
    tables: Tables,
    index: FullTextIndex,
    semantic: SemanticIndex | None,
    chosen: Target,
    *,
    actor: str,
    clock: Callable[[], float],
) -> int:
    """Delete the ``chosen`` memories; a whole scope is also scrubbed. Returns the count."""
    m, t = tables.memories, tables.terms
    scope = chosen.scope
    with store_errors(None, layer=_LAYER, doing="forgetting memories"):
        async with engine.begin() as conn:
            ids = list((await conn.execute(select(m.c.id).where(chosen.where))).scalars())
            for start in range(0, len(ids), _BATCH):
                batch = ids[start : start + _BATCH]
                await conn.execute(delete(t).where(t.c.scope == scope, t.c.memory_id.in_(batch)))
                await delete_vectors(conn, tables, scope, batch)
                await conn.execute(delete(m).where(m.c.id.in_(batch)))
            await log_event(
                conn,
                tables,
                [(i, scope) for i in ids],
                "forgotten",
                actor=actor,
                at=float(clock()),
                detail={"whole_scope": True} if chosen.whole_scope else None,
            )
        if ids and chosen.whole_scope:
            await scrub(engine, tables)
    if semantic is not None and chosen.whole_scope:
        semantic.drop(scope)
    index.invalidate(scope)
    return len(ids)


async def erase(
    engine: AsyncEngine,
    tables: Tables,
    index: FullTextIndex,
    semantic: SemanticIndex | None,
    chosen: Target,
    *,
    actor: str,
    clock: Callable[[], float],
) -> int:
    """Forget the ``chosen`` memories and every event of their scope. Returns the count."""
    count = await forget(engine, tables, index, semantic, chosen, actor=actor, clock=clock)
    events = tables.events
    with store_errors(None, layer=_LAYER, doing="erasing the scope's memory events"):
        async with engine.begin() as conn:
            await delete_events(conn, tables, chosen.scope)
        if engine.dialect.name == "postgresql":  # dead tuples keep the scope's bytes
            async with engine.connect() as conn:
                auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
                await auto.execute(text(f"VACUUM FULL {events.name}"))
    return count


async def scrub(engine: AsyncEngine, tables: Tables) -> None:
    """On PostgreSQL, rewrite the tables that hold text or vectors; vacuum the index."""
    if engine.dialect.name == "postgresql":
        async with engine.connect() as conn:
            auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await auto.execute(text(f"VACUUM FULL {tables.memories.name}"))
            # Vectors leak meaning (and are plaintext when the store has no key).
            await auto.execute(text(f"VACUUM FULL {tables.vectors.name}"))
            await auto.execute(text(f"VACUUM {tables.terms.name}"))


async def purge_expired(
    engine: AsyncEngine,
    tables: Tables,
    index: FullTextIndex,
    scope: str,
    *,
    actor: str,
    clock: Callable[[], float],
) -> int:
    """Hard-delete the scope's memories whose expiry has passed. Returns the count."""
    m, t = tables.memories, tables.terms
    now = float(clock())
    with store_errors(None, layer=_LAYER, doing="purging expired memories"):
        async with engine.begin() as conn:
            ids = list(
                (
                    await conn.execute(
                        select(m.c.id).where(m.c.scope == scope, m.c.expires_at <= now)
                    )
                ).scalars()
            )
            if ids:
                await conn.execute(delete(t).where(t.c.memory_id.in_(ids)))
                await delete_vectors(conn, tables, scope, ids)
                await conn.execute(delete(m).where(m.c.id.in_(ids)))
                await log_event(
                    conn,
                    tables,
                    [(i, scope) for i in ids],
                    "expired",
                    actor=actor,
                    at=float(clock()),
                )
    index.invalidate(scope)
    return len(ids)
