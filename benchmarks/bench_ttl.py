"""Reads with and without TTLSession on a 10k-item SQLite history, half of it expired.

    python benchmarks/bench_ttl.py                      # 10k real items, 15 rounds, 3 processes
    python benchmarks/bench_ttl.py --items 2000 --rounds 5 --processes 1

Both variants hold the same items (real transcripts from ../shared/data, customer
service and coding runs interleaved: ``_shared.long_history``) in their own SQLite file
through the SDK's ``SQLiteSession``, written in turn-sized batches. The TTL file's first
half was written over one day, its second over the next, with ``ttl`` of 1.5 days: at the
time of the reads the first half has expired, but no purge ran, so every row is stored.

Reported as medians over interleaved rounds: ``get_items(limit=50)`` (the Runner's read
with a session limit) and ``get_items()`` (the Runner's default), how many rows each read
fetched from SQLite (counted on the read's own path, in an untimed read), and what it
returned. "new TTLSession" builds one per read in this process; "reused" reads through
one. Both start from what the process cache holds (parsed rows, stamps, and how many
rows the session's last read needed), so they cost the same. "new process" is the first
read of a new Python process (``--processes`` of them, median; imports untimed).
Then one ``add_items`` of 8 items, and ``purge_expired()`` deleting the expired half (the
items of the live half whose unit began in the expired one go with it).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _shared import first_reads_in_new_processes, long_history, medians_ms, timed_store_reads
from agents.memory import Session, SQLiteSession

import memstack.backends.adapters  # noqa: F401  (imported up front, not inside a timing)
from memstack.bench.transcripts import DATA_DIR
from memstack.layers import TTLSession
from memstack.testing import FakeClock

DATA = DATA_DIR
BATCH = 8  # items per add_items: about one agent turn with a tool call or two
DAY = 86_400.0
TTL = 1.5 * DAY


async def fill(
    session: Session, items: list[dict[str, Any]], clock: FakeClock | None = None, step: float = 0
) -> None:
    for start in range(0, len(items), BATCH):
        await session.add_items(items[start : start + BATCH])  # type: ignore[arg-type]
        if clock is not None:
            clock.tick(step)


async def rows_read(
    read: Callable[[Session], Awaitable[Any]],
    session: Session,
    counted: list[tuple[float, int]],
) -> tuple[int, int]:
    """Rows the store handed up for one read of ``session`` (counted on the read's own
    path; the bare store reads what it returns), and items returned."""
    counted.clear()
    returned = len(await read(session))
    return (sum(rows for _, rows in counted) if counted else returned), returned


def new_process(path: Path, now: float, limit: int | None, processes: int) -> float:
    setup = f"""
from agents.memory import SQLiteSession
from memstack.layers import TTLSession
from memstack.testing import FakeClock
def build():
    store = SQLiteSession("bench", db_path={str(path)!r})
    return TTLSession(store, ttl={TTL!r}, clock=FakeClock({now!r}), purge_every=None)
"""
    return statistics.median(first_reads_in_new_processes(setup, processes, limit=limit))


async def run(count: int, rounds: int, processes: int) -> None:
    items = long_history(count)
    half = len(items) // 2
    folder = Path(tempfile.mkdtemp(prefix="bench-ttl-"))
    clock = FakeClock()
    try:
        bare = SQLiteSession("bench", db_path=str(folder / "bare.db"))
        await fill(bare, items)
        ttl_store = SQLiteSession("bench", db_path=str(folder / "ttl.db"))
        writer = TTLSession(ttl_store, ttl=TTL, clock=clock, purge_every=None)
        start = clock.now
        # One turn every few seconds: the first half over one day, the second over the next.
        await fill(writer, items[:half], clock, DAY / -(-half // BATCH))
        clock.set(start + DAY)
        await fill(writer, items[half:], clock, DAY / -(-(len(items) - half) // BATCH))
        clock.set(start + DAY + TTL - 1)  # the first half has expired, the second has not

        counted = timed_store_reads({"ttl": ttl_store})["ttl"]
        reused = TTLSession(ttl_store, ttl=TTL, clock=clock, purge_every=None)

        def new() -> TTLSession:
            return TTLSession(ttl_store, ttl=TTL, clock=clock, purge_every=None)

        reads: dict[str, tuple[int | None, Callable[[Session], Awaitable[Any]]]] = {
            "get_items(limit=50)": (50, lambda s: s.get_items(limit=50)),
            "get_items()": (None, lambda s: s.get_items()),
        }
        variants: dict[str, Callable[[], Session]] = {
            "bare SQLiteSession": lambda: bare,
            "TTLSession, new": new,
            "TTLSession, reused": lambda: reused,
        }
        print(
            f"{len(items)} items ({half} expired, not yet purged), SQLite file, "
            f"median of {rounds} rounds\n"
        )
        header = f"{'read':<22}{'variant':<26}{'median ms':>10}{'rows read':>11}{'returned':>10}"
        print(header)
        print("-" * len(header))
        for read_name, (limit, read) in reads.items():
            cold = new_process(folder / "ttl.db", clock.now, limit, processes)
            print(f"{read_name:<22}{'TTLSession, new process':<26}{cold:>10.2f}{'':>11}{'':>10}")
            actions = {
                name: (lambda make=make, read=read: read(make())) for name, make in variants.items()
            }
            medians = await medians_ms(actions, rounds)
            for variant_name, ms in medians.items():
                fetched, returned = await rows_read(read, variants[variant_name](), counted)
                print(f"{read_name:<22}{variant_name:<26}{ms:>10.2f}{fetched:>11}{returned:>10}")
        print()

        batch = items[:BATCH]
        writes = await medians_ms(
            {
                "bare SQLiteSession": lambda: bare.add_items(batch),  # type: ignore[arg-type]
                "TTLSession": lambda: reused.add_items(batch),  # type: ignore[arg-type]
            },
            rounds,
        )
        for name, ms in writes.items():
            print(f"{f'add_items({BATCH} items)':<22}{name:<26}{ms:>10.2f}")
        print()

        purger = TTLSession(ttl_store, ttl=TTL, clock=clock)  # a retention job, say
        start = time.perf_counter()
        purged = await purger.purge_expired()
        seconds = time.perf_counter() - start
        left = len(await purger.get_items())
        print(
            f"purge_expired()       deleted {purged} rows in {seconds * 1000:.0f} ms "
            f"(batches of {purger.purge_batch}); {left} items left\n"
        )
        print("after the purge (the steady state when purges keep up):")
        medians = await medians_ms(
            {name: (lambda make=make: make().get_items()) for name, make in variants.items()},
            rounds,
        )
        for name, ms in medians.items():
            fetched, returned = await rows_read(lambda s: s.get_items(), variants[name](), counted)
            print(f"{'get_items()':<22}{name:<26}{ms:>10.2f}{fetched:>11}{returned:>10}")
        for session in (bare, ttl_store):
            session.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--processes", type=int, default=3, help="new processes per read")
    args = parser.parse_args()
    asyncio.run(run(args.items, args.rounds, args.processes))


if __name__ == "__main__":
    main()
