"""Memory of many live sessions in one process: production stacks vs bare stores.

    python benchmarks/bench_live_sessions.py                 # 10,000 sessions, 64 MiB budget
    python benchmarks/bench_live_sessions.py --sessions 2000 --budget-mb 16

A server that keeps one stack per live session holds them all at once. Each variant runs
in a process of its own (so neither inherits the other's memory): it opens
``--sessions`` sessions on one PostgreSQL engine, keeps each one alive, and reads each
once (``get_items()``); the stack is ``recipes/production.toml`` (offline summaries)
over the same store, with the process cache's budget set to ``--budget-mb``. Every
session holds ``--history`` items of real history, written untimed beforehand.

Reported: RSS after opening and reading every session, minus RSS before (after the
imports, the engine and one warm-up read), per variant; and whether the stack's growth
stays within the bare store's + the budget + 10%. Loopback only; prints ``skipped: …``
(exit 0) when PostgreSQL does not answer. Tables ``memstack_bench_live_*`` are dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys

from _shared import long_history, production_recipe, reachable
from agents.extensions.memory import SQLAlchemySession
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
TABLES = {
    "sessions_table": "memstack_bench_live_sessions",
    "messages_table": "memstack_bench_live_messages",
}


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


async def fill(args: argparse.Namespace) -> None:
    """Write every session's history straight into the tables, through a stack per session."""
    engine = create_async_engine(args.url)
    recipe = production_recipe(args.url)
    history = long_history(args.history)
    setup = SQLAlchemySession("live-setup", engine=engine, create_tables=True, **TABLES)
    await setup.get_items()
    for number in range(args.sessions):
        store = SQLAlchemySession(f"live-{number}", engine=engine, **TABLES)
        await recipe.stack_over(store).add_items(history)  # type: ignore[arg-type]
        bare = SQLAlchemySession(f"bare-{number}", engine=engine, **TABLES)
        await bare.add_items(history)  # type: ignore[arg-type]
    await engine.dispose()


async def hold(variant: str, args: argparse.Namespace) -> dict[str, float]:
    """In this process: every session open and read once; RSS growth in MB."""
    from memstack import cache

    cache.configure(max_bytes=args.budget_mb << 20)
    engine = create_async_engine(args.url, pool_size=4)
    recipe = production_recipe(args.url)

    def session(number: int) -> object:
        prefix = "live" if variant == "stack" else "bare"
        store = SQLAlchemySession(f"{prefix}-{number}", engine=engine, **TABLES)
        return recipe.stack_over(store) if variant == "stack" else store

    await session(0).get_items()  # type: ignore[attr-defined]  # warm-up: vocabularies, pool
    gc.collect()
    before = rss_mb()
    live = []
    for number in range(args.sessions):
        opened = session(number)
        await opened.get_items()  # type: ignore[attr-defined]
        live.append(opened)
    gc.collect()
    grown = rss_mb() - before
    held = cache.total_bytes() / 1e6
    await engine.dispose()
    return {"grown": grown, "cache": held, "sessions": len(live)}


def child(variant: str, args: argparse.Namespace) -> dict[str, float]:
    command = [sys.executable, __file__, "--child", variant, *sys.argv[1:]]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


async def reachable_url(url: str) -> str | None:
    engine = create_async_engine(url)
    try:
        return await reachable(engine)
    finally:
        await engine.dispose()


async def drop(url: str) -> None:
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        for table in ("messages_table", "sessions_table"):
            await conn.execute(text(f"DROP TABLE IF EXISTS {TABLES[table]}"))
    await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("MEMSTACK_BENCH_PG", URL))
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--history", type=int, default=40, help="items per session")
    parser.add_argument("--budget-mb", type=int, default=64)
    parser.add_argument("--child", choices=["stack", "bare"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(hold(args.child, args))))
        return
    problem = asyncio.run(reachable_url(args.url))
    if problem is not None:
        print(f"skipped: PostgreSQL not reachable at {args.url} ({problem})")
        return
    production_recipe(args.url)  # one key for the filling and both children
    try:
        asyncio.run(fill(args))
        bare, stack = child("bare", args), child("stack", args)
    finally:
        asyncio.run(drop(args.url))
    bound = bare["grown"] + args.budget_mb * 1.048576 * 1.10
    print(
        f"{args.sessions} live sessions of {args.history} items each, one read each, "
        f"PostgreSQL on loopback; cache budget {args.budget_mb} MiB; "
        f"load average {os.getloadavg()[0]:.1f}\n"
    )
    print(f"{'variant':<24}{'RSS growth MB':>15}{'cache MB':>10}")
    print(f"{'bare SQLAlchemySession':<24}{bare['grown']:>15.1f}{bare['cache']:>10.1f}")
    print(f"{'production stack':<24}{stack['grown']:>15.1f}{stack['cache']:>10.1f}")
    verdict = "met" if stack["grown"] <= bound else "missed"
    print(f"\nstack growth <= bare + budget + 10% ({bound:.1f} MB): {verdict}")


if __name__ == "__main__":
    main()
