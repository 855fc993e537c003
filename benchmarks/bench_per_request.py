"""A stack built per request vs the bare store, on PostgreSQL; and a fresh process's first read.

    python benchmarks/bench_per_request.py                  # 40 sessions, 8 clients, 3 rounds
    python benchmarks/bench_per_request.py --requests 200 --rounds 1
    python benchmarks/bench_per_request.py --first-read-only --warm-up --rounds 15

What a web handler does on each request, without the HTTP around it (``memstack bench
server`` adds that): build the stack for the request's session from
``recipes/production.toml`` (offline summaries), ``get_items()``, then ``add_items`` of
the user's message and the reply. The bare side is the SDK's documented pattern,
``SQLAlchemySession(session_id, engine=one_shared_engine)``. Both share one engine (one
pool); each session first gets ``--history`` items of real history (untimed).
``--clients`` requests run at once; each round runs both variants one after the other,
order alternating, on the same sessions' own copies.

"first read" runs a new Python process per sample that imports memstack, opens one
session and times its first ``get_items()``: everything a process loads on first use
(the tokenizer's vocabulary, ciphers, the process cache) counts, imports do not.
``--first-read-only`` times only that, ``--rounds`` processes per variant in rotating
order, in wall and CPU time of the timed read (the CPU time is steadier on a shared
machine); ``--against DIR`` adds the stack of another checkout (an old tree) to the
rotation, so old and new are measured side by side.

Reported: requests/s, p50/p95 latency (medians over rounds), the process's RSS growth
over the timed requests, and stack/bare ratios. Loopback only; prints ``skipped: …``
(exit 0) when PostgreSQL does not answer. Tables ``memstack_bench_pr_*`` are dropped at
the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from _shared import long_history, production_recipe, reachable
from agents.extensions.memory import SQLAlchemySession
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
TABLES = {
    "sessions_table": "memstack_bench_pr_sessions",
    "messages_table": "memstack_bench_pr_messages",
}
TURN = [
    {"role": "user", "content": "Can you move my flight to Friday morning?"},
    {"role": "assistant", "content": "Done: your flight now leaves Friday at 9:05."},
]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


async def phase(
    variant: str, engine: AsyncEngine, args: argparse.Namespace
) -> tuple[float, list[float], float]:
    """Every client's requests at once: (requests per second, latencies, RSS growth MB)."""
    recipe = production_recipe(args.url)

    def session(number: int) -> Any:
        store = SQLAlchemySession(f"{variant}-{number}", engine=engine, **TABLES)
        return recipe.stack_over(store) if variant == "stack" else store

    latencies: list[float] = []
    queue = list(range(args.requests))

    async def client() -> None:
        while queue:
            number = queue.pop() % args.sessions
            start = time.perf_counter()
            handler_session = session(number)  # built per request, as a handler does
            await handler_session.get_items()
            await handler_session.add_items(TURN)  # type: ignore[arg-type]
            latencies.append(time.perf_counter() - start)

    before = rss_mb()
    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(args.clients)))
    elapsed = time.perf_counter() - start
    return len(latencies) / elapsed, latencies, rss_mb() - before


async def prepare(engine: AsyncEngine, args: argparse.Namespace) -> None:
    recipe = production_recipe(args.url)
    history = long_history(args.history)
    setup = SQLAlchemySession("bench-setup", engine=engine, create_tables=True, **TABLES)
    await setup.get_items()
    for number in range(args.sessions):
        stack = recipe.stack_over(SQLAlchemySession(f"stack-{number}", engine=engine, **TABLES))
        bare = SQLAlchemySession(f"bare-{number}", engine=engine, **TABLES)
        for session in (stack, bare):
            await session.clear_session()
            for i in range(0, len(history), 8):
                await session.add_items(history[i : i + 8])  # type: ignore[arg-type]


