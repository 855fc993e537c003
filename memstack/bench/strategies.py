"""What each strategy sends the model: baselines and memstack stacks, one interface.

A strategy receives the conversation's items as they happen (``add``) and says, before
every model call, what that call's input history is (``view``). Baselines reproduce what
users do today; memstack strategies run real stacks (from the shipped recipes) over an
in-memory store, exactly as an agent would through the SDK's Runner.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agents.memory import Session

from memstack.history import split_turns
from memstack.testing.memory import InMemorySession

__all__ = [
    "NAMED_BASELINES",
    "Strategy",
    "StrategySpec",
    "full_history",
    "last_user_turns",
    "recipe_strategy",
    "sdk_item_limit",
    "sdk_tool_output_trimmer",
]

Item = dict[str, Any]


class Strategy(Protocol):
    async def add(self, items: list[Item]) -> None: ...

    async def view(self) -> list[Item]: ...


@dataclass(frozen=True)
class StrategySpec:
    """A named way to build a fresh strategy for each conversation."""

    name: str
    make: Callable[[str], Strategy]
    kind: str  # "baseline" or "memstack"


class _ListStrategy:
    """Keeps the whole history; subclasses choose what of it the model sees."""

    def __init__(self) -> None:
        self.items: list[Item] = []

    async def add(self, items: list[Item]) -> None:
        self.items.extend(items)

    async def view(self) -> list[Item]:
        return self.select(self.items)

    def select(self, items: list[Item]) -> list[Item]:
        return list(items)


def full_history() -> StrategySpec:
    return StrategySpec("full history", lambda _: _ListStrategy(), "baseline")


class _SdkLimit(_ListStrategy):
    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def select(self, items: list[Item]) -> list[Item]:
        # What Runner does with SessionSettings(limit=N): the last N items, then its own
        # input-side repair drops outputs whose calls fell off (and calls without outputs).
        from agents.run_internal.items import drop_orphan_function_calls

        tail = items[-self.limit :]
        indexes = set(range(len(tail)))
        repaired = drop_orphan_function_calls(
            tail,  # type: ignore[arg-type]
            pruning_indexes=indexes,
            output_pruning_indexes=indexes,
        )
        return [dict(item) for item in repaired]


def sdk_item_limit(limit: int) -> StrategySpec:
    return StrategySpec(
        f"SDK limit={limit} (+orphan repair)", lambda _: _SdkLimit(limit), "baseline"
    )


class _LastTurns(_ListStrategy):
    def __init__(self, turns: int) -> None:
        super().__init__()
        self.turns = turns

    def select(self, items: list[Item]) -> list[Item]:
        spans = split_turns(items)
        start = spans[-self.turns].start if len(spans) > self.turns else 0
        return items[start:]


def last_user_turns(turns: int) -> StrategySpec:
    return StrategySpec(f"last {turns} user turns", lambda _: _LastTurns(turns), "baseline")


class _Trimmer(_ListStrategy):
    def __init__(self) -> None:
        super().__init__()
        from agents.extensions import ToolOutputTrimmer

        self.trimmer = ToolOutputTrimmer()

    def select(self, items: list[Item]) -> list[Item]:
        from agents.run_config import CallModelData, ModelInputData

        data = CallModelData(
            model_data=ModelInputData(input=copy.deepcopy(items), instructions=None),  # type: ignore[arg-type]
            agent=None,  # type: ignore[arg-type]
            context=None,
        )
        return [dict(item) for item in self.trimmer(data).input]


def sdk_tool_output_trimmer() -> StrategySpec:
    return StrategySpec("SDK ToolOutputTrimmer", lambda _: _Trimmer(), "baseline")


class _Stack:
    def __init__(self, session: Session) -> None:
        self.session = session

    async def add(self, items: list[Item]) -> None:
        if items:
            await self.session.add_items(items)  # type: ignore[arg-type]

    async def view(self) -> list[Item]:
        return [dict(item) for item in await self.session.get_items()]


def recipe_strategy(name: str, recipe: Path | Mapping[str, Any], **overrides: Any) -> StrategySpec:
    """A shipped recipe's layers over an in-memory store (the store does not change tokens)."""
    from memstack.recipes import load_recipe

    loaded = load_recipe(recipe, **overrides)

    def make(conversation_id: str) -> Strategy:
        return _Stack(loaded.stack_over(InMemorySession(conversation_id)))

    return StrategySpec(name, make, "memstack")


NAMED_BASELINES: dict[str, Callable[[], StrategySpec]] = {
    "full": full_history,
    "sdk-limit": lambda: sdk_item_limit(40),
    "last-turns": lambda: last_user_turns(3),
    "trimmer": sdk_tool_output_trimmer,
}
