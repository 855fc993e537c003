"""The shipped coding-agent recipe on a real coding run: valid views, a prefix that holds."""

from __future__ import annotations

import itertools
import tomllib
from pathlib import Path
from typing import Any

from memstack.bench.strategies import recipe_strategy
from memstack.bench.transcripts import load_conversations, model_calls
from memstack.history import history_problems, is_user_message

from ..conftest import shared_data

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "coding-agent.toml"


def view_layers(**mask: Any) -> dict[str, Any]:
    layers = tomllib.loads(RECIPE.read_text(encoding="utf-8"))["layers"]
    layers[0]["strategy"][0]["mask"].update(mask)
    return {"backend": {"url": "memory://"}, "layers": layers}


async def prefix_changes(recipe: dict[str, Any]) -> tuple[int, int, list[list[Any]]]:
    """Calls whose view does not extend the previous one, calls, and every view."""
    conversation = next(load_conversations(shared_data("swe_coding.jsonl"), limit=1))
    history = conversation.history
    strategy = recipe_strategy("coding-agent", recipe).make(conversation.id)
    views: list[list[Any]] = []
    position = 0
    for call in model_calls(history):
        await strategy.add(history[position : call.start])
        views.append(await strategy.view())
        await strategy.add(history[call.start : call.stop])
        position = call.stop
    changes = sum(after[: len(before)] != before for before, after in itertools.pairwise(views))
    return changes, len(views), views


async def test_coding_agent_recipe_changes_the_prefix_rarely_and_keeps_the_task() -> None:
    changes, calls, views = await prefix_changes(view_layers())
    task = next(item for item in views[0] if is_user_message(item))
    assert all(not history_problems(view) for view in views)
    assert all(view[0] == task for view in views)  # the task leads every view, verbatim
    every_call, _, _ = await prefix_changes(view_layers(step=1))
    # masking in steps of about 6 changes the prompt prefix less often than at every call
    # (13 against 21 of 46 calls on this run; summaries change it in both)
    assert changes + 5 < every_call, (changes, every_call, calls)
