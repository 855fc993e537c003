"""The production stack's read over a big stored history vs a small one with as big a view.

    python benchmarks/bench_scale.py                    # 100k items, 21 rounds (~2-3 min)
    python benchmarks/bench_scale.py --items 20000 --rounds 7

A big SQLite file holds the newest ``--items`` items of one long real history (see
``_shared.long_history``), written through the production stack (recipes/
production.toml, offline extractive summaries) in batches of ``--batch`` items, so it
holds TTL records, envelopes and the compaction records the trigger wrote. Its view is
what the trigger left uncovered (its size depends on ``--batch``). A small file then
holds just enough of the same newest items for a view as big, written the same way:
the two reads return as many items, so their ratio says what the stored history costs
(target <= 1.3). A tail of the history can miss the big view's size by an item (an
output whose call is cut off is left out of a view); then the verdict is on the time per
view item, and says so.

Reported, medians of interleaved rounds on warm stacks (a long-running server): the
stack's ``get_items()`` on each file and their ratio, next to a bare
``get_items(limit=len(view))`` on the same stored rows.

Then where a read's time goes, probed: each layer's ``shape`` (its step of the one read
loop, ``memstack.pipeline``) is wrapped by a timer on the instance, and so is the
reading of the store's rows ("store"), so the read runs the path it runs unprobed;
"loop and copy" is the rest (the read loop, what the top leaves out, the caller's copy).
The probed total is printed next to the unprobed median, to show that the timers change
nothing. (A probe *layer* between the layers, as this script had before, makes each
layer read the one below as a caller would: 1.65 times slower, and not the stack's path.)
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _shared import close, long_history, medians_ms, production_recipe, timed_store_reads
from agents.memory import Session

from memstack.backends import open_backend
from memstack.base import SessionLayer, iter_chain
from memstack.recipes import Recipe

TARGET = 1.3


def timed_shapes(stack: Session) -> dict[str, list[float]]:
    """Wrap each layer's ``shape`` with a timer on the instance; seconds per call, by layer.

    The read loop calls ``layer.shape`` on each layer in turn, so an instance attribute
    takes the place of the method without changing which code runs.
    """
    spent: dict[str, list[float]] = {}
    for layer in iter_chain(stack):
        if not isinstance(layer, SessionLayer):
            continue
        name = layer.layer_name or type(layer).__name__
        spent[name] = []

        def timer(shape: Any, calls: list[float]) -> Callable[..., Awaitable[Any]]:
            async def timed(below: Any, wrapper: Any) -> Any:
                start = time.perf_counter()
                try:
                    return await shape(below, wrapper)
                finally:
                    calls.append(time.perf_counter() - start)

            return timed

        layer.shape = timer(layer.shape, spent[name])  # type: ignore[method-assign,assignment]
    return spent


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
    paths = {"big": folder / "stack-big.db"}
    print(f"writing {count} items through the stack in batches of {batch} …")
    await fill(recipe, paths["big"], history[-count:], batch)
    view = await view_size(recipe, paths["big"])
    # The small file: the fewest newest items whose view is as big (a view may leave an
    # output out when its call is not in it, so a few more items may be needed).
    small = view
    while True:
        paths["small"] = folder / f"stack-{small}.db"
        await fill(recipe, paths["small"], history[-small:], batch)
        if await view_size(recipe, paths["small"]) >= view or small >= count:
            break
        small += 1
    del history  # a server does not hold the history in memory; nor should the timings
    sizes = {"small": small, "big": count}
    stores = {name: open_backend(f"sqlite:///{paths[name]}", "bench") for name in sizes}
    stacks = {name: recipe.stack_over(stores[name]) for name in sizes}
    stored = {name: len(await stores[name].get_items()) for name in sizes}
    views = {name: len(await stacks[name].get_items()) for name in sizes}  # warm
    actions: dict[str, Callable[[], Awaitable[Any]]] = {}
    for name in sizes:
        actions[f"stack {name}"] = stacks[name].get_items
        actions[f"bare {name}"] = functools.partial(stores[name].get_items, limit=views[name])
    ms = await medians_ms(actions, rounds)

    print(f"\nget_items(), medians of {rounds} interleaved rounds (ms)\n")
    header = (
        f"{'stored items':>12}{'rows':>9}{'view':>6}{'stack':>9}{'µs/view item':>14}"
        f"{'bare(limit=view)':>18}"
    )
    print(header)
    print("-" * len(header))
    for name, size in sizes.items():
        print(
            f"{size:>12}{stored[name]:>9}{views[name]:>6}{ms[f'stack {name}']:>9.2f}"
            f"{ms[f'stack {name}'] * 1e3 / views[name]:>14.1f}{ms[f'bare {name}']:>18.2f}"
        )
    ratio = ms["stack big"] / ms["stack small"]
    per_item = (ms["stack big"] / views["big"]) / (ms["stack small"] / views["small"])
    # Equal views: the ratio of the reads. Otherwise (a tail of the history can miss the
    # big view's size by an item: an output whose call is cut off is left out), per item.
    judged, what = (
        (ratio, "reads") if views["big"] == views["small"] else (per_item, "per view item")
    )
    verdict = "met" if judged <= TARGET else "MISSED"
    print(
        f"\nstack {count}/{small} = {ratio:.2f} with views of {views['big']} and "
        f"{views['small']} items; per view item {per_item:.2f} "
        f"(target <= {TARGET}, {what}: {verdict})"
    )
    await breakdown(recipe, stores, sizes, ms, rounds)
    for store in stores.values():
        close(store)


async def view_size(recipe: Recipe, path: Path) -> int:
    store = open_backend(f"sqlite:///{path}", "bench")
    size = len(await recipe.stack_over(store).get_items())
    close(store)
    return size


async def breakdown(
    recipe: Recipe,
    stores: dict[str, Session],
    sizes: dict[str, int],
    unprobed: dict[str, float],
    rounds: int,
) -> None:
    stacks = {name: recipe.stack_over(store) for name, store in stores.items()}
    spent = {name: timed_shapes(stack) for name, stack in stacks.items()}
    store_reads = timed_store_reads(stores)
    totals: dict[str, list[float]] = {name: [] for name in stacks}
    per_round: dict[str, list[dict[str, float]]] = {name: [] for name in stacks}
    rows_read: dict[str, list[int]] = {name: [] for name in stacks}
    names = list(stacks)
    for name in names:
        await stacks[name].get_items()  # warm, as above
    for round_ in range(rounds):
        for name in names[round_ % 2 :] + names[: round_ % 2]:
            for calls in spent[name].values():
                calls.clear()
            store_reads[name].clear()
            gc.collect()
            start = time.perf_counter()
            await stacks[name].get_items()
            totals[name].append(time.perf_counter() - start)
            parts = {layer: sum(c) for layer, c in spent[name].items()}
            parts["store"] = sum(seconds for seconds, _ in store_reads[name])
            per_round[name].append(parts)
            rows_read[name].append(sum(rows for _, rows in store_reads[name]))
    small, big = names
    print(
        f"\nwhere a read's time goes, probed (a timer around each layer's shape on the "
        f"instance): medians of {rounds} rounds, ms\n"
    )
    header = f"{'part':<16}{f'{sizes[small]} items':>12}{f'{sizes[big]} items':>14}{'ratio':>7}"
    print(header)
    print("-" * len(header))
    layers = ["store", *list(spent[big])[::-1]]  # bottom first
    rest = {
        name: statistics.median(
            total - sum(parts.values())
            for total, parts in zip(totals[name], per_round[name], strict=True)
        )
        * 1e3
        for name in names
    }
    rows = []
    for layer in layers:
        cells = [statistics.median(r[layer] for r in per_round[name]) * 1e3 for name in names]
        rows.append((layer, cells[0], cells[1]))
    rows.append(("loop and copy", rest[small], rest[big]))
    probed = {name: statistics.median(totals[name]) * 1e3 for name in names}
    rows.append(("total, probed", probed[small], probed[big]))
    rows.append(("total, unprobed", unprobed[f"stack {small}"], unprobed[f"stack {big}"]))
    for part, at_small, at_big in rows:
        ratio = at_big / at_small if at_small > 0 else float("nan")
        print(f"{part:<16}{at_small:>12.2f}{at_big:>14.2f}{ratio:>7.2f}")
    rows_at = {name: statistics.median(rows_read[name]) for name in names}
    print(
        f"\nstore: reading the store's rows ({rows_at[small]:.0f} and {rows_at[big]:.0f} rows "
        "per read); a layer: its shape; loop and copy: the rest (the read loop, what the top "
        "leaves out, the caller's copy); totals, probed and unprobed: the same read with and "
        "without the timers (the unprobed one from the table above). Each row is its own median:"
        " the parts need not add up to the total."
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
