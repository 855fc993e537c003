"""The production stack's read at 100,000 vs 100 stored items, and where its time goes.

    python benchmarks/bench_scale.py                    # 100k items, 21 rounds (~2-3 min)
    python benchmarks/bench_scale.py --items 20000 --rounds 7

Two SQLite files hold the same newest items of one long real history (see
``_shared.long_history``), written through the production stack (recipes/
production.toml, offline extractive summaries) in batches of ``--batch`` items, so the
big file holds TTL records, envelopes and the compaction records the trigger wrote.
Reported, medians of interleaved rounds on a warm stack (a long-running server): the
stack's ``get_items()`` on each file and their ratio (target <= 1.3), next to a bare
``get_items(limit=len(view))`` on the same stored rows. The views differ in size (the
small file's is all of it; the big one's is what the compaction trigger left uncovered,
which depends on ``--batch``), so the time per view item is shown too.

Then the same read on stacks with a probe under each layer: the time spent in each
layer prefix as the stack calls it (store; store+ttl; +encrypted; +compaction; +window),
how many calls and rows crossed that boundary, and each prefix's 100k/100 ratio; a
layer's own time is its prefix minus the one below.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _shared import close, long_history, medians_ms, production_recipe
from agents.memory import Session

from memstack.backends import open_backend
from memstack.layers import PassthroughSession
from memstack.recipes import Recipe

SMALL = 100
TARGET = 1.3


class Probe(PassthroughSession):
    """Times the reads that cross it; shares the store's capabilities, so changes nothing."""

    def __init__(self, inner: Session) -> None:
        super().__init__(inner)
        self.seconds = 0.0
        self.calls = self.rows = 0

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> Any:
        start = time.perf_counter()
        items = await self.inner.get_items(limit)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        self.rows += len(items)
        return items


def probed(recipe: Recipe, store: Session) -> tuple[Session, list[Probe]]:
    """The recipe's layers over ``store`` with a probe under each and one on top."""
    session, probes = store, []
    for spec in recipe.layers:
        probes.append(Probe(session))
        session = dataclasses.replace(recipe, layers=(spec,)).stack_over(probes[-1])
    probes.append(Probe(session))
    return probes[-1], probes


async def fill(recipe: Recipe, path: Path, items: list[dict[str, Any]], batch: int) -> None:
    stack = recipe.stack_over(open_backend(f"sqlite:///{path}", "bench"))
    start = time.perf_counter()
    for i in range(0, len(items), batch):
        await stack.add_items(items[i : i + batch])  # type: ignore[arg-type]
        done = min(i + batch, len(items))
        if len(items) > batch and (done % 10_000 < batch or done == len(items)):
            print(f"  {path.name}: {done:>7} items, {time.perf_counter() - start:5.0f} s",
                  file=sys.stderr)  # fmt: skip
    close(stack)


async def run(count: int, rounds: int, batch: int, folder: Path) -> None:
    history = long_history(count)
    recipe = production_recipe()
    sizes = (SMALL, count)
    paths = {size: folder / f"stack-{size}.db" for size in sizes}
    print(f"writing {count} + {SMALL} items through the stack in batches of {batch} …")
    for size in sizes:
        await fill(recipe, paths[size], history[-size:], batch)  # both end with the same items
    del history  # a server does not hold the history in memory; nor should the timings
    stores = {size: open_backend(f"sqlite:///{paths[size]}", "bench") for size in sizes}
    stacks = {size: recipe.stack_over(stores[size]) for size in sizes}
    stored = {size: len(await stores[size].get_items()) for size in sizes}
    views = {size: len(await stacks[size].get_items()) for size in sizes}  # warm
    actions: dict[str, Callable[[], Awaitable[Any]]] = {}
    for size in sizes:
        actions[f"stack {size}"] = stacks[size].get_items
        actions[f"bare {size}"] = functools.partial(stores[size].get_items, limit=views[size])
    ms = await medians_ms(actions, rounds)

    print(f"\nget_items(), medians of {rounds} interleaved rounds (ms)\n")
    header = (
        f"{'stored items':>12}{'rows':>9}{'view':>6}{'stack':>9}{'µs/view item':>14}"
        f"{'bare(limit=view)':>18}"
    )
    print(header)
    print("-" * len(header))
    for size in sizes:
        print(
            f"{size:>12}{stored[size]:>9}{views[size]:>6}{ms[f'stack {size}']:>9.2f}"
            f"{ms[f'stack {size}'] * 1e3 / views[size]:>14.1f}{ms[f'bare {size}']:>18.2f}"
        )
    ratio = ms[f"stack {count}"] / ms[f"stack {SMALL}"]
    verdict = "met" if ratio <= TARGET else "MISSED"
    per_item = (ms[f"stack {count}"] / views[count]) / (ms[f"stack {SMALL}"] / views[SMALL])
    print(
        f"\nstack {count}/{SMALL} = {ratio:.2f} (target <= {TARGET}: {verdict}); "
        f"per view item {per_item:.2f} (the views differ in size: see the docstring)"
    )
    await breakdown(recipe, stores, rounds)
    for store in stores.values():
        close(store)


async def breakdown(recipe: Recipe, stores: dict[int, Session], rounds: int) -> None:
    chains = {size: probed(recipe, store) for size, store in stores.items()}
    sizes = list(chains)
    per_round: dict[int, list[list[tuple[float, int, int]]]] = {size: [] for size in sizes}
    for size in sizes:
        await chains[size][0].get_items()  # warm, as above
    for round_ in range(rounds):
        for size in sizes[round_ % 2 :] + sizes[: round_ % 2]:
            top, probes = chains[size]
            for probe in probes:
                probe.seconds, probe.calls, probe.rows = 0.0, 0, 0
            gc.collect()
            await top.get_items()
            per_round[size].append([(p.seconds, p.calls, p.rows) for p in probes])
    names = ["store", *("+" + str(spec.layer) for spec in recipe.layers)]
    print(f"\nper layer prefix, as the stack calls it: medians of {rounds} rounds\n")
    small, big = sizes
    header = (
        f"{'prefix':<14}{f'ms {small}':>10}{f'ms {big}':>10}{'ratio':>7}{'own ms':>8}"
        f"{'own ratio':>10}{'calls':>7}{f'rows {big}':>12}"
    )
    print(header)
    print("-" * len(header))
    below = {size: 0.0 for size in sizes}
    for level, name in enumerate(names):
        med = {
            size: [statistics.median(r[level][k] for r in per_round[size]) for k in range(3)]
            for size in sizes
        }
        inclusive = {size: med[size][0] * 1e3 for size in sizes}
        own = {size: inclusive[size] - below[size] for size in sizes}
        print(
            f"{name:<14}{inclusive[small]:>10.2f}{inclusive[big]:>10.2f}"
            f"{inclusive[big] / inclusive[small]:>7.2f}{own[big]:>8.2f}"
            f"{own[big] / own[small] if own[small] > 0 else float('nan'):>10.2f}"
            f"{med[big][1]:>7.0f}{med[big][2]:>12.0f}"
        )
        below = inclusive
    print(
        "\nms: time inside that prefix per top-level read (inclusive); own: the top layer's"
        f" share (prefix minus the one below) at {big}, and its {big}/{small} ratio; calls"
        f" and rows: get_items calls into that prefix and rows it returned, at {big}."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--batch", type=int, default=1000, help="items per add_items when filling")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(run(args.items, args.rounds, args.batch, Path(folder)))


if __name__ == "__main__":
    main()
