"""The store's vector side: write a memory's embedding, find a query's nearest memories.

    >>> from memstack.memory import MemoryStore
    >>> from memstack.memory.vectors import HashingEmbedder
    >>> store = MemoryStore.from_url("sqlite://:memory:", embedder=HashingEmbedder())

``MemoryStore`` owns the transaction; this module owns the vectors table and the per-scope
in-process indexes (``memstack.memory.vectors``), and fuses the two rankings by a
weighted sum of normalised scores: BM25 divided by the best BM25 of the query, cosine
min-max scaled over the nearest hits. Unlike reciprocal-rank fusion it keeps how far
ahead a hit is, not only its rank: on LoCoMo it recalled 81.5% of the evidence at 1,000
tokens where rank fusion recalled 79.9% (``benchmarks/README.md``).
"""

from __future__ import annotations

import asyncio
import bisect
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

import memstack.cache as cache
from memstack.errors import ConfigurationError
from memstack.memory.cipher import MemoryCipher
from memstack.memory.fetch import fetch_all
from memstack.memory.gaps import FIRST_WINDOW, WINDOW, Gaps
from memstack.memory.models import Memory
from memstack.memory.schema import Tables
from memstack.memory.vectors import Embedder, decode, encode

if TYPE_CHECKING:
    from memstack.memory.quantized import Block

__all__ = [
    "ScopeVectors",
    "SemanticIndex",
    "delete_vectors",
    "forget_cached",
    "fuse_scores",
    "leading",
    "load_numpy",
    "reseal_vectors",
    "scope_key",
]

_LAYER = "MemoryStore"
# Equal weight to words and meaning, not tuned. Measured on LoCoMo (evidence recall at
# 1,000 tokens, MiniLM): weight 0.3 gave 81.7%, 0.5 81.5%, 0.7 74.2%.
SEMANTIC_WEIGHT = 0.5


def fuse_scores(
    lexical: Mapping[str, float],
    nearest: Sequence[tuple[str, float]],
    *,
    weight: float = SEMANTIC_WEIGHT,
) -> dict[str, float]:
    """Each id's ``(1 - weight) * words + weight * meaning``, both scaled to [0, 1].

    ``lexical``: BM25 totals; ``nearest``: (id, cosine) of the vector hits. An id missing
    from one side scores 0 there. The best BM25 maps to 1; cosines are min-max scaled
    over the hits (their absolute level varies by model and query; their spread does not).
    """
    best = max(lexical.values(), default=0.0)
    words = {i: score / best for i, score in lexical.items()} if best > 0 else {}
    high = max((cosine for _, cosine in nearest), default=0.0)
    low = min((cosine for _, cosine in nearest), default=0.0)
    spread = high - low
    meaning = {i: (cosine - low) / spread if spread > 0 else 1.0 for i, cosine in nearest}
    # In the inputs' order, not a set's: ids are strings, whose set order changes from
    # one process to the next, and a caller that takes the first of equal scores must
    # take the same one in every process.
    return {
        i: (1 - weight) * words.get(i, 0.0) + weight * meaning.get(i, 0.0)
        for i in dict.fromkeys([*words, *meaning])
    }


def leading(scores: Mapping[str, float], count: int) -> list[str]:
    """The ``count`` best-scored ids, equal scores by id: the same in every process."""
    return sorted(scores, key=lambda i: (-scores[i], i))[:count]


