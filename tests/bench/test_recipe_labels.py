"""A token-benchmark row named after a recipe says which of its layers ran."""

from __future__ import annotations

import tomllib
from pathlib import Path

from memstack.bench.tokens_bench import memstack_strategies

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def test_recipe_rows_name_the_layers_that_ran_and_those_left_out():
    names = [spec.name for spec in memstack_strategies(RECIPES)]
    production = next(n for n in names if n.startswith("memstack production.toml"))
    support = next(n for n in names if n.startswith("memstack customer-support.toml"))
    coding = next(n for n in names if n.startswith("memstack coding-agent.toml"))
    assert "[compaction + window; without ttl, encrypted]" in production
    assert "[compaction + window; without ttl, encrypted]" in support
    assert "[compaction + window]" in coding and "without" not in coding


def test_every_layer_a_recipe_row_leaves_out_is_named():
    for spec in memstack_strategies(RECIPES):
        if not spec.name.startswith("memstack ") or ".toml" not in spec.name:
            continue
        recipe = spec.name.split()[1]
        layers = [
            layer["layer"] for layer in tomllib.loads((RECIPES / recipe).read_text())["layers"]
        ]
        label = spec.name.split("[", 1)[1]
        assert all(layer in label for layer in layers), (spec.name, layers)
