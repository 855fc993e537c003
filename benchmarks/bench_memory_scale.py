"""``MemoryStore.recall`` latency with 100,000 memories in one scope, SQLite and PostgreSQL.

    python benchmarks/bench_memory_scale.py                       # 100k memories, both backends
    python benchmarks/bench_memory_scale.py --memories 20000 --backends sqlite
    python benchmarks/bench_memory_scale.py --backends sqlite --keep /tmp/s.db  # keep scope big
    python benchmarks/bench_memory_scale.py --measure-only sqlite:////tmp/s.db --scope big
    python benchmarks/bench_memory_scale.py --embedder default    # hybrid recall (int8 MiniLM)
    python benchmarks/bench_memory_scale.py --embedder default --reuse-vectors --memories 100000

Memories are real dialogue turns (LoCoMo, every conversation in the data file) each
tagged with two random rare words, so one scope holds 100,000 distinct memories whose
vocabulary has natural frequencies; queries are LoCoMo's questions. Reported per backend:
recall p50/p95/max in milliseconds (target p95 <= 20 ms) over warm queries at the given
budget, next to the same recall on a scope of 1,000 memories, and the ingest rate. With
``--embedder`` every memory is also embedded (the ingest rate then is mostly the model's)
and recall fuses words and vectors. ``--reuse-vectors`` embeds each distinct dialogue turn
once and gives every memory made from it that turn's vector (the two random tags are left
out of the embedding): the vectors are the model's, the index holds as many as memories,
and a 2-core machine fills 100,000 in minutes instead of an hour. The query embedding is
never reused: each recall embeds its question.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from memstack.bench.memory_bench import load_locomo
from memstack.bench.transcripts import DATA_DIR
from memstack.memory import MemoryStore
from memstack.memory.recall_policy import RecallPolicy
from memstack.memory.vectors import Embedder, embedder_named

TARGET_P95_MS = 20.0
POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


class TurnVectors:
    """Embeds a memory as its dialogue turn (tags dropped), each turn once; queries fresh."""

    def __init__(self, inner: Embedder, turns: set[str]) -> None:
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self.turns = turns
        self._cache: dict[str, list[float]] = {}

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        bases = [t.rsplit(" tag", 2)[0] for t in texts]
        if not all(base in self.turns for base in bases):
            return self.inner.embed(texts)  # a question: embedded every time
        missing = list(dict.fromkeys(b for b in bases if b not in self._cache))
        if missing:
            self._cache.update(zip(missing, self.inner.embed(missing), strict=True))
        return [self._cache[b] for b in bases]


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def _fill(store: MemoryStore, scope: str, texts: list[str], count: int, seed: int) -> float:
    rng = random.Random(seed)
    start = time.perf_counter()
    batch = 2_000
    for first in range(0, count, batch):
        memories = [
            store.new_memory(
                scope,
                f"{rng.choice(texts)} tag{rng.randrange(50_000)} tag{rng.randrange(50_000)}",
                source="observed",
            )
            for _ in range(first, min(count, first + batch))
        ]
        await store.remember_many(memories)
    return count / (time.perf_counter() - start)


async def _measure(
    store: MemoryStore,
    scope: str,
    questions: list[str],
    tokens: int,
    cpu: list[float] | None = None,
) -> list[float]:
    """Wall milliseconds per recall; with ``cpu``, the process's CPU milliseconds (all
    threads) per recall appended to it: steadier than wall on a shared machine."""
    for question in questions[:20]:  # warm caches and connections
        await store.recall(scope, question, max_tokens=tokens)
    millis = []
    for question in questions:
        start, used = time.perf_counter(), time.process_time()
        await store.recall(scope, question, max_tokens=tokens)
        millis.append((time.perf_counter() - start) * 1000)
        if cpu is not None:
            cpu.append((time.process_time() - used) * 1000)
    return millis


async def run(
    backend: str,
    memories: int,
    tokens: int,
    embedder: str | None = None,
    reuse_vectors: bool = False,
    keep: Path | None = None,
) -> dict[str, float]:
    """Fill, time and forget; with ``keep`` (SQLite), the database stays at that path with
    the scopes ``big`` and ``small`` filled, for later ``--measure-only`` runs."""
    conversations = load_locomo(DATA_DIR / "locomo_dev.jsonl")
    texts = [turn.line for c in conversations for turn in c.turns]
    questions = [q.text for c in conversations for q in c.questions]
    model = embedder_named(embedder) if embedder else None
    if model is not None and reuse_vectors:
        model = TurnVectors(model, set(texts))
    with tempfile.TemporaryDirectory() as scratch:
        path = keep if keep is not None else Path(scratch) / "scale.db"
        url = POSTGRES if backend == "postgres" else f"sqlite:///{path}"
        store = MemoryStore.from_url(url, embedder=model)
        big, small = f"scale-{uuid.uuid4().hex[:8]}", f"small-{uuid.uuid4().hex[:8]}"
        if keep is not None:
            big, small = "big", "small"
        try:
            rate = await _fill(store, big, texts, memories, seed=1)
            await _fill(store, small, texts, 1_000, seed=2)
            if backend == "postgres":
                # What autovacuum does on a production server after a bulk load (the test
                # servers here run with it off): statistics, and the visibility map, without
                # which counting a common term's postings reads the heap (67 ms against 8 ms
                # for one recall's frequencies at 100,000 memories).
                async with store.engine.connect() as conn:
                    auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
                    from sqlalchemy import text

                    for table in (store.tables.terms, store.tables.memories, store.tables.vectors):
                        await auto.execute(text(f"VACUUM ANALYZE {table.name}"))
            big_ms = await _measure(store, big, questions, tokens)
            small_ms = await _measure(store, small, questions, tokens)
        finally:
            if keep is None:
                await store.forget(big)
                await store.forget(small)
            await store.close()
    return {
        "ingest_per_s": rate,
        "p50": statistics.median(big_ms),
        "p95": _percentile(big_ms, 0.95),
        "max": max(big_ms),
        "small_p50": statistics.median(small_ms),
        "small_p95": _percentile(small_ms, 0.95),
    }


async def measure_only(
    url: str, scope: str, tokens: int, expansion: float | None = None
) -> dict[str, float]:
    """Latency on a scope filled earlier (by a previous run with --keep, or by hand)."""
    conversations = load_locomo(DATA_DIR / "locomo_dev.jsonl")
    questions = [q.text for c in conversations for q in c.questions]
    policy = None if expansion is None else RecallPolicy(expansion=expansion)
    # The default embedder: semantic recall on.
    store = MemoryStore.from_url(url, recall_policy=policy)
    cpu: list[float] = []
    try:
        millis = await _measure(store, scope, questions, tokens, cpu)
        count = len(await store.list_memories(scope))
    finally:
        await store.close()
    return {
        "memories": count,
        "p50": statistics.median(millis),
        "p95": _percentile(millis, 0.95),
        "max": max(millis),
        "cpu_p50": statistics.median(cpu),
        "cpu_p95": _percentile(cpu, 0.95),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--tokens", type=int, default=1_000)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--measure-only", metavar="URL", help="only time recall on URL's --scope")
    parser.add_argument("--scope", default="big")
    parser.add_argument(
        "--expansion", type=float, help="with --measure-only: RecallPolicy.expansion (0: off)"
    )
    parser.add_argument(
        "--embedder", help="also embed and fuse: 'default' (int8 MiniLM), 'minilm', 'hashing'"
    )
    parser.add_argument(
        "--reuse-vectors", action="store_true", help="embed each dialogue turn once (see above)"
    )
    parser.add_argument(
        "--keep", type=Path, metavar="PATH", help="SQLite only: keep the filled database at PATH"
    )
    args = parser.parse_args()
    if args.keep is not None and args.backends != "sqlite":
        parser.error("--keep needs --backends sqlite")
    if args.measure_only:
        found = asyncio.run(
            measure_only(args.measure_only, args.scope, args.tokens, args.expansion)
        )
        print(
            f"{found['memories']:,} memories: recall p50 {found['p50']:.1f} ms, "
            f"p95 {found['p95']:.1f} ms, max {found['max']:.1f} ms; CPU per recall (all "
            f"threads) p50 {found['cpu_p50']:.1f} ms, p95 {found['cpu_p95']:.1f} ms"
        )
        return 0 if found["p95"] <= TARGET_P95_MS else 1
    how = f", fused with {args.embedder} vectors" if args.embedder else ", full-text only"
    print(f"recall of {args.tokens} tokens; {args.memories:,} memories in one scope{how}")
    print(
        f"{'backend':<9} {'ingest/s':>9} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7}"
        f"   1k-scope p50/p95 ms"
    )
    failed = False
    for backend in args.backends.split(","):
        result = asyncio.run(
            run(
                backend,
                args.memories,
                args.tokens,
                args.embedder,
                args.reuse_vectors,
                args.keep,
            )
        )
        ok = result["p95"] <= TARGET_P95_MS
        failed |= not ok
        print(
            f"{backend:<9} {result['ingest_per_s']:>9.0f} {result['p50']:>7.1f} "
            f"{result['p95']:>7.1f} {result['max']:>7.1f}   "
            f"{result['small_p50']:.1f}/{result['small_p95']:.1f}"
            f"   {'ok' if ok else 'ABOVE TARGET'} (p95 target {TARGET_P95_MS:.0f} ms)"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
