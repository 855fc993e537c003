"""SlidingWindowSession: read cost at 100 vs 100,000 stored items, and prompt-prefix reuse.

    python benchmarks/bench_window.py               # 51 rounds, 3 new processes per window
    python benchmarks/bench_window.py --rounds 11 --processes 1 --skip-replay

Part 1. Two SQLite files (the SDK's ``SQLiteSession``) hold one long customer-service
history built from the real transcripts in ../shared/data (system prompts dropped,
call ids renamed per copy): 100 items and 100,000 items. Each round times, in shuffled
order, one ``get_items()`` through the window on each file and one bare
``get_items(limit=n)`` on the same file returning as many items as the window did.
Reported: medians over rounds, the 100k/100 ratio of the window's time, and the window's
overhead over the bare read. Token counts are warm (the process cache filled by an
untimed read first, as in a long-running server). Two first reads of the 100k file are
shown too: "new process" is the first ``get_items()`` of a new Python process
(``--processes`` of them, median: the tokenizer's vocabulary loads, every item is
counted); "new window" is a window built afresh in this process, whose token counts are
already in the process cache.

Part 2. Real conversations replayed turn by turn (coding runs: at every tool step, as an
agent loop reads its session) with and without hysteresis: the share of each call's input
tokens that repeats the previous call's prefix (what a provider's prompt cache can reuse)
and the mean tokens sent.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _shared import conversations, first_reads_in_new_processes, long_history
from agents.memory import SQLiteSession

from memstack.bench.transcripts import DATA_DIR
from memstack.history import is_user_message
from memstack.layers import SlidingWindowSession
from memstack.testing import InMemorySession
from memstack.tokens import TokenCounter

DATA = DATA_DIR
SIZES = (100, 100_000)
COUNTER = TokenCounter("gpt-4o")
CONFIGS: dict[str, dict[str, Any]] = {
    "max_tokens=4000": {"max_tokens": 4000},
    "max_items=50, unit": {"max_items": 50, "align": "unit"},
    "max_turns=4": {"max_turns": 4},
    "max_tokens=4000, low_watermark=0.6": {"max_tokens": 4000, "low_watermark": 0.6},
}

Item = dict[str, Any]


async def timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = await call()
    return time.perf_counter() - start, result


async def part1(rounds: int, processes: int, directory: Path) -> None:
    history = long_history(max(SIZES), names=("airline_tau",))
    stores = {}
    for size in SIZES:
        store = SQLiteSession(f"bench-{size}", directory / f"window-{size}.db")
        items = history[-size:]  # both files end with the same items
        for i in range(0, size, 1000):
            await store.add_items(items[i : i + 1000])  # type: ignore[arg-type]
        stores[size] = store
    print(f"Part 1: get_items() on SQLite, medians of {rounds} rounds (ms)\n")
    header = (
        f"{'window':38} {'new proc':>9} {'new window':>10} {'100':>7} {'100k':>7} {'ratio':>6} "
        f"{'bare 100k':>9} {'overhead':>9} {'items':>6}"
    )
    print(header)
    print("-" * len(header))
    big = SIZES[-1]
    for options in CONFIGS.values():  # the process's first counts: untimed
        await SlidingWindowSession(stores[big], **options).get_items()
    for name, options in CONFIGS.items():
        setup = f"""
from agents.memory import SQLiteSession
from memstack.layers import SlidingWindowSession
def build():
    store = SQLiteSession("bench-{big}", {str(directory / f"window-{big}.db")!r})
    return SlidingWindowSession(store, **{options!r})
"""
        new_process = statistics.median(first_reads_in_new_processes(setup, processes))
        windows = {size: SlidingWindowSession(stores[size], **options) for size in SIZES}
        cold, view = await timed(windows[big].get_items)  # a new window, warm process
        await windows[SIZES[0]].get_items()
        bare = functools.partial(stores[SIZES[-1]].get_items, limit=len(view))
        samples: dict[str, list[float]] = {key: [] for key in ("w100", "w100k", "b100k")}
        jobs: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("w100", windows[SIZES[0]].get_items),
            ("w100k", windows[SIZES[-1]].get_items),
            ("b100k", bare),
        ]
        for _ in range(rounds):
            random.shuffle(jobs)
            for key, job in jobs:
                samples[key].append((await timed(job))[0])
        w100, w100k, b100k = (statistics.median(samples[k]) * 1e3 for k in samples)
        print(
            f"{name:38} {new_process:9.1f} {cold * 1e3:10.2f} {w100:7.2f} {w100k:7.2f} "
            f"{w100k / w100:6.2f} {b100k:9.2f} {w100k - b100k:+9.2f} {len(view):6d}"
        )
    for store in stores.values():
        store.close()
    print(
        "\nratio = window at 100k / window at 100 (target <= 1.3); overhead = window at 100k"
        " minus a bare get_items(limit=n) returning the same number of items. new proc: first"
        f" read at 100k of a new process (median of {processes}); new window: first read at"
        " 100k of a window built afresh in this process (token counts in the process cache)."
    )


def checkpoints(items: list[Item], every_step: bool) -> list[int]:
    points = {i for i, item in enumerate(items) if i and is_user_message(item)}
    if every_step:  # an agent loop reads its session before each model call
        points |= {i + 1 for i, item in enumerate(items) if item.get("type", "").endswith("output")}
    return sorted(points | {len(items)})


async def reuse(dataset: str, options: dict[str, Any], every_step: bool) -> tuple[float, float]:
    shared = sent = calls = 0
    for items in conversations(dataset):
        store = InMemorySession("replay")
        window = SlidingWindowSession(store, counter=COUNTER, **options)
        previous: list[Item] = []
        written = 0
        for point in checkpoints(items, every_step):
            await store.add_items(items[written:point])  # type: ignore[arg-type]
            written = point
            view: list[Item] = await window.get_items()  # type: ignore[assignment]
            common = 0
            for old, new in zip(previous, view, strict=False):
                if old != new:
                    break
                common += COUNTER.count_item(new)
            shared += common
            sent += COUNTER.count_items(view)
            calls += 1
            previous = view
    return shared / sent, sent / calls


async def part2() -> None:
    print("\nPart 2: prompt-prefix reuse on real transcripts (share of input tokens that")
    print("repeat the previous call's prefix; mean input tokens per call)\n")
    cases = [
        ("airline_tau, per user turn", "airline_tau", 3000, False),
        ("swe_coding, per tool step", "swe_coding", 12_000, True),
    ]
    for label, dataset, budget, every_step in cases:
        for low in (None, 0.5, 0.7):
            options = {"max_tokens": budget, "align": "unit", "low_watermark": low}
            share, mean = await reuse(dataset, options, every_step)
            print(
                f"{label:28} max_tokens={budget:<6} low_watermark={low!s:5} "
                f"prefix reused {share:6.1%}   mean sent {mean:8.0f}"
            )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=51)
    parser.add_argument("--processes", type=int, default=3, help="new processes per window")
    parser.add_argument("--skip-replay", action="store_true", help="only part 1")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        await part1(args.rounds, args.processes, Path(directory))
    if not args.skip_replay:
        await part2()


if __name__ == "__main__":
    asyncio.run(main())
