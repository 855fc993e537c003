"""What adopting an existing SQLite history costs: TTL's first read dates every item once.

    python benchmarks/bench_adopt.py                    # 10k real items, 7 rounds
    python benchmarks/bench_adopt.py --items 2000 --rounds 3

A history is written by the SDK's bare ``SQLiteSession`` (no layer), as a deployment that
adds memstack later has it. Each round copies that file and times, side by side: the bare
store's ``get_items()``; a new ``TTLSession``'s first ``get_items()``, which dates every
item by the store's ``created_at`` in one atomic rewrite; and a new ``TTLSession``'s read
of the adopted history (a later process). Medians in ms, and ratios to the bare read.
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

from _shared import long_history
from agents.memory import SQLiteSession

import memstack.backends.adapters  # noqa: F401  (imported up front, not inside a timing)
from memstack.layers import TTLSession

BATCH = 8


async def timed(read: Callable[[], Awaitable[Any]]) -> tuple[float, int]:
    start = time.perf_counter()
    items = await read()
    return (time.perf_counter() - start) * 1e3, len(items)


async def main(count: int, rounds: int) -> None:
    items = long_history(count)
    folder = Path(tempfile.mkdtemp(prefix="bench-adopt-"))
    template = folder / "template.db"
    store = SQLiteSession("existing", db_path=str(template))
    for start in range(0, len(items), BATCH):
        await store.add_items(items[start : start + BATCH])  # type: ignore[arg-type]
    store.close()

    times: dict[str, list[float]] = {"bare read": [], "TTL first read": [], "TTL later read": []}
    returned: dict[str, int] = {}
    try:
        for round_ in range(rounds):
            path = folder / f"round-{round_}.db"
            shutil.copy(template, path)
            sessions = [SQLiteSession("existing", db_path=str(path)) for _ in range(3)]
            bare, first, later = sessions
            reads = {
                "bare read": bare.get_items,
                "TTL first read": TTLSession(first, ttl=86_400, purge_every=None).get_items,
                "TTL later read": TTLSession(later, ttl=86_400, purge_every=None).get_items,
            }
            for name, read in reads.items():  # in this order: "later" reads adopted rows
                ms, n = await timed(read)
                times[name].append(ms)
                returned[name] = n
            for session in sessions:
                session.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    bare_ms = statistics.median(times["bare read"])
    print(f"{count} items written by the bare SQLiteSession; medians of {rounds} rounds")
    print(f"{'read':<16} {'ms':>10} {'vs bare':>8} {'items':>7}")
    for name, values in times.items():
        ms = statistics.median(values)
        print(f"{name:<16} {ms:>10.2f} {ms / bare_ms:>8.2f} {returned[name]:>7}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.items, args.rounds))
