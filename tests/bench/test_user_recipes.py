"""``memstack bench tokens FILES --recipe A.toml``: the user's own stacks against the baselines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memstack.bench.tokens_bench import user_recipe_strategies
from memstack.errors import ConfigurationError

from ..conftest import shared_data
from ..forked import run_memstack

RECIPE = """
[backend]
url = "sqlite:///mine.db"

[[layers]]
layer = "ttl"
ttl = "30d"

[[layers]]
layer = "compaction"
keep_last_turns = 1
strategy = { mask = { keep_last_turns = 1, min_chars = 100 } }

[[layers]]
layer = "window"
max_tokens = 3000
"""


def test_rows_name_the_file_the_layers_that_ran_and_those_left_out(tmp_path: Path) -> None:
    recipe = tmp_path / "mine.toml"
    recipe.write_text(RECIPE, encoding="utf-8")
    [spec] = user_recipe_strategies([recipe])
    assert spec.name == "mine.toml: compaction + window (not replayed: ttl)"
    assert spec.kind == "memstack"


def test_a_summary_written_as_one_table_gets_the_offline_stand_in(tmp_path: Path) -> None:
    recipe = tmp_path / "one.toml"
    recipe.write_text(
        RECIPE.replace(
            "strategy = { mask = { keep_last_turns = 1, min_chars = 100 } }",
            "trigger = { tokens = 3000, target = 1000 }\n"
            "strategy = { summarize = { max_tokens = 500, summarizer = { openai = "
            '{ model = "gpt-4.1-mini", api_key = { env = "NOT_SET_24" } } } } }',
        ),
        encoding="utf-8",
    )
    [spec] = user_recipe_strategies([recipe])
    assert spec.name.endswith("[extractive stand-in summaries]")


def test_a_bad_recipe_fails_before_any_replay(tmp_path: Path) -> None:
    recipe = tmp_path / "bad.toml"
    recipe.write_text(RECIPE.replace("max_tokens = 3000", "max_tokens = -1"), encoding="utf-8")
    with pytest.raises(ConfigurationError, match="max_tokens"):
        user_recipe_strategies([recipe])
    with pytest.raises(ConfigurationError, match="no such recipe"):
        user_recipe_strategies([tmp_path / "missing.toml"])


def test_the_cli_replays_the_users_recipes_against_the_baselines(tmp_path: Path) -> None:
    recipe = tmp_path / "mine.toml"
    recipe.write_text(RECIPE, encoding="utf-8")
    lines = shared_data("airline_tau.jsonl").read_text(encoding="utf-8").splitlines()[:2]
    transcript = tmp_path / "two.jsonl"
    transcript.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    result = run_memstack(
        "bench", "tokens", str(transcript), "--recipe", str(recipe), "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    rows = {row["strategy"]: row for row in summary["strategies"]}
    ours = [name for name, row in rows.items() if row["kind"] == "memstack"]
    assert ours == ["mine.toml: compaction + window (not replayed: ttl)"]  # no shipped recipe
    assert "full history" in rows and summary["meta"]["recipes"] == [str(recipe)]
    for row in rows.values():
        assert 0.0 <= row["needed_context_recall_in_context"] <= row["needed_context_recall"]
    assert rows["full history"]["history_cost_vs_full"] == pytest.approx(1.0)
