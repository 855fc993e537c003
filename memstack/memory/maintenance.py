"""Maintenance: apply a consolidation plan, re-seal under a new key, embed what has no vector.

    >>> import asyncio
    >>> from memstack.memory import MemoryStore
    >>> from memstack.memory.maintenance import apply_consolidation
    >>> from memstack.memory.consolidate import Change
    >>> async def demo():
    ...     store = MemoryStore.from_url("sqlite://:memory:")
    ...     note = await store.remember("ana", "Old draft of the plan")
    ...     flag = Change("flag", note.id, "stale")
    ...     await apply_consolidation(
    ...         store.engine, store.tables, store.index, "ana", [flag],
    ...         actor="demo", clock=lambda: 1.0,
    ...     )
    ...     flagged = (await store.get("ana", note.id)).needs_review
    ...     actions = [event.action for event in await store.history(note.id)]
    ...     await store.close()
    ...     return flagged, actions
    >>> asyncio.run(demo())
    (True, ['remembered', 'flagged'])

The plans are pure (``memstack.memory.consolidate``); these functions are their storage
side, each in one transaction with its audit events, and none deletes a memory: that is
``memstack.memory.forgetting``'s job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import and_, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from memstack.backends.translate import store_errors
from memstack.memory.cipher import MemoryCipher
from memstack.memory.consolidate import Change
from memstack.memory.events import log_event
from memstack.memory.fulltext import FullTextIndex
from memstack.memory.queries import live
from memstack.memory.rows import memory_from_row, row_values
from memstack.memory.schema import Tables
from memstack.memory.semantic import SemanticIndex, reseal_vectors
from memstack.memory.writing import mark_superseded

__all__ = ["apply_consolidation", "embed_missing", "rotate"]

_LAYER = "MemoryStore"


async def apply_consolidation(
    engine: AsyncEngine,
    tables: Tables,
    index: FullTextIndex,
    scope: str,
    changes: Sequence[Change],
    *,
    actor: str,
    clock: Callable[[], float],
) -> None:
    """Apply planned merges, supersessions, expiries and review flags in one transaction."""
    m = tables.memories
    now = float(clock())
    with store_errors(None, layer=_LAYER, doing="consolidating memories"):
        async with engine.begin() as conn:
            for change in changes:
                values: dict[str, object]
                if change.action in ("merge", "supersede"):
                    assert change.by is not None
                    await mark_superseded(
                        conn,
                        tables,
                        index,
                        scope,
                        [change.memory_id],
                        change.by,
                        actor=actor,
                        reason=change.reason,
                        clock=clock,
                    )
                    continue
                if change.action == "expire":
                    values, action = {"expires_at": now}, "expired"
                elif change.action == "flag":
                    values, action = {"needs_review": True}, "flagged"
                else:
                    continue
                await conn.execute(update(m).where(m.c.id == change.memory_id).values(**values))
                await log_event(
                    conn,
                    tables,
                    [(change.memory_id, scope)],
                    action,
                    actor=actor,
                    at=float(clock()),
                    detail={"reason": change.reason},
                )
    index.invalidate(scope)


async def rotate(
    engine: AsyncEngine,
    tables: Tables,
    cipher: MemoryCipher,
    index: FullTextIndex,
    scope: str | None,
    *,
    actor: str,
    clock: Callable[[], float],
) -> int:
    """Re-seal and re-index memories (and vectors) under older keys with the active key."""
    m, t = tables.memories, tables.terms
    where = m.c.kid != cipher.active_kid
    if scope is not None:
        where = and_(where, m.c.scope == scope)
    rotated = 0
    with store_errors(None, layer=_LAYER, doing="rotating memory keys"):
        async with engine.begin() as conn:
            rows = (await conn.execute(select(m).where(where))).all()
            for row in rows:
                memory = memory_from_row(cipher, row)
                values = row_values(cipher, memory)
                await conn.execute(
                    update(m)
                    .where(m.c.id == memory.id)
                    .values(
                        kid=values["kid"],
                        payload=values["payload"],
                        key_digest=values["key_digest"],
                    )
                )
                await conn.execute(delete(t).where(t.c.memory_id == memory.id))
                if memory.superseded_at is None:
                    mean = await index.mean_length(conn, memory.scope, [memory])
                    await conn.execute(insert(t), index.postings(memory, mean))
                rotated += 1
            await log_event(
                conn,
                tables,
                [(r.id, r.scope) for r in rows],
                "rotated",
                actor=actor,
                at=float(clock()),
            )
            await reseal_vectors(conn, tables, cipher, scope)
    return rotated


async def embed_missing(
    engine: AsyncEngine,
    tables: Tables,
    cipher: MemoryCipher,
    semantic: SemanticIndex,
    scope: str,
    *,
    batch_size: int,
    clock: Callable[[], float],
) -> int:
    """Embed the scope's live memories without a vector from ``semantic``'s embedder."""
    m, v = tables.memories, tables.vectors
    embedded = select(v.c.memory_id).where(v.c.scope == scope, v.c.model == semantic.embedder.name)
    query = (
        select(m)
        .where(m.c.scope == scope, m.c.id.not_in(embedded), live(m, float(clock())))
        .order_by(m.c.created_at, m.c.id)
    )
    with store_errors(None, layer=_LAYER, doing="reading memories to embed"):
        async with engine.connect() as conn:
            missing = [memory_from_row(cipher, row) for row in await conn.execute(query)]
    for start in range(0, len(missing), batch_size):
        chunk = missing[start : start + batch_size]
        vectors = await semantic.embed([memory.text for memory in chunk])
        with store_errors(None, layer=_LAYER, doing="storing vectors"):
            async with engine.begin() as conn:
                await semantic.write(conn, chunk, vectors)
    return len(missing)
