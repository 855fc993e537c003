"""The full-text index of memories: BM25 impacts stored per term digest, ranked in SQL.

    >>> from memstack.memory.fulltext import weighted_terms
    >>> from memstack.memory.models import Memory
    >>> weighted_terms(Memory(id="m", scope="s", text="Loves sailing", context="boats"))
    {'love': 3, 'sail': 3, 'boat': 1}

One index on every backend: each memory's terms (``memstack.memory.text``) are stored as
64-bit digests (keyed HMACs when the store has a key, see ``memstack.memory.cipher``) with
their BM25 impact, computed at write time, so recall reads each query term's best postings
from a ``(scope, term, impact, memory_id)`` index alone and sums them in SQL
(``memstack.memory.queries``). Rankings are therefore identical on every backend,
encrypted or not. ``MemoryStore`` owns the transactions; this module owns the postings
and the per-scope statistics caches.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from memstack.memory.cipher import MemoryCipher
from memstack.memory.fetch import fetch_all
from memstack.memory.models import Memory
from memstack.memory.queries import RecallQueries
from memstack.memory.ranking import BM25
from memstack.memory.schema import Tables
from memstack.memory.text import term_counts

__all__ = ["FullTextIndex", "weighted_terms"]

# Statistics for BM25 (memory count, mean length) are cached this long per scope.
_STATS_SECONDS = 30.0
# A memory's own words count this many times its (unshown) context's words.
_OWN_WEIGHT = 3
# Postings read per query term, best impact first, and the cap on counting a term's
# document frequency: beyond these a term is so common that it barely ranks.
_POSTINGS_PER_TERM = 200
_DF_CAP = 5_000
_DF_CACHE_SCOPES = 1_000
# A scope with this many memories has a stable mean length for BM25 normalisation.
_STABLE_STATS = 1_000


class FullTextIndex:
    """Postings to write for a memory, and the best memories for a query's terms."""

    def __init__(self, tables: Tables, cipher: MemoryCipher, bm25: BM25) -> None:
        self.tables = tables
        self.cipher = cipher
        self.bm25 = bm25
        self.queries = RecallQueries(tables)
        self._stats: dict[str, tuple[int, float, float]] = {}
        self._df: dict[str, dict[int, tuple[int, float]]] = {}

    def postings(self, memory: Memory, mean_length: float) -> list[dict[str, Any]]:
        """Index rows: each term's BM25 impact, computed once at write time.

        Storing the impact (not tf and length) lets recall read each term's best postings
        from an index in impact order, and stop early for common terms.
        """
        kid = self.cipher.active_kid
        counts = weighted_terms(memory)
        length = sum(counts.values())
        k1, b = self.bm25.k1, self.bm25.b
        norm = k1 * (1 - b + b * length / max(mean_length, 1.0))
        postings: dict[int, dict[str, Any]] = {}
        for term, tf in counts.items():
            digest = self.cipher.term_digest(kid, memory.scope, term)
            postings[digest] = {
                "scope": memory.scope,
                "term": digest,
                "memory_id": memory.id,
                "impact": round(tf * (k1 + 1) / (tf + norm), 4),
            }
        return list(postings.values())

    async def mean_length(
        self, conn: AsyncConnection, scope: str, batch: Sequence[Memory]
    ) -> float:
        # Inside a write: its transaction sees its own uncommitted rows and may be rolled
        # back and rerun, so what it reads is not kept for others.
        count, mean = await self.scope_stats(conn, scope, keep=False)
        if count >= _STABLE_STATS or not batch:
            return mean
        lengths = [sum(weighted_terms(m).values()) for m in batch]
        return (count * mean + sum(lengths)) / (count + len(lengths))

    def invalidate(self, scope: str) -> None:
        """Drop cached statistics of ``scope`` after this process changed it."""
        self._stats.pop(scope, None)
        self._df.pop(scope, None)

    async def scope_stats(
        self, conn: AsyncConnection, scope: str, *, keep: bool = True
    ) -> tuple[int, float]:
        now = time.monotonic()
        cached = self._stats.get(scope)
        if cached is not None and now - cached[2] < _STATS_SECONDS:
            return cached[0], cached[1]
        m = self.tables.memories
        count, total = (
            await conn.execute(
                select(func.count(), func.sum(m.c.length)).where(
                    m.c.scope == scope, m.c.superseded_at.is_(None)
                )
            )
        ).one()
        stats = (int(count or 0), float(total or 0) / max(1, int(count or 0)) or 1.0, now)
        if keep:
            self._stats[scope] = stats
        return stats[0], stats[1]

    async def _document_frequencies(
        self, conn: AsyncConnection, scope: str, digests: Sequence[int]
    ) -> dict[int, int]:
        """Each digest's document frequency (capped at ``_DF_CAP``), cached like the stats."""
        known, missing = self._cached_frequencies(scope, digests)
        if missing:
            params: dict[str, Any] = {"scope": scope, "cap": _DF_CAP}
            params.update({f"t{i}": digest for i, digest in enumerate(missing)})
            sql = self.queries.frequencies(len(missing))
            found = {int(term): int(df) for term, df in await fetch_all(conn, sql, params) if df}
            known.update(self._keep_frequencies(scope, missing, found))
        return known

    def _cached_frequencies(
        self, scope: str, digests: Sequence[int]
    ) -> tuple[dict[int, int], list[int]]:
        """The cached document frequencies of ``digests`` (those above 0), and the digests
        not cached or cached too long ago."""
        now = time.monotonic()
        known: dict[int, int] = {}
        missing = []
        if len(self._df) > _DF_CACHE_SCOPES:
            self._df.clear()
        cache = self._df.setdefault(scope, {})
        for digest in digests:
            cached = cache.get(digest)
            if cached is not None and now - cached[1] < _STATS_SECONDS:
                if cached[0]:
                    known[digest] = cached[0]
            else:
                missing.append(digest)
        return known, missing

    def _keep_frequencies(
        self, scope: str, counted: Sequence[int], found: dict[int, int]
    ) -> dict[int, int]:
        """Cache the frequencies of ``counted`` (``found``: those above 0); returns ``found``."""
        now = time.monotonic()
        cache = self._df.setdefault(scope, {})
        for digest in counted:
            cache[digest] = (found.get(digest, 0), now)
        return found

    async def ranked(
        self,
        conn: AsyncConnection,
        scope: str,
        query_terms: Mapping[str, float],
        limit: int,
        now: float,
    ) -> Sequence[Row[Any]]:
        """The live rows of the best ``limit`` memories by BM25, with their ``total`` score.

        Each term contributes at most ``_POSTINGS_PER_TERM`` postings, read in impact
        order from an index, so a common word costs a bounded index range, not a scan;
        its document frequency is counted up to ``_DF_CAP`` only, where its weight is
        already small. Sums, ranking and the join to the rows run in the database
        (``memstack.memory.queries``): one round trip once frequencies are cached.
        """
        weights = await self._digest_weights(conn, scope, query_terms)
        if not weights:
            return []
        params: dict[str, Any] = {
            "scope": scope,
            "per_term": _POSTINGS_PER_TERM,
            "limit": limit,
            "now": now,
        }
        for i, (digest, weight) in enumerate(weights.items()):
            params[f"t{i}"] = digest
            params[f"w{i}"] = weight
        sql = self.queries.ranked(len(weights))
        return await fetch_all(conn, sql, params, row=self.queries.ranked_row)

    async def scores(
        self,
        conn: AsyncConnection,
        scope: str,
        query_terms: Mapping[str, float],
        ids: Sequence[str],
    ) -> dict[str, float]:
        """BM25 of ``query_terms`` for the memories ``ids`` only (those with none: absent).

        What query expansion adds to candidates already found: BM25 sums over terms, so
        the added terms' scores add to the first query's, read by memory id instead of
        ranking the scope again.
        """
        if not ids or not query_terms:
            return {}
        n_docs, _ = await self.scope_stats(conn, scope)
        if n_docs == 0:
            return {}
        digests = self._digests(scope, query_terms)
        known, missing = self._cached_frequencies(scope, list(digests))
        params: dict[str, Any] = {f"i{i}": memory_id for i, memory_id in enumerate(ids)}
        params.update({f"t{i}": digest for i, digest in enumerate(digests)})
        if missing:  # counted in the same statement (``RecallQueries.impacts``)
            params.update({"scope": scope, "cap": _DF_CAP})
            params.update({f"f{i}": digest for i, digest in enumerate(missing)})
        sql = self.queries.impacts(len(ids), len(digests), len(missing))
        counted: dict[int, int] = {}
        postings: list[tuple[str, int, float]] = []
        for row_scope, memory_id, digest, impact in await fetch_all(conn, sql, params):
            if memory_id is None:  # a frequency
                if impact:
                    counted[int(digest)] = int(impact)
            elif row_scope == scope:
                postings.append((memory_id, int(digest), float(impact)))
        known.update(self._keep_frequencies(scope, missing, counted))
        weights = self._weights(digests, known, n_docs, query_terms)
        totals: dict[str, float] = {}
        for memory_id, digest, impact in postings:
            weight = weights.get(digest)
            if weight is not None:  # a term the scope holds (its frequency above 0)
                totals[memory_id] = totals.get(memory_id, 0.0) + impact * weight
        return totals

    async def _digest_weights(
        self, conn: AsyncConnection, scope: str, query_terms: Mapping[str, float]
    ) -> dict[int, float]:
        """The digests of ``query_terms`` that occur in ``scope``, each with its term's
        BM25 weight: the idf of the term (its digests' document frequencies summed) times
        its count in the query. Empty when the scope or the terms hold nothing."""
        n_docs, _ = await self.scope_stats(conn, scope)
        if n_docs == 0:
            return {}
        digests = self._digests(scope, query_terms)
        df_by_digest = await self._document_frequencies(conn, scope, list(digests))
        return self._weights(digests, df_by_digest, n_docs, query_terms)

    def _digests(self, scope: str, query_terms: Mapping[str, float]) -> dict[int, str]:
        """Each term's digests under every key (``MemoryCipher.term_digests``), to the term."""
        digests: dict[int, str] = {}
        for term in query_terms:
            for digest in self.cipher.term_digests(scope, term):
                digests[digest] = term
        return digests

    def _weights(
        self,
        digests: Mapping[int, str],
        df_by_digest: Mapping[int, int],
        n_docs: int,
        query_terms: Mapping[str, float],
    ) -> dict[int, float]:
        """The BM25 weight of each digest with a frequency: its term's idf (the term's
        digests' frequencies summed) times the term's count in the query."""
        df_by_term: dict[str, int] = defaultdict(int)
        for digest, df in df_by_digest.items():
            df_by_term[digests[digest]] += df
        return {
            digest: self.bm25.idf(min(df_by_term[digests[digest]], n_docs), n_docs)
            * query_terms[digests[digest]]
            for digest in df_by_digest
        }


def weighted_terms(memory: Memory) -> dict[str, int]:
    """The memory's own words count three times; its context's and its date's once.

    The date a memory is valid from ("13 October 2023") is searchable like context: a
    question that names a day ("what did she show on October 13, 2023?") finds what was
    said that day, though the words of the memory never name it.
    """
    counts = {term: _OWN_WEIGHT * tf for term, tf in term_counts(memory.text).items()}
    for extra in (memory.context or "", _date_words(memory.valid_from)):
        for term, tf in term_counts(extra).items():
            counts[term] = counts.get(term, 0) + tf
    return counts


def _date_words(seconds: float | None) -> str:
    if seconds is None:
        return ""
    day = datetime.fromtimestamp(seconds, UTC)
    return f"{day.day} {day:%B %Y}"
