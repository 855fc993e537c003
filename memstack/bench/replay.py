"""Replay conversations through strategies and price every model call.

    >>> # results = await replay(conversations, strategies, counter, PRICES["gpt-4o"])

Before each model call of a transcript the input is: system prompt + tool schemas + the
strategy's view of history. Input tokens are split into cached and fresh by the longest
common prefix with the previous call's input (item by item, as prompts are built), under
OpenAI's cache rule; output tokens are the items the call produced.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from memstack.bench.pricing import Price, cached_tokens
from memstack.bench.quality import Retention
from memstack.bench.strategies import StrategySpec
from memstack.bench.transcripts import Conversation, model_calls

__all__ = ["CallRecord", "Counter", "StrategyResult", "replay"]

Item = dict[str, Any]


class Counter(Protocol):
    def count_items(self, items: Sequence[Any]) -> int: ...

    def count_tools(self, tools: Sequence[Any]) -> int: ...


@dataclass(frozen=True)
class CallRecord:
    strategy: str
    conversation: str
    call: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    cost: float
    valid: bool


@dataclass
class StrategyResult:
    name: str
    kind: str
    calls: list[CallRecord] = field(default_factory=list)
    fact_retention: list[float] = field(default_factory=list)
    tool_retention: list[float] = field(default_factory=list)

    @property
    def invalid(self) -> int:
        return sum(not call.valid for call in self.calls)

    def total(self, attribute: str) -> float:
        return float(sum(getattr(call, attribute) for call in self.calls))


def _keys(items: Sequence[Item]) -> list[str]:
    return [json.dumps(item, sort_keys=True) for item in items]


def _common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for left, right in zip(a, b, strict=False):
        if left != right:
            break
        n += 1
    return n


async def replay_one(
    conversation: Conversation, spec: StrategySpec, counter: Counter, price: Price
) -> tuple[list[CallRecord], Retention]:
    strategy = spec.make(conversation.id)
    history = conversation.history
    head = counter.count_tools(conversation.tools)
    if conversation.system_prompt:
        head += counter.count_items([{"role": "system", "content": conversation.system_prompt}])
    retention = Retention()
    records: list[CallRecord] = []
    previous: list[str] = []
    position = 0
    for number, call in enumerate(model_calls(history)):
        new = history[position : call.start]
        await strategy.add(new)
        retention.observe(new)
        view = await strategy.view()
        invalid_before = retention.invalid_views
        retention.score(view)
        keys = _keys(view)
        shared = _common_prefix(previous, keys)
        view_tokens = counter.count_items(view)
        input_tokens = head + view_tokens
        prefix_tokens = head + (counter.count_items(view[:shared]) if shared else 0)
        cached = cached_tokens(min(prefix_tokens, input_tokens)) if previous else 0
        output = history[call.start : call.stop]
        output_tokens = counter.count_items(output)
        records.append(
            CallRecord(
                spec.name,
                conversation.id,
                number,
                input_tokens,
                cached,
                output_tokens,
                price.cost(input_tokens - cached, cached, output_tokens),
                retention.invalid_views == invalid_before,
            )
        )
        await strategy.add(output)
        previous = keys
        position = call.stop
    return records, retention


async def replay(
    conversations: Sequence[Conversation],
    strategies: Sequence[StrategySpec],
    counter: Counter,
    price: Price,
    *,
    progress: Callable[[int], None] | None = None,
) -> list[StrategyResult]:
    """Every strategy over every conversation, side by side in one run."""
    results = [StrategyResult(spec.name, spec.kind) for spec in strategies]
    for conversation in conversations:
        for spec, result in zip(strategies, results, strict=True):
            records, retention = await replay_one(conversation, spec, counter, price)
            result.calls.extend(records)
            result.fact_retention.extend(retention.fact_scores)
            result.tool_retention.extend(retention.output_scores)
        if progress is not None:
            progress(1)
    return results