FIRST_READ = """
import asyncio, os, sys, time
sys.path.insert(0, {bench!r})
from _shared import production_recipe
from agents.extensions.memory import SQLAlchemySession
from sqlalchemy.ext.asyncio import create_async_engine
os.environ["CHAT_KEY_CURRENT"] = {key!r}
async def main():
    engine = create_async_engine({url!r})
    recipe = production_recipe({url!r})
    store = SQLAlchemySession({session!r}, engine=engine, **{tables!r})
    session = recipe.stack_over(store) if {stack!r} else store
    if {warm!r}:  # what a server's lifespan does before its first request
        import memstack
        await memstack.warm_up(recipe if {stack!r} else None)
    start, cpu = time.perf_counter(), time.process_time()
    await session.get_items()
    print(time.perf_counter() - start, time.process_time() - cpu)
    await engine.dispose()
asyncio.run(main())
"""


# The history of ``--against``'s session, written by that checkout's own stack: an old
# checkout may not read what this one writes (a newer stored format).
PREPARE_AGAINST = """
import asyncio, os, sys
sys.path.insert(0, {bench!r})
from _shared import long_history, production_recipe
from agents.extensions.memory import SQLAlchemySession
from sqlalchemy.ext.asyncio import create_async_engine
os.environ["CHAT_KEY_CURRENT"] = {key!r}
async def main():
    engine = create_async_engine({url!r})
    store = SQLAlchemySession({session!r}, engine=engine, **{tables!r})
    stack = production_recipe({url!r}).stack_over(store)
    await stack.clear_session()
    history = long_history({history!r})
    for i in range(0, len(history), 8):
        await stack.add_items(history[i : i + 8])
    await engine.dispose()
asyncio.run(main())
"""
AGAINST_SESSION = "against-0"


