"""The production stack, a long real history and timing helpers, shared by the benchmarks.

    from _shared import long_history, medians_ms, production_recipe
    recipe = production_recipe()          # recipes/production.toml, offline summaries
    stack = recipe.stack_over(open_backend("sqlite:////tmp/x.db", "user-1"))

Not a benchmark itself: the ``bench_*.py`` scripts beside it import it (Python puts the
script's folder on ``sys.path``). ``first_reads_in_new_processes`` times what "cold"
means in these benchmarks: a new Python process's first read. A new stack in a process
that already read is not cold: the process cache (``memstack.cache``: parsed rows, opened
envelopes, token counts, read sizes) and the tokenizer outlive every stack.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
import tomllib
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

# The scripts measure the checkout they are in, whatever the virtualenv has installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.memory import Session, SQLiteSession
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

import memstack.base
from memstack.base import iter_chain
from memstack.bench.transcripts import DATA_DIR
from memstack.crypto import generate_key
from memstack.recipes import Recipe, load_recipe

DATA = DATA_DIR
RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "production.toml"
BATCH = 8  # items per add_items: about one agent turn with a tool call or two

Item = dict[str, Any]


def offline_strategy() -> list[Any]:
    """The recipe's compaction strategy with its model summariser swapped for the extractive one.

    Read from the recipe, so the benchmark follows it when it changes.
    """
    layers = tomllib.loads(RECIPE.read_text(encoding="utf-8"))["layers"]
    (compaction,) = (layer for layer in layers if layer["layer"] == "compaction")
    strategy = []
    for entry in compaction["strategy"]:
        if "summarize" in entry:
            entry = {"summarize": {**entry["summarize"], "summarizer": "extractive"}}
        strategy.append(entry)
    return strategy


def production_recipe(url: str = "sqlite://:memory:") -> Recipe:
    """recipes/production.toml over ``url``, with a fresh key and offline summaries."""
    os.environ.setdefault("CHAT_KEY_CURRENT", generate_key())
    return load_recipe(RECIPE, url=url, compaction={"strategy": offline_strategy()})


def close(session: Session) -> None:
    """Close the SQLite store at the bottom of ``session``."""
    *_, store = iter_chain(session)
    assert isinstance(store, SQLiteSession)
    store.close()


def conversations(name: str) -> list[list[Item]]:
    with (DATA / f"{name}.jsonl").open() as lines:
        return [json.loads(line)["items"] for line in lines]


def long_history(count: int, names: Sequence[str] = ("airline_tau", "swe_coding")) -> list[Item]:
    """One long session: the named transcripts' conversations interleaved, end to end.

    System prompts are dropped (one session has one, in the agent's instructions) and
    call ids made unique per copy: source conversations reuse ids, and a reused id would
    pair a call with an output thousands of items later.
    """
    sources = [conversations(name) for name in names]
    items: list[Item] = []
    for copy in itertools.count():
        for number, pair in enumerate(itertools.zip_longest(*sources)):
            for conversation in pair:
                for item in conversation or []:
                    if item.get("role") == "system":
                        continue
                    if "call_id" in item:
                        item = {**item, "call_id": f"{item['call_id']}-{copy}-{number}"}
                    items.append(item)
            if len(items) >= count:
                return items[:count]
    raise AssertionError("unreachable")


def turns(items: list[Item]) -> Iterator[list[Item]]:
    """``items`` cut before each user message: one agent turn per batch."""
    turn: list[Item] = []
    for item in items:
        if item.get("role") == "user" and turn:
            yield turn
            turn = []
        turn.append(item)
    if turn:
        yield turn


def renamed(turn: list[Item], tag: str) -> list[Item]:
    """The same turn with call ids made unique by ``tag`` (for writing it again)."""
    return [{**i, "call_id": f"{i['call_id']}-{tag}"} if "call_id" in i else i for i in turn]


async def medians_ms(
    actions: Mapping[str, Callable[..., Awaitable[Any]]], rounds: int
) -> dict[str, float]:
    """Median milliseconds of each action; every round runs all of them, order rotated.

    Each action runs once untimed first. A garbage collection before each timed action:
    otherwise one action's garbage (a big read) is collected, and timed, during whichever
    action runs next.
    """
    times: dict[str, list[float]] = {name: [] for name in actions}
    names = list(actions)
    for action in actions.values():
        await action()  # warm the page cache, connections and the process cache
    for round_ in range(rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            gc.collect()
            start = time.perf_counter()
            await actions[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) * 1e3 for name, values in times.items()}


NEW_PROCESS = """
import asyncio, json, sys, time
sys.path[:0] = [{folder!r}, {root!r}]  # _shared, and the checkout's memstack
{setup}
async def main():
    session = build()
    start = time.perf_counter()
    items = await session.get_items({limit})
    print(json.dumps([(time.perf_counter() - start) * 1e3, len(items)]))
asyncio.run(main())
"""


def first_reads_in_new_processes(
    setup: str, samples: int, limit: int | None = None, *, expect: int | None = None
) -> list[float]:
    """Milliseconds of ``build().get_items(limit)``, each sample the first read of a new process.

    ``setup`` is Python source that imports what it needs and defines ``build()``, returning
    the session to read. Imports and ``build()`` are not timed; everything the read loads on
    first use (the tokenizer's vocabulary, lazy imports, the empty process cache) is. The
    environment is inherited (``CHAT_KEY_CURRENT``). ``expect``: the number of items the
    read must return (a table that shows it then shows what was read).
    """
    code = NEW_PROCESS.format(
        folder=str(Path(__file__).parent),
        root=str(Path(__file__).resolve().parents[1]),
        setup=setup,
        limit="" if limit is None else f"limit={limit}",
    )
    times = []
    for _ in range(samples):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the new process failed:\n{done.stderr}")
        ms, returned = json.loads(done.stdout.strip().splitlines()[-1])
        if expect is not None and returned != expect:
            raise RuntimeError(f"the new process read {returned} items, not {expect}")
        times.append(ms)
    return times


def timed_store_reads(stores: dict[str, Session]) -> dict[str, list[tuple[float, int]]]:
    """Time every read of these stores' rows by a stack read: (seconds, rows), by store.

    Wraps ``memstack.base._source_reader`` (the function that gives the read loop its
    store reader), so the loop reads the way it does unprobed; a store read directly (a
    bare ``get_items``) is not counted. Once per process. Private: if it moves, the
    benchmarks follow it.
    """
    names = {id(store): name for name, store in stores.items()}
    reads: dict[str, list[tuple[float, int]]] = {name: [] for name in stores}
    original = memstack.base._source_reader

    def reader(source: Session, wrapper: Any, layers: Any) -> Callable[[int], Awaitable[Any]]:
        newest = original(source, wrapper, layers)
        if id(source) not in names:
            return newest
        calls = reads[names[id(source)]]

        async def timed(n: int, **options: Any) -> Any:
            start = time.perf_counter()
            tail = await newest(n, **options)
            calls.append((time.perf_counter() - start, len(tail.items)))
            return tail

        return timed

    memstack.base._source_reader = reader
    return reads


async def reachable(engine: AsyncEngine) -> str | None:
    """None when ``engine`` answers within 5 s; else why not (the benchmark then skips)."""
    try:
        async with asyncio.timeout(5):
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
    except Exception as exc:  # any failure to connect means: skip
        return f"{type(exc).__name__}: {exc}"
    return None