@dataclass(frozen=True, slots=True, eq=False)
class ScopeVectors:
    """What one scope's cached vectors are: blocks of rows by sequence number.

    Block ``i`` holds the rows with ``spans[i][0] < seq <= spans[i][1]`` (less those
    forgotten since); ``seq`` is the highest sequence number read, ``gaps`` the numbers
    below it not seen yet (``memstack.memory.gaps``). ``token`` names this
    reading's blocks in the cache: a scope read afresh gets new ones. A changed scope is
    a new value, so a reader that finds another value than it started from knows that
    what it built meanwhile may be stale, and keeps it to itself.
    """

    model: str
    token: str
    seq: int
    spans: tuple[tuple[int, int], ...]
    block_rows: int
    gaps: Gaps = field(default_factory=Gaps)

    def grown(
        self,
        blocks: Sequence[Block],
        rows: Sequence[tuple[int, str, Any]],
        gaps: Gaps | None = None,
    ) -> tuple[ScopeVectors, dict[int, Block]]:
        """With ``rows`` (seq, id, vector; in seq order) added: a late row (below
        ``seq``, a gap filled) joins the block whose span holds it; the others fill the
        last block to ``block_rows``, then new blocks. Returns the new value and the blocks
        it changed."""
        from memstack.memory.quantized import Block

        gaps = self.gaps if gaps is None else gaps
        if not rows and gaps == self.gaps:
            return self, {}
        spans = list(self.spans)
        changed: dict[int, Block] = {}
        ends = [end for _, end in spans]
        for seq, memory_id, vector in (row for row in rows if row[0] <= self.seq):
            i = min(bisect.bisect_left(ends, seq), len(spans) - 1)
            block = changed.get(i, blocks[i])
            if memory_id not in block.ids:  # a re-read of the block may have found it
                changed[i] = block.extended([memory_id], [vector])
        rest = [row for row in rows if row[0] > self.seq]
        last = len(spans) - 1
        if spans and len(tail := changed.get(last, blocks[-1])) < self.block_rows:
            free = self.block_rows - len(tail)
            room, rest = rest[:free], rest[free:]
            if room:
                changed[last] = tail.extended(*_columns(room))
                spans[-1] = (spans[-1][0], room[-1][0])
        for first in range(0, len(rest), self.block_rows):
            chunk = rest[first : first + self.block_rows]
            changed[len(spans)] = Block.build(*_columns(chunk))
            spans.append((spans[-1][1] if spans else 0, chunk[-1][0]))
        seq = max(self.seq, rows[-1][0]) if rows else self.seq
        return replace(self, seq=seq, spans=tuple(spans), gaps=gaps), changed


def _columns(rows: Sequence[tuple[int, str, Any]]) -> tuple[list[str], Any]:
    import numpy as np

    return [memory_id for _, memory_id, _ in rows], np.stack([vector for *_, vector in rows])


