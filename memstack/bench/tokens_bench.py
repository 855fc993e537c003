"""``memstack bench tokens``: what each strategy costs on real transcripts, side by side.

$ memstack bench tokens --quick            # a sample, well under a minute
$ memstack bench tokens --out bench-results
$ memstack bench tokens my-runs.jsonl --recipe my-stack.toml --recipe other.toml
"""

from __future__ import annotations

import copy
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memstack.bench.checkout import find_checkout
from memstack.bench.pricing import PRICES, load_prices
from memstack.bench.replay import replay
from memstack.bench.report import sources, summary_rows, table, write_outputs
from memstack.bench.strategies import NAMED_BASELINES, StrategySpec, recipe_strategy
from memstack.bench.transcripts import Conversation, default_transcripts, load_conversations
from memstack.errors import ConfigurationError
from memstack.progress import progress_bar

__all__ = ["memstack_strategies", "run_tokens_bench", "user_recipe_strategies"]

QUICK_PER_FILE = 12


EXTRACTIVE: dict[str, Any] = {"extractive": {}}
# The layers of a recipe that shape what is sent; the others are left out of the replay.
VIEW_LAYERS = ("compaction", "window")
# The shipped recipes' summariser: OPENAI_API_KEY, and OPENAI_BASE_URL when set.
MODEL_SUMMARIZER: dict[str, Any] = {
    "openai": {"model": "gpt-4.1-mini", "api_key": {"env": "OPENAI_API_KEY"}}
}
# Not a shipped recipe: a small budget, so summaries happen on these transcripts too.
SMALL_BUDGET_SUMMARY: list[dict[str, Any]] = [
    {
        "layer": "compaction",
        "keep_last_turns": 1,
        "trigger": {"tokens": 8000, "target": 4000},
        "strategy": [
            {"mask": {"keep_last_turns": 1, "keep_last_outputs": 4, "min_chars": 300}},
            {"summarize": {"max_tokens": 800, "summarizer": MODEL_SUMMARIZER}},
        ],
    }
]


def memstack_strategies(
    recipes: Path | None, *, real_summaries: bool = False
) -> list[StrategySpec]:
    """memstack stacks from the shipped recipes (their view-shaping layers), and one more.

    ``recipes`` is a checkout's ``recipes/`` folder; without one only the extra stack runs.
    Summaries come from the deterministic extractive summariser, and the strategy name
    says so, unless ``real_summaries`` (then the recipe's model is called: it costs money).
    """
    import tomllib

    specs = []
    for name, path in [
        ("memstack customer-support.toml", "customer-support.toml"),
        ("memstack coding-agent.toml", "coding-agent.toml"),
        ("memstack production.toml", "production.toml"),
    ]:
        if recipes is None:
            break
        file = recipes / path
        # Storage-side layers (TTL, encryption) change what is stored, not what is sent.
        every = tomllib.loads(file.read_text(encoding="utf-8")).get("layers", [])
        layers = [dict(layer) for layer in every if layer.get("layer") in VIEW_LAYERS]
        label = f"{name} {ran(every, layers)}"
        specs.append(_stack(label, layers, real_summaries=real_summaries))
    small = copy.deepcopy(SMALL_BUDGET_SUMMARY)
    specs.append(
        _stack("memstack mask + summary, 8k trigger", small, real_summaries=real_summaries)
    )
    return specs


def ran(every: list[dict[str, Any]], kept: list[dict[str, Any]]) -> str:
    """What a recipe row ran, for its label: ``[compaction + window; without ttl, encrypted]``.

    A row named after a recipe must not pass for the whole recipe when only the layers
    that shape what is sent were replayed.
    """
    names = " + ".join(str(layer["layer"]) for layer in kept)
    left_out = [str(layer.get("layer")) for layer in every if layer not in kept]
    return f"[{names}; without {', '.join(left_out)}]" if left_out else f"[{names}]"


def _stack(name: str, layers: list[dict[str, Any]], *, real_summaries: bool) -> StrategySpec:
    """A stack of ``layers``; model-written summaries become extractive ones unless real."""
    stand_in = False
    for layer in layers:
        if layer["layer"] == "compaction" and real_summaries:
            layer["on_error"] = "raise"  # a failing endpoint fails the run, not the figures
        steps = layer.get("strategy", []) if layer["layer"] == "compaction" else []
        if isinstance(steps, dict):  # one strategy written as a table, not a list
            steps = layer["strategy"] = [steps]
        for index, step in enumerate(steps):
            if "summarize" not in step or _is_extractive(step["summarize"]["summarizer"]):
                continue
            if not real_summaries:
                steps[index] = {"summarize": {**step["summarize"], "summarizer": EXTRACTIVE}}
                stand_in = True
    label = f"{name} [extractive stand-in summaries]" if stand_in else name
    return recipe_strategy(label, {"backend": {"url": "memory://"}, "layers": layers})


