"""The store's vector side: write a memory's embedding, find a query's nearest memories.

    >>> from memstack.memory import MemoryStore
    >>> from memstack.memory.vectors import HashingEmbedder
    >>> store = MemoryStore.from_url("sqlite://:memory:", embedder=HashingEmbedder())

``MemoryStore`` owns the transaction; this module owns the vectors table and the per-scope
in-process indexes (``memstack.memory.vectors``), and fuses the two rankings with
reciprocal-rank fusion, which needs no calibration between BM25 scores and cosines.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from memstack.errors import ConfigurationError
from memstack.memory.cipher import MemoryCipher
from memstack.memory.models import Memory
from memstack.memory.schema import Tables
from memstack.memory.vectors import Embedder, VectorIndex, decode, encode

__all__ = ["SemanticIndex", "delete_vectors", "reciprocal_rank_fusion", "reseal_vectors"]

_LAYER = "MemoryStore"
# The usual RRF constant: a rank-1 hit in one list weighs about as much as rank 3 in both.
_RRF_K = 60
_SCOPES = 64  # indexes kept in memory (the least recently used scope is dropped)


def reciprocal_rank_fusion(*rankings: Sequence[str]) -> dict[str, float]:
    """Each id's summed ``1 / (k + rank)`` over the rankings it appears in."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, memory_id in enumerate(ranking, start=1):
            fused[memory_id] = fused.get(memory_id, 0.0) + 1.0 / (_RRF_K + rank)
    return fused


class SemanticIndex:
    """Vectors of one store's memories, for one embedder (checked by ``embedder_named``)."""

    def __init__(self, embedder: Embedder, tables: Tables, cipher: MemoryCipher) -> None:
        self.embedder = embedder
        self.tables = tables
        self.cipher = cipher
        self._indexes: dict[str, VectorIndex] = {}

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embeddings off the event loop: a model is CPU work."""
        vectors = await asyncio.to_thread(self.embedder.embed, list(texts))
        if len(vectors) != len(texts):
            raise ConfigurationError(
                f"embedder {self.embedder.name!r} returned {len(vectors)} vectors for "
                f"{len(texts)} texts",
                layer=_LAYER,
            )
        return vectors

    def rows(
        self, memories: Sequence[Memory], vectors: Sequence[Sequence[float]]
    ) -> list[dict[str, Any]]:
        kid = self.cipher.active_kid
        return [
            {
                "scope": memory.scope,
                "memory_id": memory.id,
                "model": self.embedder.name,
                "kid": kid,
                "vector": _seal(self.cipher, memory.scope, encode(vector)),
            }
            for memory, vector in zip(memories, vectors, strict=True)
        ]

    async def write(
        self, conn: AsyncConnection, memories: Sequence[Memory], vectors: Sequence[Sequence[float]]
    ) -> None:
        if memories:
            await conn.execute(insert(self.tables.vectors), self.rows(memories, vectors))

    async def nearest(
        self, conn: AsyncConnection, scope: str, query: Sequence[float], k: int
    ) -> list[str]:
        """Ids of the ``k`` nearest stored vectors (live or not: the caller filters)."""
        index = await self._refreshed(conn, scope)
        return [memory_id for memory_id, _ in index.nearest(query, k)]

    async def _refreshed(self, conn: AsyncConnection, scope: str) -> VectorIndex:
        index = self._indexes.pop(scope, None) or VectorIndex()
        self._indexes[scope] = index  # most recently used last
        while len(self._indexes) > _SCOPES:
            del self._indexes[next(iter(self._indexes))]
        v = self.tables.vectors
        rows = await conn.execute(
            select(v.c.seq, v.c.memory_id, v.c.vector)
            .where(v.c.scope == scope, v.c.model == self.embedder.name, v.c.seq > index.seq)
            .order_by(v.c.seq)
        )
        index.extend(
            (seq, memory_id, decode(_open(self.cipher, scope, stored)))
            for seq, memory_id, stored in rows
        )
        return index

    def drop(self, scope: str) -> None:
        """Forget the in-process index (a whole scope was deleted)."""
        self._indexes.pop(scope, None)


# Deleting and re-sealing need no embedder: a store opened without one (the CLI, a
# governance job) must still leave no vector of a forgotten memory behind.
async def delete_vectors(
    conn: AsyncConnection, tables: Tables, scope: str, ids: Sequence[str]
) -> None:
    v = tables.vectors
    await conn.execute(delete(v).where(v.c.scope == scope, v.c.memory_id.in_(ids)))


async def reseal_vectors(
    conn: AsyncConnection, tables: Tables, cipher: MemoryCipher, scope: str | None
) -> None:
    """Seal vectors written under older keys with the active key (key rotation)."""
    v = tables.vectors
    kid = cipher.active_kid
    query = select(v.c.seq, v.c.scope, v.c.vector).where(v.c.kid != kid)
    if scope is not None:
        query = query.where(v.c.scope == scope)
    for seq, row_scope, stored in (await conn.execute(query)).all():
        vector = _seal(cipher, row_scope, _open(cipher, row_scope, stored))
        await conn.execute(update(v).where(v.c.seq == seq).values(kid=kid, vector=vector))


def _seal(cipher: MemoryCipher, scope: str, encoded: str) -> str:
    return cipher.seal(scope, {"v": encoded}) if cipher.encrypted else encoded


def _open(cipher: MemoryCipher, scope: str, stored: str) -> str:
    if not cipher.encrypted:
        return stored
    payload: Mapping[str, Any] = cipher.open(scope, stored)
    return str(payload["v"])
