"""Concurrent sessions on PostgreSQL: the production stack vs a bare SQLAlchemySession.

    python benchmarks/bench_load.py                     # 32 sessions x 20 turns, 3 rounds
    python benchmarks/bench_load.py --sessions 8 --turns 5 --rounds 1
    python benchmarks/bench_load.py --url postgresql+asyncpg://postgres@127.0.0.1:5432/test

``--sessions`` sessions run at once, all over one shared ``AsyncEngine`` (one pool, as in
a server: ``open_backend(url, session_id, engine=engine)``); each first gets
``--history`` items of real history (untimed), then does ``--turns`` turns of
``add_items(turn)`` followed by ``get_items()``, as a Runner does. Turns are real agent
turns of up to 8 items (``_shared.long_history``). The stack is recipes/production.toml
over that store (``recipe.stack_over``), with offline extractive summaries. Each round
runs both variants one after the other, order alternating, on fresh session ids; each
phase stops starting turns after ``--seconds``. One untimed turn through a stack comes
first, so what the process loads on first use is not timed in the first phase.

Reported: throughput (turns/s over the phase), p50 and p95 of per-turn latency (medians
over rounds), and stack/bare ratios. Rows go to their own tables (``memstack_bench_*``);
every session is cleared afterwards and the tables dropped. Loopback only; skipped with
a message when PostgreSQL does not answer.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from typing import Any

from _shared import long_history, production_recipe, reachable, renamed, turns
from agents.memory import Session
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from memstack.backends import open_backend
from memstack.recipes import Recipe

URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
TABLES = {"sessions_table": "memstack_bench_sessions", "messages_table": "memstack_bench_messages"}
Item = dict[str, Any]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def phase(
    variant: str,
    engine: AsyncEngine,
    recipe: Recipe,
    args: argparse.Namespace,
    chat: list[list[Item]],
    history: list[Item],
    tag: str,
) -> tuple[float, list[float]]:
    """Run every session's turns at once; (turns per second, per-turn latencies)."""

    def session(number: int) -> Session:
        store = open_backend(
            args.url, f"{tag}-{variant}-{number}", engine=engine, create_tables=False, **TABLES
        )
        return recipe.stack_over(store) if variant == "stack" else store

    sessions = [session(i) for i in range(args.sessions)]
    await asyncio.gather(*(s.add_items(history) for s in sessions))  # type: ignore[arg-type]
    latencies: list[float] = []
    deadline = time.perf_counter() + args.seconds

    async def worker(number: int, s: Session) -> None:
        for turn in range(args.turns):
            if time.perf_counter() > deadline:
                return
            items = renamed(chat[(number * args.turns + turn) % len(chat)], f"{tag}-{turn}")
            start = time.perf_counter()
            await s.add_items(items)  # type: ignore[arg-type]
            await s.get_items()
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(worker(i, s) for i, s in enumerate(sessions)))
    elapsed = time.perf_counter() - start
    await asyncio.gather(*(s.clear_session() for s in sessions))
    return len(latencies) / elapsed, latencies


async def run(args: argparse.Namespace) -> int:
    engine = create_async_engine(args.url, pool_size=args.sessions, max_overflow=0)
    problem = await reachable(engine)
    if problem is not None:
        print(f"skipped: PostgreSQL not reachable at {args.url} ({problem})")
        await engine.dispose()
        return 0
    recipe = production_recipe(args.url)
    history = long_history(args.history + 20_000)
    chat = [t for t in turns(history[args.history :]) if len(t) <= 8]
    setup = open_backend(args.url, "bench-load-setup", engine=engine, create_tables=True, **TABLES)
    await setup.get_items()  # creates the tables once, before sessions race to
    results: dict[str, list[tuple[float, list[float]]]] = {"stack": [], "bare": []}
    # Untimed: what a process loads on first use (the tokenizer's vocabulary, adapters)
    # would otherwise land in whichever phase runs first.
    warm = recipe.stack_over(open_backend(args.url, "bench-load-warm", engine=engine, **TABLES))
    await warm.add_items(chat[0])  # type: ignore[arg-type]
    await warm.get_items()
    await warm.clear_session()
    try:
        for round_ in range(args.rounds):
            order = ["stack", "bare"] if round_ % 2 == 0 else ["bare", "stack"]
            for variant in order:
                tag = f"bench-load-{os.getpid()}-{round_}"
                results[variant].append(
                    await phase(variant, engine, recipe, args, chat, history[: args.history], tag)
                )
                print(f"  round {round_ + 1} {variant}: {results[variant][-1][0]:.1f} turns/s",
                      file=sys.stderr)  # fmt: skip
    finally:
        async with engine.begin() as conn:
            for table in ("messages_table", "sessions_table"):
                await conn.execute(text(f"DROP TABLE IF EXISTS {TABLES[table]}"))
        await engine.dispose()

    def stat(variant: str) -> tuple[float, float, float]:
        runs = results[variant]
        return (
            statistics.median(r[0] for r in runs),
            statistics.median(quantile(r[1], 0.50) for r in runs) * 1e3,
            statistics.median(quantile(r[1], 0.95) for r in runs) * 1e3,
        )

    print(
        f"{args.sessions} concurrent sessions x {args.turns} turns (add_items + get_items), "
        f"{args.history} items of history each, PostgreSQL on loopback, one shared engine "
        f"(pool {args.sessions}); medians of {args.rounds} rounds\n"
    )
    header = f"{'variant':<26}{'turns/s':>9}{'p50 ms':>9}{'p95 ms':>9}"
    print(header)
    print("-" * len(header))
    stack, bare = stat("stack"), stat("bare")
    print(f"{'production stack':<26}{stack[0]:>9.1f}{stack[1]:>9.1f}{stack[2]:>9.1f}")
    print(f"{'bare SQLAlchemySession':<26}{bare[0]:>9.1f}{bare[1]:>9.1f}{bare[2]:>9.1f}")
    print(
        f"{'stack / bare':<26}{stack[0] / bare[0]:>9.2f}{stack[1] / bare[1]:>9.2f}"
        f"{stack[2] / bare[2]:>9.2f}"
    )
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("MEMSTACK_BENCH_PG", URL))
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--history", type=int, default=200, help="items per session, untimed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60.0, help="per phase, at most")
    args = parser.parse_args()
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
