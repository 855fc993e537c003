"""Reading memories: select rows, search by words and meaning, pick the standing profile.

    >>> import asyncio
    >>> from memstack.memory import MemoryStore
    >>> from memstack.memory.reading import search
    >>> async def demo():
    ...     store = MemoryStore.from_url("sqlite://:memory:")
    ...     await store.remember("ana", "Allergic to peanuts", kind="fact")
    ...     await store.remember("ana", "Prefers short answers", kind="preference")
    ...     found = await search(store.parts, "ana", "any peanuts allergy?", limit=5, kinds=None)
    ...     await store.close()
    ...     return [memory.text for memory, _score in found]
    >>> asyncio.run(demo())
    ['Allergic to peanuts']

Ranking happens in two places on purpose: the database finds candidates (full-text in SQL,
``memstack.memory.fulltext``; nearest vectors, ``memstack.memory.semantic``), then this
module fuses their scores and weighs them by precedence (``memstack.memory.ranking``),
which needs fields only the decoded memory has.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, select
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from memstack.memory.expansion import FEEDBACK_MEMORIES, expansion_terms
from memstack.memory.fetch import fetch_all
from memstack.memory.models import Memory
from memstack.memory.parts import StoreParts
from memstack.memory.queries import RecallQueries, live
from memstack.memory.ranking import precedence, telling
from memstack.memory.recall_policy import RecallPolicy
from memstack.memory.rows import memory_from_row
from memstack.memory.semantic import SemanticIndex, fuse_scores, leading, load_numpy
from memstack.memory.text import query_term_counts

if TYPE_CHECKING:
    from memstack.memory.quantized import Block

__all__ = ["profile", "scopes", "search", "select_memories"]

# Standing preferences and facts considered for the profile part of a recall.
PROFILE = 50
# Turns of the event loop a connection's release takes to hand its rollback to the driver.
_TURNS_TO_HAND_BACK = 2
_DEFAULT_POLICY = RecallPolicy()


async def select_memories(
    parts: StoreParts, where: Any, *, now: float | None, newest: int | None = None
) -> list[Memory]:
    """Matching memories oldest first (only live ones at ``now`` unless it is None).

    With ``newest``, only that many most recently updated ones.
    """
    m = parts.tables.memories
    query = select(m).where(where)
    if newest is not None:
        query = query.order_by(m.c.updated_at.desc(), m.c.id).limit(newest)
    if now is not None:
        query = query.where(live(m, now))
    async with parts.connect("reading memories") as conn:
        if newest is None:
            query = query.order_by(m.c.created_at, m.c.id)
        rows = (await conn.execute(query)).all()
    return [memory_from_row(parts.cipher, row) for row in rows]


async def scopes(parts: StoreParts) -> list[str]:
    """Every scope with a stored memory (live or not), sorted."""
    m = parts.tables.memories
    async with parts.connect("listing scopes") as conn:
        rows = await conn.execute(select(m.c.scope).distinct().order_by(m.c.scope))
        return [row[0] for row in rows]


async def search(
    parts: StoreParts,
    scope: str,
    query: str,
    *,
    limit: int,
    kinds: Sequence[str] | None,
    policy: RecallPolicy = _DEFAULT_POLICY,
) -> list[tuple[Memory, float]]:
    """Live memories matching ``query``, best first, with their fused, weighed scores."""
    semantic = parts.semantic if isinstance(query, str) and query.strip() else None
    # One worker thread embeds the query and then searches the vectors the loop has read
    # meanwhile (``blocks_read``), while the database ranks by words: on two cores the
    # embedding and the first search (~6 + ~3 ms) run beside the full-text query, with one
    # hand-off to the worker and one back. Handed over first, before the query's words
    # are stemmed and a connection is taken: ``asyncio.to_thread`` would hand it over
    # only at this coroutine's first wait, ~0.5–1 ms later.
    blocks_read: concurrent.futures.Future[Sequence[Block]] = concurrent.futures.Future()
    first: asyncio.Future[tuple[Any, list[tuple[str, float]] | None]] | None = None
    if semantic is not None:
        load_numpy()
        hop = partial(_first_hop, semantic, query, blocks_read, 2 * limit, policy)
        context = contextvars.copy_context()  # as ``asyncio.to_thread`` does
        first = asyncio.get_running_loop().run_in_executor(None, partial(context.run, hop))
    query_terms = query_term_counts(query) if isinstance(query, str) else {}
    if not query_terms and semantic is None:
        return []
    # Ranked on the rows' columns; a payload is decoded only when its text may hold a
    # question (``telling``) or the memory is among the best ``limit``: ~150 candidates
    # a recall, ~75 returned.
    decoded: dict[str, Memory] = {}
    weights: dict[str, tuple[float, float]] = {}
    wanted = set(kinds) if kinds else None

    def memory(row: Row[Any]) -> Memory:
        found = decoded.get(row.id)
        if found is None:
            found = decoded[row.id] = memory_from_row(parts.cipher, row)
        return found

    def text_of(row: Row[Any]) -> str:
        """The row's text, read from a plaintext payload without decoding it if it can be."""
        text = _plain_text(row.payload)
        return memory(row).text if text is None else text

    def weigh(row: Row[Any]) -> tuple[float, float]:
        """The row's precedence and ``telling`` factor, each computed once."""
        found = weights.get(row.id)
        if found is None:
            found = weights[row.id] = (
                precedence(row, now=now),
                telling(text_of(row), question_weight=policy.question_weight),
            )
        return found

    def rank(
        words: Mapping[str, float], rows: Mapping[str, Row[Any]], near: Sequence[tuple[str, float]]
    ) -> list[tuple[Row[Any], float]]:
        """``rows``, best first: BM25 totals (``words``) fused with the vector hits' cosines
        (``near``), weighed by precedence and telling."""
        if not rows:
            return []
        if semantic is None:
            best = max(words.values())
            relevance = {memory_id: total / best for memory_id, total in words.items()}
        else:
            fused = fuse_scores(
                words,
                [(i, cosine) for i, cosine in near if i in rows],
                weight=policy.semantic_weight,
            )
            top = max(fused.values()) or 1.0
            relevance = {memory_id: score / top for memory_id, score in fused.items()}
        scored = []
        for memory_id, row in rows.items():
            if wanted is None or row.kind in wanted:
                weight, tells = weigh(row)
                scored.append((row, relevance[memory_id] * weight * tells))
        scored.sort(key=lambda pair: (-pair[1], -pair[0].created_at, pair[0].id))
        return scored

    try:
        now = parts.now()
        # On a failure the stack hands the connection back; on success the search does,
        # beside the last ranking (below).
        async with contextlib.AsyncExitStack() as stack:
            conn = await stack.enter_async_context(parts.connect("searching memories"))
            # The vectors first (``SemanticIndex.vectors``). On SQLite and PostgreSQL each
            # statement reads a snapshot of its own (MariaDB's REPEATABLE READ keeps one).
            blocks = await semantic.vectors(conn, scope) if semantic is not None else []
            blocks_read.set_result(blocks)
            by_words: list[Row[Any]] = []
            if query_terms:
                by_words = list(await parts.index.ranked(conn, scope, query_terms, limit, now))
                by_words.sort(key=lambda row: -float(row.total))
            near: list[tuple[str, float]] = []
            by_meaning: list[Row[Any]] = []
            if semantic is not None and first is not None:
                # Weighed while the worker still embeds or searches: off the critical path.
                for row in by_words:
                    if wanted is None or row.kind in wanted:
                        weigh(row)
                await asyncio.wait([first])  # a failure is raised below, as the model's
                if first.exception() is None:
                    query_vector, found = first.result()
                    if found is None:  # embedded before the vectors were read
                        found = await asyncio.to_thread(
                            _nearest, semantic, blocks, query_vector, 2 * limit, policy
                        )
                    near = _feedback(semantic, blocks, query_vector, found, by_words, limit, policy)
                    near_ids = [memory_id for memory_id, _ in near]
                    by_meaning = await _live_rows(
                        conn, parts.index.queries, scope, near_ids, by_words, now
                    )
            rows = {row.id: row for row in [*by_words, *by_meaning]}  # no id in both
            words = {row.id: float(row.total) for row in by_words}
            if policy.expansion > 0 and words:
                # The best first memories' words re-rank what the question found
                # (``memstack.memory.expansion``): BM25 sums over terms, so their scores
                # add to the first query's; a memory neither the question's words nor its
                # meaning found stays out.
                first_pass = rank(words, rows, near)
                extra = expansion_terms(
                    [(text_of(row), score) for row, score in first_pass[:FEEDBACK_MEMORIES]],
                    query_terms,
                    weight=policy.expansion,
                )
                # Only those that can be returned, the best ``limit`` of the first pass, less
                # the memories that lent the words: scored by their own words, they would
                # gain most (in a small scope, every memory lends to itself).
                ids = [row.id for row, _ in first_pass[FEEDBACK_MEMORIES:limit]]
                gained = await parts.index.scores(conn, scope, extra, ids)
                for memory_id, score in gained.items():
                    words[memory_id] = words.get(memory_id, 0.0) + score
            release = stack.pop_all()
        # The pool's rollback runs on SQLite's thread while the loop ranks and decodes: its
        # hand-off there and back is off the recall's path. Two turns of the loop take the
        # release to its hand-off (the connection's exit shields its close in a task of its
        # own; ``test_the_connection_goes_back_while_the_loop_ranks_and_decodes``).
        handing_back = asyncio.ensure_future(release.aclose())
        try:
            for _ in range(_TURNS_TO_HAND_BACK):
                await asyncio.sleep(0)
            if first is not None:
                first.result()
            return [(memory(row), score) for row, score in rank(words, rows, near)[:limit]]
        finally:
            await handing_back
    finally:
        blocks_read.cancel()  # set, or the search failed before the vectors were read
        if first is not None and not first.cancel() and not first.cancelled():
            first.exception()  # retrieved: a database failure is the one reported


