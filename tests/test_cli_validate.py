"""``memstack validate`` checks a recipe's structure in CI, where no production secret is."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from memstack.crypto import generate_key

from .forked import run_memstack

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
SECRETS = ("SUPPORT_KEY", "CHAT_KEY_CURRENT", "PII_KEY_CURRENT", "PII_KEY_PREVIOUS")


def validate(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in (*SECRETS, "OPENAI_API_KEY")}
    # "should not hang": generous on a loaded machine
    return run_memstack("validate", *args, env={**clean, **env}, timeout=600)


@pytest.mark.parametrize("recipe", sorted(RECIPES.glob("*.toml")), ids=lambda p: p.stem)
def test_every_shipped_recipe_validates_without_its_secrets(recipe: Path):
    result = validate(str(recipe))
    assert result.returncode == 0, result.stderr
    assert f"ok: {recipe}" in result.stdout
    text = "\n".join(line.split("#", 1)[0] for line in recipe.read_text().splitlines())
    if "env =" in text or "provider =" in text:  # a secret reference outside comments
        assert "secrets checked for form only, not read (--resolve reads them):" in result.stdout


def test_resolve_reads_the_secrets():
    production = str(RECIPES / "production.toml")
    missing = validate(production, "--resolve")
    assert missing.returncode == 2
    assert "CHAT_KEY_CURRENT" in missing.stderr
    present = validate(
        production, "--resolve", CHAT_KEY_CURRENT=generate_key(), OPENAI_API_KEY="sk-test"
    )
    assert present.returncode == 0, present.stderr
    assert "secrets checked" not in present.stdout


def test_a_structural_error_still_fails_without_secrets(tmp_path: Path):
    path = tmp_path / "bad.toml"
    path.write_text(
        "[backend]\nurl='sqlite://'\n[[layers]]\nlayer='encrypted'\n"
        "key={ env = 'NOT_SET_ANYWHERE' }\ncompress_min_bytes=-5\n"
    )
    result = validate(str(path))
    assert result.returncode == 2
    assert "compress_min_bytes" in result.stderr


def test_resolve_refuses_a_scheme_no_backend_loads(tmp_path: Path):
    path = tmp_path / "foo.toml"
    path.write_text("[backend]\nurl = 'foo://x'\n")
    formed = validate(str(path))
    assert formed.returncode == 0  # the form only: a dialect may be a plugin not installed here
    # ... but "ok" alone would pass a typo to production: it is said, as a warning
    assert "warning: [backend]: no backend loads foo:// URLs" in formed.stderr
    assert "--resolve" in formed.stderr
    result = validate(str(path), "--resolve")
    assert result.returncode == 2, result
    error = result.stderr.strip()
    assert error.startswith("memstack: error: ") and "\n" not in error
    assert "no backend loads foo:// URLs" in error
    assert "known: sqlite, aiosqlite, redis, rediss, unix, postgresql" in error


def test_resolve_connects_nowhere(tmp_path: Path):
    for url in (
        f"sqlite:///{tmp_path / 'never.db'}",
        "postgresql://postgres@127.0.0.1:1/test",  # nothing listens on port 1
        "redis://127.0.0.1:1/0",
    ):
        path = tmp_path / "store.toml"
        path.write_text(f"[backend]\nurl = '{url}'\n")
        result = validate(str(path), "--resolve")
        assert result.returncode == 0, result.stderr
    assert not (tmp_path / "never.db").exists()


@pytest.mark.parametrize(
    ("layer", "cls", "missing"),
    [("ttl", "TTLSession", "ttl"), ("compaction", "CompactionSession", "strategy")],
)
def test_a_missing_required_option_is_a_usage_error(
    tmp_path: Path, layer: str, cls: str, missing: str
):
    store = tmp_path / "x.db"
    path = tmp_path / "bad.toml"
    path.write_text(f"[backend]\nurl = 'sqlite:///{store}'\n[[layers]]\nlayer = '{layer}'\n")
    result = validate(str(path))
    assert result.returncode == 2, result
    error = result.stderr.strip()
    assert error.startswith(f"memstack: error: {path}: layers[0] ({layer}): {cls}: ")
    assert "\n" not in error and "TypeError" not in error
    assert f"missing required option(s) {missing}; allowed: " in error
    assert not store.exists()
