"""The full production stack vs a bare SQLiteSession on a 10k-item history.

    python benchmarks/bench_overhead.py                 # 10k real items, 21 rounds
    python benchmarks/bench_overhead.py --items 2000 --rounds 5

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
``add_items`` of one agent turn through each. "cold" is a stack built afresh (a new
process: empty token caches, no read hints) reading once.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from _shared import BATCH, close, long_history, medians_ms, production_recipe, renamed, turns
from agents.memory import Session, SQLiteSession

from memstack.backends import open_backend


async def fill(session: Session, items: list[dict[str, object]]) -> float:
    start = time.perf_counter()
    for i in range(0, len(items), BATCH):
        await session.add_items(items[i : i + BATCH])  # type: ignore[arg-type]
    return time.perf_counter() - start


async def run(count: int, rounds: int, folder: Path) -> None:
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
    cold = (time.perf_counter() - start) * 1e3
    await stack.get_items()  # warm: token caches filled, read hints learnt
    n = len(view)
    reads = await medians_ms(
        {
            "stack get_items()": stack.get_items,
            "bare get_items()": bare.get_items,
            f"bare get_items(limit={n})": lambda: bare.get_items(limit=n),
        },
        rounds,
    )
    view_ms = reads["stack get_items()"]
    print(f"reads, medians of {rounds} interleaved rounds (stack view: {n} items)\n")
    header = f"{'read':<30}{'ms':>9}{'stack ÷ this':>14}{'items':>8}"
    print(header)
    print("-" * len(header))
    print(f"{'stack get_items(), cold':<30}{cold:>9.2f}{'':>14}{n:>8}")
    for name, ms in reads.items():
        returned = n if "limit" in name or name.startswith("stack") else len(history)
        print(f"{name:<30}{ms:>9.2f}{view_ms / ms:>14.2f}{returned:>8}")

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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(run(args.items, args.rounds, Path(folder)))


if __name__ == "__main__":
    main()
