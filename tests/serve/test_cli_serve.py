"""`memstack serve`'s usage errors, before any server starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstack.cli import EXIT_USAGE, main

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.mark.parametrize(
    "argv",
    [["serve"], ["serve", "recipes/dev-sqlite.toml", "--bare", "postgresql://h/db"]],
    ids=["neither", "both"],
)
def test_a_recipe_or_bare_not_both(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == EXIT_USAGE
    assert "give a recipe file, or --bare URL" in capsys.readouterr().err


def test_bench_server_is_a_script_benchmark() -> None:
    from memstack.cli import SCRIPT_BENCHMARKS

    assert "server" in SCRIPT_BENCHMARKS


def test_a_recipe_that_cannot_build_fails_before_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ASSISTANT_KEY", raising=False)
    assert main(["serve", str(tmp_path / "missing.toml")]) == EXIT_USAGE
    assert "no such recipe file" in capsys.readouterr().err
    assert main(["serve", str(RECIPES / "personal-assistant.toml")]) == EXIT_USAGE
    assert "'ASSISTANT_KEY', which is not set" in capsys.readouterr().err