_TEXT_FIRST = '{"text":"'


def _plain_text(payload: str) -> str | None:
    """The text of a plaintext payload without escapes, read without decoding it, else None.

    ``memstack.memory.rows`` writes the text first; with no backslash in the payload the
    text holds no escaped quote, so it ends at the next quote. A sealed payload starts
    otherwise and is always decoded (a store without its key must fail on it).
    """
    if not payload.startswith(_TEXT_FIRST) or "\\" in payload:
        return None
    return payload[len(_TEXT_FIRST) : payload.index('"', len(_TEXT_FIRST))]


def _first_hop(
    semantic: SemanticIndex,
    query: str,
    blocks_read: concurrent.futures.Future[Sequence[Block]],
    hits: int,
    policy: RecallPolicy,
) -> tuple[Any, list[tuple[str, float]] | None]:
    """On a worker thread: the query's vector, and its ``hits`` nearest above the policy's
    floor if the loop has read the vectors by then (else None: the loop searches after).

    It never waits for the loop: a worker blocked on a search that ended would hold the
    executor's thread, and the interpreter's exit, for good."""
    [query_vector] = semantic.embed_here([query])
    if not blocks_read.done():
        return query_vector, None
    return query_vector, _nearest(semantic, blocks_read.result(), query_vector, hits, policy)


