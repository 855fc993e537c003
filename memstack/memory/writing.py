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
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from memstack.errors import ConfigurationError
from memstack.memory.models import (
    KINDS,
    SOURCES,
    Memory,
    Provenance,
    check_choice,
    check_confidence,
    check_scope,
)
from memstack.memory.parts import LAYER, StoreParts
from memstack.memory.rows import row_values

__all__ = ["DEFAULT_CONFIDENCE", "build_memory", "insert_memories", "mark_superseded", "verify"]

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
        raise ConfigurationError("text must be a non-empty string", layer=LAYER)
    if key is not None and (not isinstance(key, str) or not key.strip()):
        raise ConfigurationError("key must be a non-empty string or None", layer=LAYER)
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


async def insert_memories(parts: StoreParts, memories: Sequence[Memory], *, actor: str) -> None:
    """Store ``memories`` (and, with a semantic index, their vectors) in one transaction.

    An explicit memory with a key supersedes that key's older memories; an inferred one
    is stored beside them, and precedence puts the explicit statement first.
    """
    tables, cipher, index, semantic = parts.tables, parts.cipher, parts.index, parts.semantic
    # Embedding can be slow (a model call): done before the transaction opens.
    vectors = await semantic.embed([m.text for m in memories]) if semantic else []

    async def write(conn: AsyncConnection) -> None:
        # Rerun whole after a rollback: the same rows (ids were drawn before), postings
        # from statistics read again inside this transaction.
        for start in range(0, len(memories), _BATCH):
            batch = memories[start : start + _BATCH]
            await conn.execute(insert(tables.memories), [row_values(cipher, m) for m in batch])
            means = {
                scope: await index.mean_length(conn, scope, [m for m in batch if m.scope == scope])
                for scope in {m.scope for m in batch}
            }
            postings = [p for m in batch for p in index.postings(m, means[m.scope])]
            if postings:
                await conn.execute(insert(tables.terms), postings)
            if semantic is not None:
                await semantic.write(conn, batch, vectors[start : start + _BATCH])
            await parts.log(conn, batch, "remembered", actor=actor)
        for memory in memories:
            if memory.key is not None and memory.source == "explicit":
                await _supersede_key(parts, conn, memory, actor)

    await parts.transact("remembering", write)
    for scope in {m.scope for m in memories}:
        index.invalidate(scope)


async def _supersede_key(
    parts: StoreParts, conn: AsyncConnection, newer: Memory, actor: str
) -> None:
    assert newer.key is not None
    m = parts.tables.memories
    rows = (
        await conn.execute(
            select(m.c.id).where(
                m.c.scope == newer.scope,
                m.c.key_digest.in_(parts.cipher.key_digests(newer.scope, newer.key)),
                m.c.superseded_at.is_(None),
                m.c.id != newer.id,
                m.c.created_at <= newer.created_at,
            )
        )
    ).scalars()
    ids = list(rows)
    await mark_superseded(parts, conn, newer.scope, ids, newer.id, actor=actor, reason="same key")


async def mark_superseded(
    parts: StoreParts,
    conn: AsyncConnection,
    scope: str,
    ids: Sequence[str],
    by: str,
    *,
    actor: str,
    reason: str,
) -> None:
    """Mark ``ids`` superseded by ``by``: kept (non-destructive), but out of the index."""
    if not ids:
        return
    m, t = parts.tables.memories, parts.tables.terms
    now = parts.now()
    await conn.execute(
        update(m).where(m.c.id.in_(ids)).values(superseded_at=now, superseded_by=by, updated_at=now)
    )
    await conn.execute(delete(t).where(t.c.memory_id.in_(ids)))
    detail = {"superseded_by": by, "reason": reason}
    await parts.log(conn, [(i, scope) for i in ids], "superseded", actor=actor, detail=detail)
    parts.index.invalidate(scope)


async def verify(parts: StoreParts, memory: Memory, *, actor: str) -> Memory:
    """``memory`` marked as checked now (and no longer flagged for review)."""
    now = parts.now()
    m = parts.tables.memories

    async def mark(conn: AsyncConnection) -> None:
        await conn.execute(
            update(m)
            .where(m.c.id == memory.id)
            .values(last_verified_at=now, needs_review=False, updated_at=now)
        )
        await parts.log(conn, [memory], "verified", actor=actor)

    await parts.transact("verifying a memory", mark)
    return memory.evolve(last_verified_at=now, needs_review=False, updated_at=now)
