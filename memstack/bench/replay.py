"""Replay conversations through strategies and price every model call.

    >>> # results = await replay(conversations, strategies, counter, PRICES["gpt-4o"])

Before each model call of a transcript the input is: system prompt + tool schemas + the
strategy's view of history. Input tokens are split into cached and fresh by the longest
common prefix with the previous call's input (item by item, as prompts are built), under
OpenAI's cache rule; output tokens are the items the call produced. Needed-context recall
(``memstack.bench.needed``) is counted for every call. Token counts and each conversation's
needs are computed once and shared by every strategy.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from memstack.bench.in_context import in_context_counts, normalized
from memstack.bench.needed import Need, item_text, needs_per_call, recall_counts
from memstack.bench.pricing import Price, cached_tokens
from memstack.bench.quality import Retention
from memstack.bench.strategies import StrategySpec
from memstack.bench.transcripts import Conversation, ModelCall, model_calls
from memstack.history import is_user_message

__all__ = ["CallRecord", "Counter", "StrategyResult", "TokenLedger", "prepare", "replay"]

Item = dict[str, Any]


class Counter(Protocol):
    def count_items(self, items: Sequence[Any]) -> int: ...

    def count_tools(self, tools: Sequence[Any]) -> int: ...


@dataclass(frozen=True)
class CallRecord:
    strategy: str
    source: str
    conversation: str
    call: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    cost: float
    valid: bool
    needed: int  # salient tokens the call used from earlier history
    needed_kept: int  # of them, still in this strategy's view
    needed_kept_in_context: int  # of them, shown with their text (``bench.in_context``)
    floor_cost: float  # the same call with no history: head + the newest user message


@dataclass
class StrategyResult:
    name: str
    kind: str
    calls: list[CallRecord] = field(default_factory=list)
    #: (source, score) per scored call; see ``memstack.bench.quality``.
    fact_retention: list[tuple[str, float]] = field(default_factory=list)
    tool_retention: list[tuple[str, float]] = field(default_factory=list)

    @property
    def invalid(self) -> int:
        return sum(not call.valid for call in self.calls)

    def total(self, attribute: str) -> float:
        return float(sum(getattr(call, attribute) for call in self.calls))

    def only(self, source: str) -> StrategyResult:
        """The same result restricted to one transcript set."""
        return StrategyResult(
            self.name,
            self.kind,
            [call for call in self.calls if call.source == source],
            [score for score in self.fact_retention if score[0] == source],
            [score for score in self.tool_retention if score[0] == source],
        )


class TokenLedger:
    """Token counts by item content, shared by every strategy of a run.

    Strategies mostly send the same items; each distinct item is tokenised once, keyed
    by the canonical JSON the replay computes anyway for the cache prefix.
    """

    def __init__(self, counter: Counter) -> None:
        self.counter = counter
        self.counts: dict[str, int] = {}

    def tokens(self, keys: Sequence[str], items: Sequence[Item]) -> list[int]:
        counts = self.counts
        result = []
        for key, item in zip(keys, items, strict=True):
            count = counts.get(key)
            if count is None:
                count = counts[key] = self.counter.count_items([item])
            result.append(count)
        return result


@dataclass(frozen=True)
class Prepared:
    """What every strategy shares for one conversation: heads, calls, needs, item keys."""

    conversation: Conversation
    calls: list[ModelCall]
    needs: list[list[Need]]
    head_tokens: int
    index_of: dict[str, int]  # canonical JSON of a history item -> its index
    texts: list[str]  # normalized text of each history item (in-context recall)
    floor_costs: list[float]  # per call, its cost with no history (see ``floor_costs``)


def prepare(conversation: Conversation, ledger: TokenLedger, price: Price) -> Prepared:
    history = conversation.history
    calls = model_calls(history)
    visible = "\n".join([conversation.system_prompt, json.dumps(conversation.tools)])
    head = ledger.counter.count_tools(conversation.tools)
    if conversation.system_prompt:
        head += ledger.counter.count_items(
            [{"role": "system", "content": conversation.system_prompt}]
        )
    index_of: dict[str, int] = {}
    for index, key in enumerate(_keys(history)):
        index_of.setdefault(key, index)
    return Prepared(
        conversation,
        calls,
        needs_per_call(history, calls, always_visible=visible),
        head,
        index_of,
        [normalized(item_text(item)) for item in history],
        floor_costs(history, calls, head, ledger, price),
    )


def floor_costs(
    history: Sequence[Item],
    calls: Sequence[ModelCall],
    head: int,
    ledger: TokenLedger,
    price: Price,
) -> list[float]:
    """Per call, what it costs with no history: the head and the newest user message only.

    Every strategy pays this (the system prompt and tool schemas dominate short support
    dialogues), so what a strategy saves is measured above it. Cached like any input.
    """
    costs: list[float] = []
    previous: list[str] = []
    newest: list[Item] = []
    position = 0
    for call in calls:
        for item in history[position : call.start]:
            if is_user_message(item):
                newest = [item]
        keys = _keys(newest)
        tokens = head + sum(ledger.tokens(keys, newest))
        shared = tokens if keys == previous else head
        cached = cached_tokens(min(shared, tokens)) if costs else 0
        output = history[call.start : call.stop]
        out_tokens = sum(ledger.tokens(_keys(output), output))
        costs.append(price.cost(tokens - cached, cached, out_tokens))
        previous, position = keys, call.stop
    return costs


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
    prepared: Prepared, spec: StrategySpec, ledger: TokenLedger, price: Price
) -> tuple[list[CallRecord], Retention]:
    conversation = prepared.conversation
    strategy = spec.make(conversation.id)
    history = conversation.history
    head = prepared.head_tokens
    retention = Retention()
    records: list[CallRecord] = []
    previous: list[str] = []
    position = 0
    for number, call in enumerate(prepared.calls):
        new = history[position : call.start]
        await strategy.add(new)
        retention.observe(new)
        view = await strategy.view()
        invalid_before = retention.invalid_views
        retention.score(view)
        keys = _keys(view)
        counts = ledger.tokens(keys, view)
        shared = _common_prefix(previous, keys)
        input_tokens = head + sum(counts)
        prefix_tokens = head + sum(counts[:shared])
        cached = cached_tokens(min(prefix_tokens, input_tokens)) if previous else 0
        output = history[call.start : call.stop]
        output_tokens = ledger.tokens(_keys(output), output)
        originals = [prepared.index_of.get(k) for k in keys]
        needed, kept = recall_counts(prepared.needs[number], view, originals=originals)
        _, in_context = in_context_counts(prepared.needs[number], view, originals, prepared.texts)
        records.append(
            CallRecord(
                spec.name,
                conversation.source,
                conversation.id,
                number,
                input_tokens,
                cached,
                sum(output_tokens),
                price.cost(input_tokens - cached, cached, sum(output_tokens)),
                retention.invalid_views == invalid_before,
                needed,
                kept,
                in_context,
                prepared.floor_costs[number],
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
    ledger = TokenLedger(counter)
    for conversation in conversations:
        prepared = prepare(conversation, ledger, price)
        for spec, result in zip(strategies, results, strict=True):
            records, retention = await replay_one(prepared, spec, ledger, price)
            result.calls.extend(records)
            source = conversation.source
            result.fact_retention.extend((source, s) for s in retention.fact_scores)
            result.tool_retention.extend((source, s) for s in retention.output_scores)
        if progress is not None:
            progress(1)
    return results