def _nearest(
    semantic: SemanticIndex,
    blocks: Sequence[Block],
    query_vector: Any,
    hits: int,
    policy: RecallPolicy,
) -> list[tuple[str, float]]:
    """The ``hits`` nearest memories above the policy's floor (numpy lets go of the GIL)."""
    near = semantic.nearest(blocks, query_vector, hits)
    return [(i, cosine) for i, cosine in near if cosine >= policy.min_similarity]


def _feedback(
    semantic: SemanticIndex,
    blocks: Sequence[Block],
    query_vector: Sequence[float],
    near: list[tuple[str, float]],
    by_words: Sequence[Row[Any]],
    limit: int,
    policy: RecallPolicy,
) -> list[tuple[str, float]]:
    """The vector hits above the policy's floor, from the query moved toward the best of
    the first hits (``near``) when the policy asks for feedback."""
    if policy.feedback and near:
        first = fuse_scores(
            {row.id: float(row.total) for row in by_words}, near, weight=policy.semantic_weight
        )
        leaders = leading(first, policy.feedback)
        moved = semantic.second_hop(blocks, query_vector, leaders, policy.feedback_weight)
        if moved is not None:
            near = semantic.nearest(blocks, moved, 2 * limit)
            near = [(i, c) for i, c in near if c >= policy.min_similarity]
    return near


async def _live_rows(
    conn: AsyncConnection,
    queries: RecallQueries,
    scope: str,
    ids: Sequence[str],
    known: Sequence[Row[Any]],
    now: float,
) -> list[Row[Any]]:
    """The live rows of ``ids`` not already in ``known`` (vector hits may be stale)."""
    have = {row.id for row in known}
    missing = [memory_id for memory_id in ids if memory_id not in have]
    if not missing:
        return []
    # SQL text, as the full-text query: building the statement cost ~1.5 ms a recall.
    params: dict[str, Any] = {f"i{i}": memory_id for i, memory_id in enumerate(missing)}
    params["now"] = now
    found = await fetch_all(conn, queries.live_by_ids(len(missing)), params, row=queries.memory_row)
    return [row for row in found if row.scope == scope]


async def profile(parts: StoreParts, scope: str, *, exclude: set[str]) -> list[Memory]:
    """The scope's standing preferences and facts not in ``exclude``, best first."""
    m = parts.tables.memories
    # The most recently updated standing memories; a scope of thousands stays cheap.
    standing = await select_memories(
        parts,
        and_(m.c.scope == scope, m.c.kind.in_(("preference", "fact"))),
        now=parts.now(),
        newest=2 * PROFILE,
    )
    now = parts.now()
    standing = [memory for memory in standing if memory.id not in exclude]
    standing.sort(key=lambda x: (-precedence(x, now=now), x.id))
    return standing[:PROFILE]