class SemanticIndex:
    """Vectors of one store's memories, for one embedder (checked by ``embedder_named``).

    A scope's vectors are read once per process into quantised blocks
    (``memstack.memory.quantized``) kept in the process cache (``memstack.cache``), shared
    by every store on the same engine and tables; each search first reads the rows added
    since (by sequence number), and those that committed late into numbers it had read
    past (``memstack.memory.gaps``), so other processes' writes are seen. Forgetting in this
    process takes the vectors out of the cache at once (``forget_cached``); rows another
    process deleted stay until the scope is read afresh, and are dropped when their
    memories are read live, as superseded ones are.
    """

    def __init__(
        self,
        embedder: Embedder,
        tables: Tables,
        cipher: MemoryCipher,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.embedder = embedder
        self.tables = tables
        self.cipher = cipher
        self.clock = clock  # ages the gaps (``memstack.memory.gaps``)
        # The rows a search reads first, added since the cached ones (``_rows``).
        self._added = (
            f"SELECT seq, memory_id, vector FROM {tables.vectors.name} WHERE scope = :scope "
            "AND model = :model AND seq > :after ORDER BY seq"
        )

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embeddings off the event loop: a model is CPU work."""
        load_numpy()
        return await asyncio.to_thread(self.embed_here, texts)

    def embed_here(self, texts: Sequence[str]) -> list[list[float]]:
        """Embeddings on the calling thread (a worker's: see ``embed``), checked."""
        vectors = self.embedder.embed(list(texts))
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

    def nearest(
        self, blocks: Sequence[Block], query: Sequence[float], k: int
    ) -> list[tuple[str, float]]:
        """The ``k`` nearest of ``blocks`` (``vectors``): ids and cosine similarities (the
        memories may have gone since: read them live)."""
        from memstack.memory.quantized import nearest

        return nearest(blocks, query, k)

    def second_hop(
        self, blocks: Sequence[Block], query: Sequence[float], found: Sequence[str], weight: float
    ) -> Any:
        """The query moved toward what the first search found (Rocchio feedback).

        A multi-hop question ("what activities does Melanie do?") is answered by several
        memories; the best ones it found are closer to the others than the question is.
        """
        from memstack.memory.quantized import centroid

        middle = centroid(blocks, found)
        if middle is None:
            return None
        import numpy as np

        vector = np.asarray(query, dtype=np.float32)
        return vector / max(float(np.linalg.norm(vector)), 1e-12) + weight * middle

    async def vectors(self, conn: AsyncConnection, scope: str) -> list[Block]:
        """The scope's vectors, with the rows stored since they were cached.

        Read them first in a search: a forget that commits after they are
        read then finds them in the cache and takes its vectors out, or finds them not
        yet put back and keeps them from being put back (``ScopeVectors``).
        """
        return await self._blocks(conn, scope)

    async def _blocks(self, conn: AsyncConnection, scope: str) -> list[Block]:
        key = scope_key(conn.engine, self.tables, scope)
        found = cache.get(key)
        name = self.embedder.name
        if isinstance(found, ScopeVectors) and found.model == name:
            vectors = found
        else:
            vectors = ScopeVectors(name, uuid.uuid4().hex, 0, (), _block_rows(self.embedder.dim))
        blocks: list[Block] = []
        reread: dict[int, Block] = {}
        for i, span in enumerate(vectors.spans):
            block = cache.get((*key, vectors.token, i))
            if block is cache.MISSING:  # evicted: read its rows again
                block = reread[i] = await self._read(conn, scope, span)
            blocks.append(block)
        gaps, late = await self._late(conn, scope, vectors.gaps)
        added = await self._rows(conn, scope, vectors.seq, None)
        if added and conn.dialect.name != "sqlite":  # SQLite commits in number order
            gaps = await self._gaps(conn, scope, gaps, vectors.seq, added)
        try:
            grown, changed = vectors.grown(blocks, [*late, *added], gaps)
        except ValueError as exc:  # vectors of another length under the same model name
            raise _mixed(exc) from exc
        for i, block in changed.items():
            if i < len(blocks):
                blocks[i] = block
            else:
                blocks.append(block)
        reread.update(changed)
        with _WRITING:
            # Only if nothing changed the scope meanwhile (a forget, another reader):
            # what this reader built from an older value may hold forgotten vectors.
            if cache.get(key) is found:
                for i, block in reread.items():
                    cache.put((*key, grown.token, i), block, weight=block.nbytes)
                if grown is not found:
                    cache.put(key, grown, weight=64 + 16 * len(grown.spans))
        return blocks

    async def _late(
        self, conn: AsyncConnection, scope: str, gaps: Gaps
    ) -> tuple[Gaps, list[tuple[int, str, Any]]]:
        """The rows of the scope that showed up in ``gaps``, and the gaps still open."""
        if not gaps.open:
            return gaps, []
        v = self.tables.vectors
        query = select(v.c.seq, v.c.scope, v.c.model, v.c.memory_id, v.c.vector).where(
            v.c.seq.in_(gaps.numbers)
        )
        rows = (await conn.execute(query.order_by(v.c.seq))).all()
        mine = [
            (seq, memory_id, decode(_open(self.cipher, scope, stored)))
            for seq, row_scope, model, memory_id, stored in rows
            if row_scope == scope and model == self.embedder.name
        ]
        return gaps.filled({row.seq for row in rows}, now=self.clock()), mine

    async def _gaps(
        self,
        conn: AsyncConnection,
        scope: str,
        gaps: Gaps,
        after: int,
        added: Sequence[tuple[int, str, Any]],
    ) -> Gaps:
        """``gaps`` plus the numbers read past in ``added`` that no row holds yet.

        Asked after ``added`` was read: a row of this scope that committed in between
        is present here but was not read, so it counts as a gap and is read next time.
        """
        high = added[-1][0]
        low = max(after, high - (WINDOW if after else FIRST_WINDOW))
        read = {seq for seq, _, _ in added}
        v = self.tables.vectors
        query = select(v.c.seq, v.c.scope, v.c.model).where(v.c.seq > low, v.c.seq <= high)
        present = {
            seq
            for seq, row_scope, model in await conn.execute(query)
            if seq in read or row_scope != scope or model != self.embedder.name
        }
        return gaps.found(range(low + 1, high + 1), present=present, now=self.clock())

    async def _read(self, conn: AsyncConnection, scope: str, span: tuple[int, int]) -> Block:
        from memstack.memory.quantized import Block

        rows = await self._rows(conn, scope, *span)
        if not rows:
            return Block.build((), _empty(self.embedder.dim))
        try:
            return Block.build(*_columns(rows))
        except ValueError as exc:
            raise _mixed(exc) from exc

    async def _rows(
        self, conn: AsyncConnection, scope: str, after: int, through: int | None
    ) -> list[tuple[int, str, Any]]:
        v = self.tables.vectors
        params = {"scope": scope, "model": self.embedder.name, "after": after}
        rows: Sequence[Any]
        if through is None:  # every search asks this: SQL text, built once
            rows = await fetch_all(conn, self._added, params)
        else:
            query = select(v.c.seq, v.c.memory_id, v.c.vector).where(
                v.c.scope == scope, v.c.model == self.embedder.name, v.c.seq > after
            )
            rows = (await conn.execute(query.where(v.c.seq <= through).order_by(v.c.seq))).all()
        return [
            (seq, memory_id, decode(_open(self.cipher, scope, stored)))
            for seq, memory_id, stored in rows
        ]


def load_numpy() -> None:
    """Import numpy on the event loop's thread before a worker embeds: a search reads
    vectors while the model embeds, and numpy imported by two threads at once fails
    half-initialised."""
    import memstack.memory.quantized  # noqa: F401


def _mixed(exc: ValueError) -> ConfigurationError:
    return ConfigurationError(
        f"stored vectors of different dimensions for one model ({exc}); embedder "
        "changed? re-embed the scope",
        layer=_LAYER,
    )


def _empty(dim: int) -> Any:
    import numpy as np

    return np.zeros((0, dim), dtype=np.float32)


def _block_rows(dim: int) -> int:
    """Rows per block: a sixteenth of the cache budget each (the cache keeps no entry over
    an eighth), at least 256 and at most 16,384."""
    per_row = dim + 4 + 8 * -(-dim // 64) + 100  # codes, scale, sign words, id
    return max(256, min(16_384, cache.max_bytes() // 16 // per_row))


# Cache writes of scope vectors, checked against what each reader started from: a reader
# on another thread must not put back vectors a forget has just taken out.
_WRITING = threading.Lock()
_ENGINES: weakref.WeakKeyDictionary[AsyncEngine, str] = weakref.WeakKeyDictionary()
_NAMESPACE = "memory vectors"


def scope_key(engine: AsyncEngine, tables: Tables, scope: str) -> tuple[Hashable, ...]:
    """The cache key of ``scope``'s vectors: the database is the engine (one per URL and
    options in a process, ``memstack.resources``; each in-memory SQLite its own)."""
    database = _ENGINES.get(engine)
    if database is None:
        with _WRITING:
            database = _ENGINES.setdefault(engine, uuid.uuid4().hex)
    return (_NAMESPACE, database, tables.vectors.name, scope)


def forget_cached(
    engine: AsyncEngine, tables: Tables, scope: str, ids: Collection[str] | None
) -> None:
    """Take ``ids`` (None: the whole scope) out of the cached vectors, after the delete
    committed: recall must not find a forgotten memory's vector, even to drop it."""
    key = scope_key(engine, tables, scope)
    with _WRITING:
        found = cache.get(key)
        if not isinstance(found, ScopeVectors) or ids is None:
            if isinstance(found, ScopeVectors):
                for i in range(len(found.spans)):
                    cache.discard((*key, found.token, i))
            # Nothing cached, but a reader may be building it from rows read before the
            # delete: an empty value in its place tells that reader to keep what it built.
            cache.put(key, ScopeVectors("", uuid.uuid4().hex, 0, (), 0), weight=64)
            return
        wanted = set(ids)
        for i in range(len(found.spans)):
            block = cache.get((*key, found.token, i))
            if block is not cache.MISSING:
                smaller = block.without(wanted)
                if smaller is not block:
                    cache.put((*key, found.token, i), smaller, weight=smaller.nbytes)
        # A new value: readers that started from the old one keep what they build.
        cache.put(key, replace(found), weight=64 + 16 * len(found.spans))


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
