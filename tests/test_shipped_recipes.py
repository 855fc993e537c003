"""Every recipe in recipes/ loads, builds, and passes the contract suite on its real backend."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import pytest

from memstack.crypto import generate_key
from memstack.layers.memory import MemorySession
from memstack.recipes import Recipe, load_recipe
from memstack.testing import CONTRACT_CHECKS
from memstack.testing.conversation import run_conversation

from .conftest import POSTGRES_URL, REDIS_URL, require_service

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
SHIPPED = sorted(RECIPES.glob("*.toml"))

# The contract writes up to 300 items (one of 100 KB) and expects to read them all back,
# which a window smaller than that rightly refuses: such windows get a budget that holds it.
CONTRACT_OVERRIDES: dict[str, dict[str, Any]] = {
    "strict-pii": {"window": {"max_turns": 1000}},
    "ephemeral-redis": {"window": {"max_items": 1000}},
    "customer-support": {
        "window": {"max_tokens": 200_000},
        "compaction": {"trigger": {"tokens": 10_000_000, "target": 5_000_000}},
    },
    "dev-sqlite": {"window": {"max_tokens": 200_000}},
    "coding-agent": {"compaction": {"trigger": {"tokens": 10_000_000, "target": 5_000_000}}},
    "personal-assistant": {"window": {"max_tokens": 200_000}},
}


@pytest.fixture(autouse=True)
def secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    names = ("SUPPORT_KEY", "CHAT_KEY_CURRENT", "PII_KEY_CURRENT", "PII_KEY_PREVIOUS")
    for name in (*names, "PII_AUDIT_KEY", "ASSISTANT_KEY"):
        monkeypatch.setenv(name, generate_key())
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-used-the-trigger-never-fires-in-these-tests")


def test_every_recipe_is_tested() -> None:
    assert {p.stem for p in SHIPPED} == {
        "dev-sqlite",
        "production",
        "customer-support",
        "coding-agent",
        "strict-pii",
        "ephemeral-redis",
        "personal-assistant",
    }


def test_production_recipe_is_the_blueprint() -> None:
    recipe = load_recipe(RECIPES / "production.toml")
    assert recipe.url.startswith("postgresql")
    assert [spec.layer for spec in recipe.layers] == ["ttl", "encrypted", "compaction", "window"]


def _test_url(recipe_url: str, tmp_path: Path) -> str:
    if recipe_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'recipe.db'}"
    if recipe_url.startswith("postgresql"):
        require_service("PostgreSQL", POSTGRES_URL)
        return POSTGRES_URL
    if recipe_url.startswith("redis"):
        require_service("Redis", REDIS_URL)
        return REDIS_URL
    raise AssertionError(f"no test server for {recipe_url}")


def _test_memory(recipe: Recipe, tmp_path: Path) -> Recipe:
    """The recipe with its [memory] store (if any) in a test file."""
    if not recipe.memory:
        return recipe
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    return dataclasses.replace(recipe, memory={**recipe.memory, "url": url})


def _of_a_user(recipe: Recipe, thread: str) -> str:
    """A session id naming a user: a recipe with memory recalls for the user of the id."""
    return f"user-1:{thread}" if recipe.memory else thread


async def _dispose(session: Any) -> None:
    for layer in session:
        if isinstance(layer, MemorySession):
            await layer.store.close()
    backend = list(session)[-1]
    engine = getattr(backend, "engine", None)
    if engine is not None:
        await engine.dispose()
    close = getattr(backend, "close", None)
    if close is not None:
        result = close()
        if hasattr(result, "__await__"):
            await result


@pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda check: check.__name__)
@pytest.mark.parametrize("path", SHIPPED, ids=lambda path: path.stem)
async def test_recipe_contract(path: Path, check: Any, tmp_path: Path) -> None:
    base = load_recipe(path)
    overrides = CONTRACT_OVERRIDES.get(path.stem, {})
    recipe = load_recipe(path, url=_test_url(base.url, tmp_path), **overrides)
    recipe = _test_memory(recipe, tmp_path)
    opened: dict[str, Any] = {}

    def factory(session_id: str) -> Any:
        opened[session_id] = recipe.build(_of_a_user(recipe, session_id))
        return opened[session_id]

    try:
        await check(factory)
    finally:
        for session in opened.values():
            await _dispose(session)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda path: path.stem)
def test_recipe_under_the_runner(path: Path, tmp_path: Path) -> None:
    recipe = load_recipe(path, url=_test_url(load_recipe(path).url, tmp_path))
    recipe = _test_memory(recipe, tmp_path)
    made: list[Any] = []

    def make() -> Any:
        made.append(recipe.build(_of_a_user(recipe, f"runner-{uuid.uuid4().hex}")))
        return made[-1]

    async def cleanup() -> None:
        for session in made:
            await _dispose(session)

    assert len(run_conversation(make, cleanup=cleanup)) == 8
