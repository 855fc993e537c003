"""What adopting an existing SQLite history costs: TTL's first read dates every item once.

    python benchmarks/bench_adopt.py                    # 10k real items, 7 rounds
    python benchmarks/bench_adopt.py --items 2000 --rounds 3

A history is written by the SDK's bare ``SQLiteSession`` (no layer), as a deployment that
adds memstack later has it. Each round copies that file to a new path (so nothing of it
is in the process cache, whose row entries are keyed by the file) and times, in this
order, since each read changes what the next one finds: the bare store's
``get_items()``; a new ``TTLSession``'s first ``get_items()``, which dates every item by
the store's ``created_at`` in one atomic rewrite; a second new ``TTLSession``'s read of
the adopted history in this process; and the same read as the first read of a new
Python process (imports untimed). Not interleaved: the order is the point. Medians in
ms over rounds, and ratios to the bare read.
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

from _shared import first_reads_in_new_processes, long_history
from agents.memory import SQLiteSession

from memstack.backends.adapters import capabilities_of
from memstack.layers import TTLSession

BATCH = 8
NAMES = (
    "bare read",
    "TTL first read (adopts)",
    "TTL next read, new TTLSession, same process",
    "TTL next read, new process",
)


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
    capabilities_of(store)  # loads the SDK stores' adapters here, not inside a timing
    store.close()

    times: dict[str, list[float]] = {name: [] for name in NAMES}
    returned: dict[str, int] = {}
    try:
        for round_ in range(rounds):
            path = folder / f"round-{round_}.db"
            shutil.copy(template, path)
            sessions = [SQLiteSession("existing", db_path=str(path)) for _ in range(3)]
            bare, first, later = sessions
            reads = {
                NAMES[0]: bare.get_items,
                NAMES[1]: TTLSession(first, ttl=86_400, purge_every=None).get_items,
                NAMES[2]: TTLSession(later, ttl=86_400, purge_every=None).get_items,
            }
            for name, read in reads.items():  # in this order: the later reads read adopted rows
                ms, n = await timed(read)
                times[name].append(ms)
                returned[name] = n
            for session in sessions:
                session.close()
            setup = f"""
from agents.memory import SQLiteSession
from memstack.layers import TTLSession
def build():
    store = SQLiteSession("existing", db_path={str(path)!r})
    return TTLSession(store, ttl=86_400, purge_every=None)
"""
            times[NAMES[3]] += first_reads_in_new_processes(setup, 1, expect=returned[NAMES[2]])
            returned[NAMES[3]] = returned[NAMES[2]]  # checked by expect
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    bare_ms = statistics.median(times["bare read"])
    print(f"{count} items written by the bare SQLiteSession; medians of {rounds} rounds")
    print(f"{'read':<44} {'ms':>10} {'vs bare':>8} {'items':>7}")
    for name, values in times.items():
        ms = statistics.median(values)
        print(f"{name:<44} {ms:>10.2f} {ms / bare_ms:>8.2f} {returned[name]:>7}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.items, args.rounds))