# Layers that change what the model is sent; the others (TTL, encryption, …) change what
# is stored and when it is deleted, which a replay of one sitting does not measure.
VIEW_LAYERS = ("compaction", "window")


def user_recipe_strategies(
    recipes: Sequence[Path], *, real_summaries: bool = False
) -> list[StrategySpec]:
    """A strategy per recipe file: its view-shaping layers over an in-memory store.

    The row's label names the file and the layers that ran, and those left out. The
    recipe is validated whole first (``memstack validate``'s rules), so a typo in a layer
    the replay leaves out still fails here rather than in production.
    """
    import tomllib

    from memstack.recipes import load_recipe

    specs = []
    for path in recipes:
        load_recipe(path, url="memory://")  # a missing file or a bad layer fails here
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        layers = [dict(layer) for layer in data.get("layers", [])]
        ran = [layer for layer in layers if layer.get("layer") in VIEW_LAYERS]
        left_out = [str(layer.get("layer")) for layer in layers if layer not in ran]
        label = f"{path.name}: " + (
            " + ".join(str(layer["layer"]) for layer in ran) or "no view-shaping layer"
        )
        if left_out:
            label += f" (not replayed: {', '.join(left_out)})"
        spec = _stack(label, ran, real_summaries=real_summaries)
        spec.make("validate")  # builds the stack: a bad option fails before any replay
        specs.append(spec)
    return specs


def _is_extractive(summarizer: object) -> bool:
    # Offline, deterministic summarisers run as they are: what is measured is what ships.
    offline = ("extractive", "quoting")
    return summarizer in offline or (
        isinstance(summarizer, dict) and list(summarizer) in [[o] for o in offline]
    )


def _sample(conversations: list[Conversation], count: int, seed: int = 7) -> list[Conversation]:
    rng = random.Random(seed)
    return sorted(rng.sample(conversations, min(count, len(conversations))), key=lambda c: c.id)


async def run_tokens_bench(
    files: Sequence[Path] | None = None,
    *,
    quick: bool = False,
    model: str = "gpt-4o",
    prices: Path | None = None,
    out: Path = Path("bench-results"),
    baselines: Sequence[str] = tuple(NAMED_BASELINES),
    real_summaries: bool = False,
    recipes: Sequence[Path] = (),
) -> list[dict[str, Any]]:
    """Replay ``files`` through the baselines and memstack stacks; print and write figures.

    With ``recipes`` (the user's own recipe files) those stacks run instead of the
    shipped recipes', against the same baselines.
    """
    from memstack.tokens import TokenCounter

    table_prices = load_prices(prices) if prices else PRICES
    if model not in table_prices:
        raise ConfigurationError(
            f"no price for model {model!r}; known: {', '.join(table_prices)} "
            "(add one with --prices)"
        )
    paths = list(files or default_transcripts())
    if not paths:
        raise ConfigurationError("no transcripts found; pass JSONL files")
    conversations: list[Conversation] = []
    for path in paths:
        loaded = list(load_conversations(path))
        conversations.extend(_sample(loaded, QUICK_PER_FILE) if quick else loaded)
    if real_summaries and not os.environ.get("OPENAI_API_KEY"):
        raise ConfigurationError(
            "--real-summaries needs OPENAI_API_KEY (and OPENAI_BASE_URL for another "
            "OpenAI-compatible endpoint)"
        )
    checkout = None if recipes else find_checkout()
    if checkout is None and not recipes:
        print(
            "note: the shipped recipes' stacks are left out: they are read from recipes/ in "
            "a checkout of the memstack repository; run inside one to include them",
            file=sys.stderr,
        )
    ours = (
        user_recipe_strategies(recipes, real_summaries=real_summaries)
        if recipes
        else memstack_strategies(
            checkout / "recipes" if checkout else None, real_summaries=real_summaries
        )
    )
    strategies = [NAMED_BASELINES[name]() for name in baselines] + ours
    counter = TokenCounter(model)

    bar = progress_bar(len(conversations), "replaying", unit="conv")
    started = time.perf_counter()
    results = await replay(
        conversations,
        strategies,
        counter,
        table_prices[model],
        progress=bar.update if bar is not None else None,
    )
    if bar is not None:
        bar.close()
    rows = summary_rows(results)
    by_source = {s: summary_rows([r.only(s) for r in results]) for s in sources(results)}
    for source, source_rows in by_source.items():
        print(f"\n{source}\n{table(source_rows)}")
    print(f"\nall sets\n{table(rows)}")
    meta = {
        "model": model,
        "price": vars(table_prices[model]),
        "files": [str(p) for p in paths],
        "conversations": len(conversations),
        "quick": quick,
        "summaries": "model" if real_summaries else "extractive",
        "recipes": [str(p) for p in recipes],
        "seconds": round(time.perf_counter() - started, 1),
    }
    written = write_outputs(results, rows, out, meta=meta, by_source=by_source)
    print(
        f"\n{len(conversations)} conversations, {meta['seconds']} s; wrote "
        + ", ".join(str(p) for p in written)
    )
    return rows
