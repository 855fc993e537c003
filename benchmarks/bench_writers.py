"""Concurrent writers to one session on PostgreSQL and MariaDB: each write stored once, in order?

    python benchmarks/bench_writers.py                      # 8 writers × 150 adds, both databases
    python benchmarks/bench_writers.py --adds 60 --db mariadb
    memstack bench writers --rounds 3

``--writers`` tasks share one engine and each adds ``--adds`` single items, one after the
other, to the *same*, new session id (so the first writes also race to create the
session's row). A writer whose ``add_items`` raises counts the failure and goes on with
its next item, as a request handler would. Afterwards the whole history is read back:

- ``failed``: adds that raised (the error kinds are listed under the table);
- ``lost``: items written (acknowledged or not) that are not stored;
- ``duplicated``: stored copies beyond the first;
- ``reordered``: writers whose stored items are not in the order it wrote them.

Two variants per database: the bare SDK store (``SQLAlchemySession(sid, engine=…)``) and
the production stack (``recipes/production.toml`` over the same store, offline summaries).
Loopback only; a database that does not answer is reported as ``skipped`` (exit 0).
Tables ``memstack_bench_wr_*`` are dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import time
import uuid
from typing import Any

from _shared import production_recipe, reachable
from agents.extensions.memory import SQLAlchemySession
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from memstack.backends.sqlalchemy_store import MySQLSQLAlchemySession
from memstack.base import full_history_layer

URLS = {
    "postgresql": os.environ.get(
        "MEMSTACK_BENCH_PG", "postgresql+asyncpg://postgres@127.0.0.1/test"
    ),
    "mariadb": os.environ.get("MEMSTACK_BENCH_MARIADB", "mariadb+aiomysql://root@127.0.0.1/test"),
}
TABLES = {
    "sessions_table": "memstack_bench_wr_sessions",
    "messages_table": "memstack_bench_wr_messages",
}


def item(writer: int, number: int) -> dict[str, Any]:
    return {"role": "user", "content": f"w{writer}-{number}"}


async def one_round(variant: str, engine: AsyncEngine, args: argparse.Namespace) -> dict[str, Any]:
    """All writers at once on a new session; then the history read back and checked."""
    session_id = f"{variant}-{uuid.uuid4().hex[:8]}"
    recipe = production_recipe()

    def open_session() -> Any:
        store = SQLAlchemySession(session_id, engine=engine, **TABLES)
        return recipe.stack_over(store) if variant == "stack" else store

    errors: collections.Counter[str] = collections.Counter()

    async def writer(number: int) -> None:
        session = open_session()  # each writer its own stack, as separate requests have
        for i in range(args.adds):
            try:
                await session.add_items([item(number, i)])
            except Exception as exc:  # counted, and the writer goes on
                errors[f"{type(exc).__name__}: {str(exc)[:90]}"] += 1

    start = time.perf_counter()
    await asyncio.gather(*(writer(n) for n in range(args.writers)))
    elapsed = time.perf_counter() - start
    reader = open_session()
    stored = [i["content"] for i in await full_history_layer(reader).get_items()]
    counts = collections.Counter(stored)
    written = {item(w, i)["content"] for w in range(args.writers) for i in range(args.adds)}
    reordered = 0
    for w in range(args.writers):
        mine = [int(c.split("-")[1]) for c in stored if c.startswith(f"w{w}-")]
        reordered += mine != sorted(mine)
    await SQLAlchemySession(session_id, engine=engine, **TABLES).clear_session()
    return {
        "failed": sum(errors.values()),
        "lost": len(written - set(counts)),
        "duplicated": sum(n - 1 for n in counts.values() if n > 1),
        "reordered": reordered,
        "stored": len(stored),
        "seconds": elapsed,
        "errors": errors,
    }


async def bench_database(name: str, args: argparse.Namespace) -> list[str]:
    url = URLS[name]
    engine = create_async_engine(url, pool_size=args.writers, max_overflow=2)
    problem = await reachable(engine)
    if problem is not None:
        await engine.dispose()
        return [f"{name:<12}skipped: not reachable at {url} ({problem})"]
    setup: SQLAlchemySession
    if engine.dialect.name in ("mysql", "mariadb"):
        setup = MySQLSQLAlchemySession("bench-setup", engine=engine, **TABLES)
    else:
        setup = SQLAlchemySession("bench-setup", engine=engine, create_tables=True, **TABLES)
    await setup.get_items()
    lines = []
    notes: collections.Counter[str] = collections.Counter()
    try:
        for variant in ("bare", "stack"):
            total: collections.Counter[str] = collections.Counter()
            seconds = 0.0
            for _ in range(args.rounds):
                result = await one_round(variant, engine, args)
                for key in ("failed", "lost", "duplicated", "reordered", "stored"):
                    total[key] += result[key]
                seconds += result["seconds"]
                notes.update(result["errors"])
            label = "bare SQLAlchemySession" if variant == "bare" else "production stack"
            lines.append(
                f"{name:<12}{label:<24}{args.writers * args.adds * args.rounds:>8}"
                f"{total['stored']:>8}{total['failed']:>8}{total['lost']:>6}"
                f"{total['duplicated']:>12}{total['reordered']:>11}{seconds / args.rounds:>9.1f}"
            )
    finally:
        async with engine.begin() as conn:
            for table in ("messages_table", "sessions_table"):
                await conn.execute(text(f"DROP TABLE IF EXISTS {TABLES[table]}"))
        await engine.dispose()
    lines += [f"{'':<12}  {count} × {error}" for error, count in notes.most_common(4)]
    return lines


async def run(args: argparse.Namespace) -> int:
    production_recipe()  # sets CHAT_KEY_CURRENT for this run
    print(
        f"{args.writers} writers × {args.adds} adds of one item to one new session, "
        f"{args.rounds} round(s); load average {os.getloadavg()[0]:.1f}\n"
    )
    header = (
        f"{'database':<12}{'variant':<24}{'written':>8}{'stored':>8}{'failed':>8}{'lost':>6}"
        f"{'duplicated':>12}{'reordered':>11}{'s/round':>9}"
    )
    print(header)
    print("-" * len(header))
    for name in args.db.split(","):
        for line in await bench_database(name.strip(), args):
            print(line)
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--adds", type=int, default=150, help="single-item adds per writer")
    parser.add_argument("--rounds", type=int, default=1, help="new sessions per variant")
    parser.add_argument("--db", default="postgresql,mariadb", help="postgresql, mariadb or both")
    args = parser.parse_args()
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
