"""Writing memories: validate a new one, store a batch with its index rows, supersede by key.

    >>> from memstack.memory.writing import build_memory
    >>> memory = build_memory(
    ...     "ana", " Likes tea ", now=10.0, kind="preference", source="inferred", key=None,
    ...     data=None, confidence=None, valid_from=None, expires_at=None, verified=False,
    ...     provenance=None, context=None,
    ... )
    >>> memory.text, memory.confidence, memory.created_at
    ('Likes tea', 0.6, 10.0)

A memory, its full-text postings, its vector and its audit event are written in one
transaction, so a reader never finds a memory that recall cannot rank, nor an event
without its change. Superseding keeps the older rows (nothing is deleted by a newer
statement) but takes them out of the search index.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memstack.backends.translate import store_errors
from memstack.errors import ConfigurationError
from memstack.memory.cipher import MemoryCipher
from memstack.memory.events import log_event
from memstack.memory.fulltext import FullTextIndex
from memstack.memory.models import (
    KINDS,
    SOURCES,
    Memory,
    Provenance,
    check_choice,
    check_confidence,
    check_scope,
)
from memstack.memory.rows import row_values
from memstack.memory.schema import Tables
from memstack.memory.semantic import SemanticIndex

__all__ = ["DEFAULT_CONFIDENCE", "build_memory", "insert_memories", "mark_superseded", "verify"]

_LAYER = "MemoryStore"
DEFAULT_CONFIDENCE = {"explicit": 1.0, "feedback": 0.9, "observed": 0.8, "inferred": 0.6}
_BATCH = 500


def build_memory(
    scope: str,
    text: str,
    *,
    now: float,
    kind: str,
    source: str,
    key: str | None,
    data: Mapping[str, Any] | None,
    confidence: float | None,
    valid_from: float | None,
    expires_at: float | None,
    verified: bool,
    provenance: Provenance | None,
    context: str | None,
) -> Memory:
    """A validated, not yet stored memory; confidence defaults by source."""
    check_scope(scope)
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError("text must be a non-empty string", layer=_LAYER)
    if key is not None and (not isinstance(key, str) or not key.strip()):
        raise ConfigurationError("key must be a non-empty string or None", layer=_LAYER)
    check_choice("kind", kind, KINDS)
    check_choice("source", source, SOURCES)
    if confidence is None:
        confidence = DEFAULT_CONFIDENCE[source]
    return Memory(
        id=uuid.uuid4().hex,
        scope=scope,
        text=text.strip(),
        kind=kind,
        source=source,
        key=key.strip() if key is not None else None,
        data=data,
        confidence=check_confidence(confidence),
        created_at=now,
        updated_at=now,
        valid_from=valid_from,
        expires_at=expires_at,
        last_verified_at=now if verified else None,
        provenance=provenance or Provenance(),
        context=context or None,
    )


async def insert_memories(
    engine: AsyncEngine,
    tables: Tables,
    cipher: MemoryCipher,
    index: FullTextIndex,
    semantic: SemanticIndex | None,
    memories: Sequence[Memory],
    vectors: Sequence[Sequence[float]],
    *,
    actor: str,
    clock: Callable[[], float],
) -> None:
    """Store ``memories`` (and their ``vectors``, if ``semantic``) in one transaction.

    An explicit memory with a key supersedes that key's older memories; an inferred one
    is stored beside them, and precedence puts the explicit statement first.
    """
    with store_errors(None, layer=_LAYER, doing="remembering"):
        async with engine.begin() as conn:
            for start in range(0, len(memories), _BATCH):
                batch = memories[start : start + _BATCH]
                await conn.execute(insert(tables.memories), [row_values(cipher, m) for m in batch])
                means = {
                    scope: await index.mean_length(
                        conn, scope, [m for m in batch if m.scope == scope]
                    )
                    for scope in {m.scope for m in batch}
                }
                postings = [p for m in batch for p in index.postings(m, means[m.scope])]
                if postings:
                    await conn.execute(insert(tables.terms), postings)
                if semantic is not None:
                    await semantic.write(conn, batch, vectors[start : start + _BATCH])
                await log_event(conn, tables, batch, "remembered", actor=actor, at=float(clock()))
            for memory in memories:
                if memory.key is not None and memory.source == "explicit":
                    await _supersede_key(conn, tables, cipher, index, memory, actor, clock)
    for scope in {m.scope for m in memories}:
        index.invalidate(scope)


async def _supersede_key(
    conn: AsyncConnection,
    tables: Tables,
    cipher: MemoryCipher,
    index: FullTextIndex,
    newer: Memory,
    actor: str,
    clock: Callable[[], float],
) -> None:
    assert newer.key is not None
    m = tables.memories
    rows = (
        await conn.execute(
            select(m.c.id).where(
                m.c.scope == newer.scope,
                m.c.key_digest.in_(cipher.key_digests(newer.scope, newer.key)),
                m.c.superseded_at.is_(None),
                m.c.id != newer.id,
                m.c.created_at <= newer.created_at,
            )
        )
    ).scalars()
    await mark_superseded(
        conn,
        tables,
        index,
        newer.scope,
        list(rows),
        newer.id,
        actor=actor,
        reason="same key",
        clock=clock,
    )


async def mark_superseded(
    conn: AsyncConnection,
    tables: Tables,
    index: FullTextIndex,
    scope: str,
    ids: Sequence[str],
    by: str,
    *,
    actor: str,
    reason: str,
    clock: Callable[[], float],
) -> None:
    """Mark ``ids`` superseded by ``by``: kept (non-destructive), but out of the index."""
    if not ids:
        return
    m, t = tables.memories, tables.terms
    now = float(clock())
    await conn.execute(
        update(m).where(m.c.id.in_(ids)).values(superseded_at=now, superseded_by=by, updated_at=now)
    )
    await conn.execute(delete(t).where(t.c.memory_id.in_(ids)))
    await log_event(
        conn,
        tables,
        [(i, scope) for i in ids],
        "superseded",
        actor=actor,
        at=float(clock()),
        detail={"superseded_by": by, "reason": reason},
    )
    index.invalidate(scope)


async def verify(
    engine: AsyncEngine, tables: Tables, memory: Memory, *, actor: str, clock: Callable[[], float]
) -> Memory:
    """``memory`` marked as checked now (and no longer flagged for review)."""
    now = float(clock())
    m = tables.memories
    with store_errors(None, layer=_LAYER, doing="verifying a memory"):
        async with engine.begin() as conn:
            await conn.execute(
                update(m)
                .where(m.c.id == memory.id)
                .values(last_verified_at=now, needs_review=False, updated_at=now)
            )
            await log_event(conn, tables, [memory], "verified", actor=actor, at=float(clock()))
    return memory.evolve(last_verified_at=now, needs_review=False, updated_at=now)
