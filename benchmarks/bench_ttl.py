"""Reads with and without TTLSession on a 10k-item SQLite history, half of it expired.

    python benchmarks/bench_ttl.py                      # 10k real items, 15 rounds
    python benchmarks/bench_ttl.py --items 2000 --rounds 5

Both variants hold the same items (real transcripts from ../shared/data, customer
service and coding runs interleaved; ``sample_items`` if absent) in their own SQLite file
through the SDK's ``SQLiteSession``, written in turn-sized batches. The TTL file's first
half was written over one day, its second over the next, with ``ttl`` of 1.5 days: at the
time of the reads the first half has expired, but no purge ran, so every row is stored.

Reported as medians over rounds: ``get_items(limit=50)`` (the Runner's read with a session
limit) and ``get_items()`` (the Runner's default), how many rows each read fetched from
SQLite, and what it returned. "cold" is a new TTLSession per read (a new process);
"warm" reuses one, which starts its unbounded reads from the size it found last time.
Then one ``add_items`` of 8 items, and ``purge_expired()`` deleting the expired half (the
items of the live half whose unit began in the expired one go with it).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _shared import long_history, medians_ms
from agents.memory import Session, SQLiteSession

import memstack.backends.adapters  # noqa: F401  (imported up front, not inside a timing)
from memstack.bench.transcripts import DATA_DIR
from memstack.layers import PassthroughSession, TTLSession
from memstack.testing import FakeClock

DATA = DATA_DIR
BATCH = 8  # items per add_items: about one agent turn with a tool call or two
DAY = 86_400.0
TTL = 1.5 * DAY


class Counting(PassthroughSession):
    """Counts the rows the store hands up; used in an untimed pass only."""

    rows = 0

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> Any:
        items = await self.inner.get_items(limit)
        Counting.rows += len(items)
        return items


async def fill(
    session: Session, items: list[dict[str, Any]], clock: FakeClock | None = None, step: float = 0
) -> None:
    for start in range(0, len(items), BATCH):
        await session.add_items(items[start : start + BATCH])  # type: ignore[arg-type]
        if clock is not None:
            clock.tick(step)


async def rows_read(
    read: Callable[[Session], Awaitable[Any]],
    variant: str,
    bare: Session,
    ttl_store: Session,
    clock: FakeClock,
) -> tuple[int, int]:
    """Rows the store handed up for one read of ``variant``, and items returned."""
    if variant.startswith("bare"):
        layer: Session = Counting(bare)
    else:
        layer = TTLSession(Counting(ttl_store), ttl=TTL, clock=clock, purge_every=None)
        if variant.endswith("warm"):
            await read(layer)  # learn the size, as the warm instance has
    Counting.rows = 0
    returned = len(await read(layer))
    return Counting.rows, returned


async def run(count: int, rounds: int) -> None:
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

        warm = TTLSession(ttl_store, ttl=TTL, clock=clock, purge_every=None)

        def cold() -> TTLSession:
            return TTLSession(ttl_store, ttl=TTL, clock=clock, purge_every=None)

        reads: dict[str, Callable[[Session], Awaitable[Any]]] = {
            "get_items(limit=50)": lambda s: s.get_items(limit=50),
            "get_items()": lambda s: s.get_items(),
        }
        variants: dict[str, Callable[[], Session]] = {
            "bare SQLiteSession": lambda: bare,
            "TTLSession, cold": cold,
            "TTLSession, warm": lambda: warm,
        }
        print(
            f"{len(items)} items ({half} expired, not yet purged), SQLite file, "
            f"median of {rounds} rounds\n"
        )
        header = f"{'read':<22}{'variant':<22}{'median ms':>10}{'rows read':>11}{'returned':>10}"
        print(header)
        print("-" * len(header))
        for read_name, read in reads.items():
            actions = {
                name: (lambda make=make, read=read: read(make())) for name, make in variants.items()
            }
            medians = await medians_ms(actions, rounds)
            for variant_name, ms in medians.items():
                fetched, returned = await rows_read(read, variant_name, bare, ttl_store, clock)
                print(f"{read_name:<22}{variant_name:<22}{ms:>10.2f}{fetched:>11}{returned:>10}")
        print()

        batch = items[:BATCH]
        writes = await medians_ms(
            {
                "bare SQLiteSession": lambda: bare.add_items(batch),  # type: ignore[arg-type]
                "TTLSession": lambda: warm.add_items(batch),  # type: ignore[arg-type]
            },
            rounds,
        )
        for name, ms in writes.items():
            print(f"{f'add_items({BATCH} items)':<22}{name:<22}{ms:>10.2f}")
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
            fetched, returned = await rows_read(
                lambda s: s.get_items(), name, bare, ttl_store, clock
            )
            print(f"{'get_items()':<22}{name:<22}{ms:>10.2f}{fetched:>11}{returned:>10}")
        for session in (bare, ttl_store):
            session.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    asyncio.run(run(args.items, args.rounds))


if __name__ == "__main__":
    main()
