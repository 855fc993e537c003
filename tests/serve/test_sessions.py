"""The example server's stacks: errors name the recipe file (found by a new-user trial)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstack import RecipeError
from memstack.serve.sessions import RecipeSessions


def test_a_bad_recipe_is_named_by_its_file(tmp_path: Path) -> None:
    recipe = tmp_path / "misspelt.toml"
    recipe.write_text(
        f'[backend]\nurl = "sqlite:///{tmp_path / "chat.db"}"\n'
        '[[layers]]\nlayer = "window"\nmax_tokns = 4000\n'
    )
    with pytest.raises(RecipeError, match=rf"^{recipe}: layers\[0\] \(window\)"):
        RecipeSessions(recipe)


def test_a_missing_secret_is_named_by_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SERVE_KEY", raising=False)
    recipe = tmp_path / "secret.toml"
    recipe.write_text(
        f'[backend]\nurl = "sqlite:///{tmp_path / "chat.db"}"\n'
        '[[layers]]\nlayer = "encrypted"\nkey = { env = "SERVE_KEY" }\n'
    )
    sessions = RecipeSessions(recipe)
    with pytest.raises(RecipeError, match=rf"^{recipe}: .*SERVE_KEY"):
        sessions.open("ana", "t1")
