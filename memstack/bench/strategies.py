"""What each strategy sends the model: baselines and memstack stacks, one interface.

A strategy receives the conversation's items as they happen (``add``) and says, before
every model call, what that call's input history is (``view``). Baselines reproduce what
users do today; memstack strategies run real stacks (from the shipped recipes) over an
in-memory store, exactly as an agent would through the SDK's Runner.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agents.memory import Session

from memstack.bench.transcripts import model_calls
from memstack.history import is_user_message, item_type, split_turns
from memstack.testing.memory import InMemorySession
from memstack.tokens import ItemCounter

__all__ = [
    "NAMED_BASELINES",
    "Strategy",
    "StrategySpec",
    "full_history",
    "jetbrains_observation_masking",
    "langchain_clear_tool_uses",
    "last_user_turns",
    "recipe_strategy",
    "sdk_item_limit",
    "sdk_responses_compaction_shape",
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


class _ObservationMasking(_ListStrategy):
    def __init__(self, turns: int) -> None:
        super().__init__()
        self.turns = turns

    def select(self, items: list[Item]) -> list[Item]:
        # An agent turn is one model response and the tool outputs that answer it; the
        # outputs of all but the last ``turns`` turns are replaced, every call anew.
        responses = model_calls(items)
        if len(responses) <= self.turns:
            return list(items)
        boundary = responses[-self.turns].start
        return [
            {**item, "output": _omitted_lines(item["output"])}
            if index < boundary and item_type(item) == "function_call_output"
            else item
            for index, item in enumerate(items)
        ]


def _omitted_lines(output: object) -> str:
    text = output if isinstance(output, str) else json.dumps(output)
    return f"Old environment output: ({len(text.splitlines())} lines omitted)"


def jetbrains_observation_masking(turns: int = 10) -> StrategySpec:
    """Observation masking as JetBrains ran it on SWE-bench ("The Complexity Trap", 2025)."""
    return StrategySpec(
        f"JetBrains observation masking (last {turns} turns)",
        lambda _: _ObservationMasking(turns),
        "baseline",
    )


class _ClearToolUses(_ListStrategy):
    def __init__(self, trigger: int, keep: int, counter: ItemCounter) -> None:
        super().__init__()
        self.trigger, self.keep, self.counter = trigger, keep, counter

    def select(self, items: list[Item]) -> list[Item]:
        # Applied to each model request, not stored: past the trigger, every tool result
        # but the last ``keep`` becomes the placeholder (clear_at_least=0, inputs kept).
        if sum(self.counter.count_item(item) for item in items) <= self.trigger:
            return list(items)
        outputs = [i for i, item in enumerate(items) if item_type(item) == "function_call_output"]
        cleared = set(outputs[: max(0, len(outputs) - self.keep)])
        return [
            {**item, "output": "[cleared]"} if index in cleared else item
            for index, item in enumerate(items)
        ]


def langchain_clear_tool_uses(trigger: int = 100_000, keep: int = 3) -> StrategySpec:
    """LangChain's ``ContextEditingMiddleware(edits=[ClearToolUsesEdit()])`` defaults.

    LangChain counts tokens approximately by default; memstack's counter is used here.
    """
    from memstack.tokens import TokenCounter

    counter = TokenCounter()
    return StrategySpec(
        f"LangChain clear-tool-uses ({trigger // 1000}k trigger, keep {keep})",
        lambda _: _ClearToolUses(trigger, keep, counter),
        "baseline",
    )


class _ResponsesCompactionShape(_ListStrategy):
    def __init__(self, threshold: int, summary_tokens: int) -> None:
        super().__init__()
        from memstack.compaction import ExtractiveSummarizer, Summarize

        self.threshold = threshold
        self.summarize = Summarize(ExtractiveSummarizer(), max_tokens=summary_tokens)
        self.compacted: list[Item] = []  # the stand-in, once there is one

    async def view(self) -> list[Item]:
        # The SDK checks after each saved response: with >= threshold candidates (items
        # that are neither user messages nor compaction items) the whole history goes to
        # responses.compact, which returns the user messages and one opaque item.
        candidates = [item for item in self.items if not is_user_message(item)]
        fresh = [item for item in candidates if item not in self.compacted]
        if len(fresh) >= self.threshold:
            self.compacted = await self.summarize.compact(self.compacted, fresh)
            self.items = [item for item in self.items if is_user_message(item)]
            self.items.extend(self.compacted)
        return list(self.items)


def sdk_responses_compaction_shape(threshold: int = 10, summary_tokens: int = 1000) -> StrategySpec:
    """The shape of the SDK's ``OpenAIResponsesCompactionSession`` policy, offline.

    A stand-in: the real compaction item is opaque (encrypted) and its size unknown; here
    it is an extractive summary of at most ``summary_tokens`` tokens in one item.
    """
    return StrategySpec(
        f"SDK Responses compaction shape (>= {threshold} items) [stand-in]",
        lambda _: _ResponsesCompactionShape(threshold, summary_tokens),
        "baseline",
    )


NAMED_BASELINES: dict[str, Callable[[], StrategySpec]] = {
    "full": full_history,
    "sdk-limit": lambda: sdk_item_limit(40),
    "last-turns": lambda: last_user_turns(3),
    "trimmer": sdk_tool_output_trimmer,
    "jetbrains-masking": jetbrains_observation_masking,
    "langchain-clear": langchain_clear_tool_uses,
    "sdk-compaction": sdk_responses_compaction_shape,
}
