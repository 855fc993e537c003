"""Maintenance: apply a consolidation plan, re-seal under a new key, embed what has no vector.

    >>> import asyncio
    >>> from memstack.memory import MemoryStore
    >>> from memstack.memory.maintenance import apply_consolidation
    >>> from memstack.memory.consolidate import Change
    >>> async def demo():
    ...     store = MemoryStore.from_url("sqlite://:memory:")
    ...     note = await store.remember("ana", "Old draft of the plan")
    ...     flag = Change("flag", note.id, "stale")
    ...     await apply_consolidation(store.parts, "ana", [flag], actor="demo")
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

from collections.abc import Sequence

from sqlalchemy import and_, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from memstack.memory.consolidate import Change
from memstack.memory.models import Memory
from memstack.memory.parts import StoreParts
from memstack.memory.queries import live
from memstack.memory.rows import memory_from_row, row_values
from memstack.memory.semantic import reseal_vectors
from memstack.memory.writing import mark_superseded

__all__ = ["apply_consolidation", "embed_missing", "rotate"]


async def apply_consolidation(
    parts: StoreParts, scope: str, changes: Sequence[Change], *, actor: str
) -> None:
    """Apply planned merges, supersessions, expiries and review flags in one transaction."""
    m = parts.tables.memories
    now = parts.now()

    async def apply(conn: AsyncConnection) -> None:
        for change in changes:
            values: dict[str, object]
            if change.action in ("merge", "supersede"):
                assert change.by is not None
                await mark_superseded(
                    parts,
                    conn,
                    scope,
                    [change.memory_id],
                    change.by,
                    actor=actor,
                    reason=change.reason,
                )
                continue
            if change.action == "expire":
                values, action = {"expires_at": now}, "expired"
            elif change.action == "flag":
                values, action = {"needs_review": True}, "flagged"
            else:
                continue
            await conn.execute(update(m).where(m.c.id == change.memory_id).values(**values))
            detail = {"reason": change.reason}
            await parts.log(conn, [(change.memory_id, scope)], action, actor=actor, detail=detail)

    await parts.transact("consolidating memories", apply)
    parts.index.invalidate(scope)


async def rotate(parts: StoreParts, scope: str | None, *, actor: str) -> int:
    """Re-seal and re-index memories (and vectors) under older keys with the active key."""
    tables, cipher, index = parts.tables, parts.cipher, parts.index
    m, t = tables.memories, tables.terms
    where = m.c.kid != cipher.active_kid
    if scope is not None:
        where = and_(where, m.c.scope == scope)

    async def reseal(conn: AsyncConnection) -> int:
        rows = (await conn.execute(select(m).where(where))).all()
        for row in rows:
            memory = memory_from_row(cipher, row)
            values = row_values(cipher, memory)
            await conn.execute(
                update(m)
                .where(m.c.id == memory.id)
                .values({name: values[name] for name in ("kid", "payload", "key_digest")})
            )
            await conn.execute(delete(t).where(t.c.memory_id == memory.id))
            if memory.superseded_at is None:
                mean = await index.mean_length(conn, memory.scope, [memory])
                await conn.execute(insert(t), index.postings(memory, mean))
        await parts.log(conn, [(r.id, r.scope) for r in rows], "rotated", actor=actor)
        await reseal_vectors(conn, tables, cipher, scope)
        return len(rows)

    return await parts.transact("rotating memory keys", reseal)


async def embed_missing(parts: StoreParts, scope: str, *, batch_size: int) -> int:
    """Embed the scope's live memories without a vector from the store's embedder."""
    semantic = parts.semantic
    assert semantic is not None  # the store checks before touching the database
    m, v = parts.tables.memories, parts.tables.vectors
    embedded = select(v.c.memory_id).where(v.c.scope == scope, v.c.model == semantic.embedder.name)
    query = (
        select(m)
        .where(m.c.scope == scope, m.c.id.not_in(embedded), live(m, parts.now()))
        .order_by(m.c.created_at, m.c.id)
    )
    async with parts.connect("reading memories to embed") as conn:
        missing = [memory_from_row(parts.cipher, row) for row in await conn.execute(query)]
    for start in range(0, len(missing), batch_size):
        chunk = missing[start : start + batch_size]
        vectors = await semantic.embed([memory.text for memory in chunk])

        async def store(
            conn: AsyncConnection,
            chunk: list[Memory] = chunk,
            vectors: list[list[float]] = vectors,
        ) -> None:
            await semantic.write(conn, chunk, vectors)

        await parts.transact("storing vectors", store)
    return len(missing)
