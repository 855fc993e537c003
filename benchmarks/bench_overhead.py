"""The full production stack vs a bare SQLiteSession on a 10k-item history.

    python benchmarks/bench_overhead.py                 # 10k real items, 21 rounds, 5 new processes
    python benchmarks/bench_overhead.py --items 2000 --rounds 5 --processes 3

The stack is recipes/production.toml (TTL → Encrypted → Compaction → Window) over a
SQLite file, built with ``load_recipe(…, url=…)``, a fresh key in ``CHAT_KEY_CURRENT``
and the extractive summariser in place of the recipe's model (offline, deterministic).
Both files hold the same real items (customer service and coding runs interleaved, see
``_shared.long_history``), written in turn-sized batches; the stack's file through
the stack, so it holds TTL records, envelopes and the compaction records the trigger
wrote on the way.

Reported side by side, medians of interleaved rounds: the stack's ``get_items()`` (its
view), the bare ``get_items()`` (everything, what the Runner reads with no limit) and
the bare ``get_items(limit=len(view))`` (as many items as the view); then one
``add_items`` of one agent turn through each.

First reads besides. "new process" is the first ``get_items()`` of a new Python process
(``--processes`` of them, median; imports and building the stack untimed; the
tokenizer's vocabulary and an empty process cache count), the stack's and the bare
store's, and the stack's again with the vocabulary loaded before the timed read. "new
stack, warm process" is a stack built afresh in this process, which has read and written
the same rows: the process cache (parsed rows, opened envelopes, token counts, read
sizes) is warm, only the stack object is new — what a server that builds a stack per
request pays.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from _shared import (
    BATCH,
    close,
    first_reads_in_new_processes,
    long_history,
    medians_ms,
    production_recipe,
    renamed,
    turns,
)
from agents.memory import Session, SQLiteSession

from memstack.backends import open_backend


async def fill(session: Session, items: list[dict[str, object]]) -> float:
    start = time.perf_counter()
    for i in range(0, len(items), BATCH):
        await session.add_items(items[i : i + BATCH])  # type: ignore[arg-type]
    return time.perf_counter() - start


def new_processes(folder: Path, n: int, processes: int) -> dict[str, float]:
    """Median first reads of new processes: the stack's view, and the bare tail of ``n``."""
    stack = f"""
from _shared import production_recipe
def build():
    return production_recipe({f"sqlite:///{folder / 'stack.db'}"!r}).build("bench")
"""
    bare = f"""
from agents.memory import SQLiteSession
def build():
    return SQLiteSession("bench", db_path={str(folder / "bare.db")!r})
"""
    # The same with the tokenizer's vocabulary loaded before the timed read (a server
    # that loads it at start-up): what is left is the empty process cache.
    preloaded = (
        stack
        + 'from memstack.tokens import TokenCounter\nTokenCounter("gpt-4.1").count_text("x")\n'
    )
    return {
        "stack": statistics.median(first_reads_in_new_processes(stack, processes, expect=n)),
        "preloaded": statistics.median(
            first_reads_in_new_processes(preloaded, processes, expect=n)
        ),
        "bare": statistics.median(first_reads_in_new_processes(bare, processes, limit=n, expect=n)),
    }


async def run(count: int, rounds: int, processes: int, folder: Path) -> None:
    history = long_history(count)
    recipe = production_recipe(f"sqlite:///{folder / 'stack.db'}")
    stack = recipe.build("bench")
    bare = SQLiteSession("bench", db_path=folder / "bare.db")
    print(f"stack: {stack!r}\n")
    stack_fill, bare_fill = await fill(stack, history), await fill(bare, history)
    rows = open_backend(f"sqlite:///{folder / 'stack.db'}", "bench")
    stored = len(await rows.get_items())
    print(
        f"{len(history)} items written in batches of {BATCH}: stack {stack_fill:.1f} s, "
        f"bare {bare_fill:.1f} s ({stack_fill / bare_fill:.1f}x); the stack's file holds "
        f"{stored} rows ({stored - len(history)} compaction records)\n"
    )

    fresh = recipe.build("bench")
    start = time.perf_counter()
    view = await fresh.get_items()
    new_stack = (time.perf_counter() - start) * 1e3
    await stack.get_items()  # warm
    n = len(view)
    cold = new_processes(folder, n, processes)
    reads = await medians_ms(
        {
            "stack get_items()": stack.get_items,
            "bare get_items()": bare.get_items,
            f"bare get_items(limit={n})": lambda: bare.get_items(limit=n),
        },
        rounds,
    )
    view_ms = reads["stack get_items()"]
    print(
        f"reads (stack view: {n} items): first reads of {processes} new processes (median), "
        f"one new stack in this process, then medians of {rounds} interleaved rounds\n"
    )
    header = f"{'read':<50}{'ms':>9}{'stack ÷ this':>14}{'items':>8}"
    print(header)
    print("-" * len(header))
    print(f"{'stack get_items(), new process':<50}{cold['stack']:>9.2f}{'':>14}{n:>8}")
    preloaded = "stack get_items(), new process, tokenizer loaded"
    print(f"{preloaded:<50}{cold['preloaded']:>9.2f}{'':>14}{n:>8}")
    print(f"{f'bare get_items(limit={n}), new process':<50}{cold['bare']:>9.2f}{'':>14}{n:>8}")
    print(f"{'stack get_items(), new stack, warm process':<50}{new_stack:>9.2f}{'':>14}{n:>8}")
    for name, ms in reads.items():
        returned = n if "limit" in name or name.startswith("stack") else len(history)
        label = f"{name}, warm" if name.startswith("stack") else name
        print(f"{label:<50}{ms:>9.2f}{view_ms / ms:>14.2f}{returned:>8}")

    turn = next(t for t in turns(history) if len(t) <= BATCH and len(t) > 2)
    copies = iter(range(10**6))
    writes = await medians_ms(
        {
            "stack add_items(turn)": lambda: stack.add_items(renamed(turn, f"w{next(copies)}")),  # type: ignore[arg-type]
            "bare add_items(turn)": lambda: bare.add_items(renamed(turn, f"w{next(copies)}")),  # type: ignore[arg-type]
        },
        rounds,
    )
    print(f"\nwrites: one turn of {len(turn)} items, medians of {rounds} interleaved rounds\n")
    bare_ms = writes["bare add_items(turn)"]
    for name, ms in writes.items():
        print(f"{name:<30}{ms:>9.2f}{ms / bare_ms:>9.2f}x bare")
    for session in (bare, rows, fresh, stack):
        close(session)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--processes", type=int, default=5, help="new processes for first reads")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(run(args.items, args.rounds, args.processes, Path(folder)))


if __name__ == "__main__":
    main()