def prepare_against(args: argparse.Namespace) -> None:
    """``--against``'s session, written through that checkout's production stack."""
    code = PREPARE_AGAINST.format(
        bench=os.path.join(args.against, "benchmarks"),
        key=os.environ["CHAT_KEY_CURRENT"],
        url=args.url,
        session=AGAINST_SESSION,
        tables=TABLES,
        history=args.history,
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def first_read(
    variant: str, args: argparse.Namespace, bench: str | None = None
) -> tuple[float, float]:
    """Wall and CPU seconds of the first ``get_items()`` of a new process.

    ``bench``: the benchmarks folder of the checkout the child imports (default: this one;
    another reads the session that checkout wrote, ``prepare_against``).
    """
    code = FIRST_READ.format(
        bench=bench or os.path.dirname(os.path.abspath(__file__)),
        key=os.environ["CHAT_KEY_CURRENT"],
        url=args.url,
        session=f"{variant}-0" if bench is None else AGAINST_SESSION,
        tables=TABLES,
        stack=variant == "stack",
        warm=args.warm_up,
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    wall, cpu = done.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def first_reads_only(args: argparse.Namespace) -> int:
    """``--first-read-only``: ``--rounds`` new processes per variant, order rotating."""
    variants: dict[str, tuple[str, str | None]] = {
        "production stack": ("stack", None),
        "bare SQLAlchemySession": ("bare", None),
    }
    if args.against:
        variants[f"stack, {args.against}"] = ("stack", os.path.join(args.against, "benchmarks"))
        prepare_against(args)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    names = list(variants)
    loads = [os.getloadavg()[0]]
    for round_ in range(args.rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            variant, bench = variants[name]
            samples[name].append(first_read(variant, args, bench))
        loads.append(os.getloadavg()[0])
    print(
        f"first get_items() of a new process, {args.history} items, PostgreSQL on loopback"
        f"{', after memstack.warm_up' if args.warm_up else ''}; medians of {args.rounds} "
        f"processes per variant, order rotating; load average {min(loads):.1f}-"
        f"{max(loads):.1f}\n"
    )
    bare = [statistics.median(x[kind] for x in samples[names[1]]) for kind in (0, 1)]
    header = f"{'variant':<40}{'wall ms':>9}{'/ bare':>8}{'CPU ms':>9}{'/ bare':>8}"
    print(header)
    print("-" * len(header))
    for name, values in samples.items():
        wall, cpu = (statistics.median(x[kind] for x in values) for kind in (0, 1))
        print(
            f"{name:<40}{wall * 1e3:>9.1f}{wall / bare[0]:>8.2f}"
            f"{cpu * 1e3:>9.1f}{cpu / bare[1]:>8.2f}"
        )
    return 0


async def run(args: argparse.Namespace) -> int:
    engine = create_async_engine(args.url, pool_size=args.clients, max_overflow=0)
    problem = await reachable(engine)
    if problem is not None:
        print(f"skipped: PostgreSQL not reachable at {args.url} ({problem})")
        await engine.dispose()
        return 0
    production_recipe(args.url)  # sets CHAT_KEY_CURRENT for this run and its children
    results: dict[str, list[tuple[float, list[float], float]]] = {"stack": [], "bare": []}
    firsts: dict[str, list[float]] = {"stack": [], "bare": []}
    try:
        await prepare(engine, args)
        if args.first_read_only:
            return first_reads_only(args)
        for variant in ("stack", "bare"):  # warm: connections, vocabularies, caches
            await phase(
                variant, engine, argparse.Namespace(**{**vars(args), "requests": args.sessions})
            )
        for round_ in range(args.rounds):
            order = ["stack", "bare"] if round_ % 2 == 0 else ["bare", "stack"]
            for variant in order:
                results[variant].append(await phase(variant, engine, args))
                firsts[variant].append(first_read(variant, args)[0])
                print(f"  round {round_ + 1} {variant}: {results[variant][-1][0]:.1f} req/s",
                      file=sys.stderr)  # fmt: skip
    finally:
        async with engine.begin() as conn:
            for table in ("messages_table", "sessions_table"):
                await conn.execute(text(f"DROP TABLE IF EXISTS {TABLES[table]}"))
        await engine.dispose()

    def stat(variant: str) -> tuple[float, float, float, float, float]:
        runs = results[variant]
        return (
            statistics.median(r[0] for r in runs),
            statistics.median(quantile(r[1], 0.50) for r in runs) * 1e3,
            statistics.median(quantile(r[1], 0.95) for r in runs) * 1e3,
            statistics.median(r[2] for r in runs),
            statistics.median(firsts[variant]) * 1e3,
        )

    load = os.getloadavg()[0]
    print(
        f"{args.requests} requests (build the stack, get_items, add_items of 2 items) by "
        f"{args.clients} clients over {args.sessions} sessions of {args.history} items, "
        f"PostgreSQL on loopback, one shared engine; medians of {args.rounds} rounds; "
        f"load average {load:.1f}\n"
    )
    header = (
        f"{'variant':<26}{'req/s':>8}{'p50 ms':>9}{'p95 ms':>9}{'RSS +MB':>9}{'1st read ms':>13}"
    )
    print(header)
    print("-" * len(header))
    stack, bare = stat("stack"), stat("bare")
    for name, row in (("production stack", stack), ("bare SQLAlchemySession", bare)):
        print(f"{name:<26}{row[0]:>8.1f}{row[1]:>9.1f}{row[2]:>9.1f}{row[3]:>9.1f}{row[4]:>13.1f}")
    print(
        f"{'stack / bare':<26}{stack[0] / bare[0]:>8.2f}{stack[1] / bare[1]:>9.2f}"
        f"{stack[2] / bare[2]:>9.2f}{'':>9}{stack[4] / bare[4]:>13.2f}"
    )
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("MEMSTACK_BENCH_PG", URL))
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--history", type=int, default=400, help="items per session, untimed")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=800, help="per phase")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--warm-up",
        action="store_true",
        help="the new process calls memstack.warm_up() before its first read, as a server would",
    )
    parser.add_argument(
        "--first-read-only",
        action="store_true",
        help="only the first reads: --rounds new processes per variant (one session each)",
    )
    parser.add_argument(
        "--against",
        metavar="DIR",
        help="with --first-read-only: also the stack of the checkout at DIR (old vs new)",
    )
    args = parser.parse_args()
    if args.first_read_only:
        args.sessions = 1
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
