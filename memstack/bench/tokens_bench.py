"""``memstack bench tokens``: what each strategy costs on real transcripts, side by side.

$ memstack bench tokens --quick            # a sample, well under a minute
$ memstack bench tokens --out bench-results
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memstack.bench.pricing import PRICES, load_prices
from memstack.bench.replay import replay
from memstack.bench.report import summary_rows, table, write_outputs
from memstack.bench.strategies import NAMED_BASELINES, StrategySpec, recipe_strategy
from memstack.bench.transcripts import Conversation, default_transcripts, load_conversations
from memstack.errors import ConfigurationError
from memstack.progress import progress_bar

__all__ = ["memstack_strategies", "run_tokens_bench"]

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
QUICK_PER_FILE = 12


def memstack_strategies() -> list[StrategySpec]:
    """memstack stacks from the shipped recipes, only their view-shaping layers."""
    specs = []
    for name, path, overrides in [
        ("memstack window (tokens)", "customer-support.toml", {}),
        ("memstack window + hysteresis", "customer-support.toml", {"hysteresis": True}),
        ("memstack masking-first (coding)", "coding-agent.toml", {}),
        ("memstack production blueprint", "production.toml", {}),
    ]:
        file = RECIPES / path
        if file.exists():
            specs.append(_view_layers(name, file, overrides))
    return specs


def _view_layers(name: str, path: Path, overrides: dict[str, Any]) -> StrategySpec:
    import tomllib

    data = tomllib.loads(path.read_text(encoding="utf-8"))
    # Storage-side layers (TTL, encryption) change what is stored, not what is sent;
    # the benchmark keeps the layers that shape the model's input.
    layers = [
        dict(layer)
        for layer in data.get("layers", [])
        if layer.get("layer") in ("compaction", "window")
    ]
    if overrides.pop("hysteresis", False):
        for layer in layers:
            if layer["layer"] == "window":
                layer.setdefault("low_watermark", 0.6)
    return recipe_strategy(name, {"backend": {"url": "memory://"}, "layers": layers})


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
) -> list[dict[str, Any]]:
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
    strategies = [NAMED_BASELINES[name]() for name in baselines] + memstack_strategies()
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
    print(table(rows))
    meta = {
        "model": model,
        "price": vars(table_prices[model]),
        "files": [str(p) for p in paths],
        "conversations": len(conversations),
        "quick": quick,
        "seconds": round(time.perf_counter() - started, 1),
    }
    written = write_outputs(results, rows, out, meta=meta)
    print(
        f"\n{len(conversations)} conversations, {meta['seconds']} s; wrote "
        + ", ".join(str(p) for p in written)
    )
    return rows
