"""The production stack and a long real history, shared by the stack benchmarks.

    from _production import long_history, medians_ms, production_recipe
    recipe = production_recipe()          # recipes/production.toml, offline summaries
    stack = recipe.stack_over(open_backend("sqlite:////tmp/x.db", "user-1"))

Not a benchmark itself: ``bench_overhead.py``, ``bench_scale.py`` and ``bench_load.py``
import it (Python puts the script's folder on ``sys.path``).
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import statistics
import time
import tomllib
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from agents.memory import Session, SQLiteSession

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
        await action()  # warm the page cache, connections and token caches
    for round_ in range(rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            gc.collect()
            start = time.perf_counter()
            await actions[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) * 1e3 for name, values in times.items()}
