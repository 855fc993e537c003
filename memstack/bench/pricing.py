"""Prices per model and the prompt-cache rule, so benchmark costs match real bills.

    >>> from memstack.bench.pricing import cached_tokens
    >>> cached_tokens(1000), cached_tokens(1024), cached_tokens(1300)
    (0, 1024, 1280)

OpenAI caches a prompt prefix from 1,024 tokens on, in 128-token steps; a call pays the
cached rate for the prefix it shares with an earlier call and the full rate for the rest.
Prices are USD per million tokens (list prices as of 2026-11; edit with ``--prices``).
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

from memstack.errors import ConfigurationError

__all__ = ["PRICES", "Price", "cached_tokens", "load_prices"]

CACHE_MINIMUM = 1024
CACHE_STEP = 128


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    cached_input: float
    output: float

    def cost(self, fresh: int, cached: int, output: int) -> float:
        return (fresh * self.input + cached * self.cached_input + output * self.output) / 1e6


PRICES: dict[str, Price] = {
    "gpt-4o": Price(2.50, 1.25, 10.00),
    "gpt-4o-mini": Price(0.15, 0.075, 0.60),
    "gpt-4.1": Price(2.00, 0.50, 8.00),
    "gpt-4.1-mini": Price(0.40, 0.10, 1.60),
    "gpt-5": Price(1.25, 0.125, 10.00),
    "gpt-5-mini": Price(0.25, 0.025, 2.00),
}


def cached_tokens(shared_prefix: int) -> int:
    """Tokens billed at the cached rate for a prefix of ``shared_prefix`` tokens."""
    if shared_prefix < CACHE_MINIMUM:
        return 0
    return CACHE_MINIMUM + (shared_prefix - CACHE_MINIMUM) // CACHE_STEP * CACHE_STEP


def load_prices(path: Path) -> dict[str, Price]:
    """The default table updated from a TOML or JSON file ``{model = {input=…, …}}``."""
    text = path.read_text(encoding="utf-8")
    try:
        raw = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        updated = {name: Price(**values) for name, values in raw.items()}
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(
            f"{path}: prices must map model -> {{input, cached_input, output}}: {exc}"
        ) from exc
    return {**PRICES, **updated}
