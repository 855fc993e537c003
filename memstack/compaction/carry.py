"""Key fields of covered tool answers, carried past a compaction as masked pairs.

    >>> from memstack.compaction import Mask
    >>> from memstack.compaction.carry import carry
    >>> from memstack.compaction.plan import Plan
    >>> mask = Mask(default_template="[answered earlier]",
    ...             keep_fields={"get_order": ["items"]})
    >>> raw = [
    ...     {"role": "user", "content": "where is my order?"},
    ...     {"type": "function_call", "call_id": "c1", "name": "get_order",
    ...      "arguments": '{"id": "A1"}'},
    ...     {"type": "function_call_output", "call_id": "c1",
    ...      "output": '{"items": ["lamp"], "address": "' + "x" * 300 + '"}'},
    ...     {"type": "function_call", "call_id": "c2", "name": "track", "arguments": "{}"},
    ... ]
    >>> plan = Plan(base=None, stop=3, covered_hashes=(), previous=[], covered=raw[1:3],
    ...             pinned=raw[:1], count=3, replace=3, sources=[])
    >>> _, carried = carry(plan, raw, mask)
    >>> carried[1]["output"]
    '[answered earlier] Kept from it, verbatim:\\n"items": ["lamp"]'

Why: in a long agent loop, a compaction covers answers of the current user turn that
the agent has not used yet (in the support transcripts, it comes back to them three or
more tool outputs later), so a summary that quotes what was used cannot know which
lines to keep. The key fields of those answers (``Mask(keep_fields=…)``) are what it
comes back for. They are carried after the summary as the call and its masked output
(the same placeholder an old answer gets, so the pair stays valid for the API) until the
user speaks again; the next compaction then summarises them like any other history.
Answers of the tools in ``beyond_turn`` (a user's profile) stay carried for the whole
conversation; they stand first, before the pinned task message and the summary
(``pin_lasting``), so from one compaction to the next they stay in the cached prompt
prefix. A call made again (same tool, same
arguments) is carried with its newest answer only.

Pure: a function of the plan, the uncovered items and the mask. It runs only when a
compaction writes a record, so what the model sees stays byte-stable in between.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from memstack.compaction.masking import Mask
from memstack.compaction.plan import Plan
from memstack.history import is_output, is_user_message, item_type, pair_key

__all__ = ["carried_pairs", "carry", "pin_lasting"]

Item = Mapping[str, Any]
_PAIR = frozenset({"function_call", "function_call_output"})


def carried_pairs(summary: Sequence[Item]) -> list[dict[str, Any]]:
    """The pairs a record carries among its summary items (the rest is the summary)."""
    return [dict(item) for item in summary if item_type(item) in _PAIR]


def carry(
    plan: Plan, raw: Sequence[Item], mask: Mask, *, beyond_turn: Collection[str] = ()
) -> tuple[Plan, list[dict[str, Any]]]:
    """``plan`` without the carried pairs in ``previous``, and the pairs to carry now.

    ``raw`` is the uncovered history the plan was made from (its first ``plan.stop``
    items are covered). Pairs carried so far stay while their user turn goes on; once a
    newer user message exists they join ``covered`` (to be summarised), but for the
    ``beyond_turn`` tools.
    """
    before = carried_pairs([*plan.pinned, *plan.previous])  # ``pin_lasting`` pins some
    previous = [dict(item) for item in plan.previous if item_type(item) not in _PAIR]
    pinned = [dict(item) for item in plan.pinned if item_type(item) not in _PAIR]
    users = [i for i, item in enumerate(raw) if is_user_message(item)]
    newest = users[-1] if users else -1  # the current turn's user message, if uncovered
    turn_ended = newest >= 0
    stay: list[dict[str, Any]] = []
    released: list[dict[str, Any]] = []
    for call, output in _pairs(before):
        lasting = call.get("name") in beyond_turn
        (stay if lasting or not turn_ended else released).extend((call, output))
    covered_raw = raw[: plan.stop]
    current = {pair_key(item) for item in _current_turn(covered_raw, newest) if is_output(item)}
    new = [
        (call, _masked(mask, call, output))
        for call, output in _pairs(covered_raw)
        if call.get("name") in mask.keep_fields
        and (call.get("name") in beyond_turn or pair_key(output) in current)
    ]
    carried = _newest_per_call([*_pairs(stay), *new])
    covered = list(plan.covered)
    if released:  # after the earlier task message(s) the plan puts first
        lead = next(
            (i for i, item in enumerate(covered) if not is_user_message(item)), len(covered)
        )
        covered[lead:lead] = released
    return dataclasses.replace(plan, previous=previous, covered=covered, pinned=pinned), carried


def pin_lasting(
    plan: Plan, carried: Sequence[Item], *, beyond_turn: Collection[str] = ()
) -> tuple[Plan, list[dict[str, Any]]]:
    """``plan`` with the pairs carried for good first among its pinned items; the others.

    A compaction rewrites the summary, and a new user turn the task message pinned before
    it, so what follows them is sent anew; the pairs of the ``beyond_turn`` tools change
    only when their tool answers again, and in front of both they stay in the cached
    prompt prefix from one compaction to the next. ``carry`` finds them there again.
    """
    keys = {
        pair_key(item)
        for item in carried
        if item_type(item) == "function_call" and item.get("name") in beyond_turn
    }
    lasting = [dict(item) for item in carried if pair_key(item) in keys]
    rest = [dict(item) for item in carried if pair_key(item) not in keys]
    return dataclasses.replace(plan, pinned=[*lasting, *plan.pinned]), rest


def _current_turn(covered: Sequence[Item], newest: int) -> list[Item]:
    """The covered items of the current user turn."""
    if newest < 0:
        return list(covered)  # the turn began before these items
    if newest >= len(covered):
        return []  # its user message stays uncovered: nothing of it is covered
    return list(covered[newest + 1 :])


def _pairs(items: Sequence[Item]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each call in ``items`` with its output (calls without one are left out).

    The call goes without its item ``id``: the reasoning item before it is summarised
    with the rest, and the Responses API refuses a call replayed by id without it.
    """
    outputs = {pair_key(item): item for item in items if is_output(item)}
    return [
        ({key: value for key, value in item.items() if key != "id"}, dict(outputs[key]))
        for item in items
        if item_type(item) == "function_call"
        and (key := pair_key(item)) is not None
        and key in outputs
    ]


def _masked(mask: Mask, call: Item, output: Item) -> dict[str, Any]:
    """The output as its placeholder, or as it is when that is no shorter."""
    placeholder = mask.placeholder(call, output)
    text = output.get("output")
    size = len(text) if isinstance(text, str) else len(json.dumps(text, default=str))
    return {**output, "output": placeholder} if len(placeholder) < size else dict(output)


def _newest_per_call(
    pairs: Sequence[tuple[dict[str, Any], dict[str, Any]]],
) -> list[dict[str, Any]]:
    """The pairs in order, each call (tool and arguments) only with its newest answer."""
    newest: dict[tuple[str, str], int] = {}
    for index, (call, _) in enumerate(pairs):
        arguments = call.get("arguments")
        text = arguments if isinstance(arguments, str) else json.dumps(arguments, sort_keys=True)
        newest[(str(call.get("name")), text)] = index
    keep = set(newest.values())
    return [item for index, pair in enumerate(pairs) if index in keep for item in pair]
