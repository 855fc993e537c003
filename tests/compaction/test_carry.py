"""Key fields of covered answers carried past a compaction (``memstack.compaction.carry``)."""

from __future__ import annotations

import json
from typing import Any

from memstack.compaction import Mask
from memstack.compaction.carry import carried_pairs, carry, pin_lasting
from memstack.compaction.plan import Plan
from memstack.history import history_problems

MASK = Mask(
    default_template="[answered earlier]",
    keep_fields={"get_user": ["payment_methods"], "get_order": ["items"]},
)
PAD = "x" * 300  # long enough to be masked


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def pair(call_id: str, tool: str, answer: dict[str, Any], **arguments: str) -> list[dict[str, Any]]:
    return [
        {"type": "function_call", "call_id": call_id, "name": tool,
         "arguments": json.dumps(arguments)},
        {"type": "function_call_output", "call_id": call_id,
         "output": json.dumps({**answer, "note": PAD})},
    ]  # fmt: skip


def plan_for(raw: list[dict[str, Any]], stop: int, previous: list[dict[str, Any]]) -> Plan:
    """A plan covering ``raw[:stop]`` the way ``plan_compaction`` builds one (simplified:
    user messages are pinned while they are the newest one, else covered)."""
    newest = max((i for i, item in enumerate(raw) if item.get("role") == "user"), default=-1)
    covered = [item for i, item in enumerate(raw[:stop]) if i != newest]
    pinned = [raw[newest]] if 0 <= newest < stop else []
    return Plan(None, stop, (), previous, covered, pinned, stop, stop, [])


def test_the_current_turns_covered_answers_are_carried_masked_with_their_key_fields() -> None:
    raw = [
        user("cancel my orders"),
        *pair("c1", "get_order", {"items": ["lamp"], "address": "Oslo"}, id="A1"),
        *pair("c2", "search", {"hits": [1, 2]}, q="lamps"),  # no key fields: summarised
        *pair("c3", "get_order", {"items": ["desk"], "address": "Bergen"}, id="A2"),
    ]
    previous = [{"role": "developer", "content": "summary"}]
    plan, carried = carry(plan_for(raw, 5, previous), raw, MASK)
    assert [item.get("call_id") for item in carried] == ["c1", "c1"]  # c3 is not covered
    assert carried[0] == raw[1]  # the call, unchanged
    assert carried[1]["output"] == ('[answered earlier] Kept from it, verbatim:\n"items": ["lamp"]')
    assert plan.covered == raw[1:5] and plan.previous == previous  # summarised as before
    assert history_problems([*previous, *carried]) == []  # a valid pair after the summary


def test_earlier_turns_are_summarised_and_only_the_named_tools_stay_for_good() -> None:
    raw = [
        *pair("c1", "get_user", {"payment_methods": {"card_1": {"last_four": "7447"}}}, id="u"),
        *pair("c2", "get_order", {"items": ["lamp"]}, id="A1"),
        {"role": "assistant", "content": "Done."},
        user("and my other order?"),
        *pair("c3", "get_order", {"items": ["desk"]}, id="A2"),
    ]
    _, carried = carry(plan_for(raw, 5, []), raw, MASK)
    assert carried == []  # covered answers of an earlier turn: summarised
    _, carried = carry(plan_for(raw, 5, []), raw, MASK, beyond_turn=["get_user"])
    assert [item["call_id"] for item in carried] == ["c1", "c1"]
    assert "7447" in carried[1]["output"]


def test_carried_pairs_stay_while_the_turn_goes_on_then_are_summarised() -> None:
    summary = {"role": "developer", "content": "summary"}
    task = user("cancel both orders")
    earlier = [
        *pair("c1", "get_user", {"payment_methods": {"card_1": {}}}, id="u"),
        *pair("c2", "get_order", {"items": ["lamp"]}, id="A1"),
    ]
    _, before = carry(plan_for([task, *earlier], 5, []), [task, *earlier], MASK)
    previous = [summary, *before]
    assert carried_pairs(previous) == before
    # Same turn: the next compaction keeps what was carried and adds what it covers.
    more = pair("c3", "get_order", {"items": ["desk"]}, id="A2")
    tail = [*more, *pair("c4", "cancel", {"ok": True}, id="A1")]
    plan, carried = carry(plan_for(tail, 2, previous), tail, MASK)
    assert [item["call_id"] for item in carried] == ["c1", "c1", "c2", "c2", "c3", "c3"]
    assert plan.previous == [summary]  # the summariser gets the summary alone
    # A newer user message: what was carried is history now, summarised after the task.
    after = [{"role": "assistant", "content": "Both cancelled."}, user("thanks"), *more]
    covered_plan = Plan(None, 1, (), previous, [task, after[0]], [], 1, 1, [])
    plan, carried = carry(covered_plan, after, MASK, beyond_turn=["get_user"])
    assert [item["call_id"] for item in carried] == ["c1", "c1"]  # the profile stays
    assert plan.covered == [task, *before[2:], after[0]]


def test_a_call_made_again_is_carried_with_its_newest_answer_only() -> None:
    raw = [
        user("what's in my order?"),
        *pair("c1", "get_order", {"items": ["lamp"]}, id="A1"),
        *pair("c2", "get_order", {"items": ["lamp", "desk"]}, id="A1"),
        *pair("c3", "get_order", {"items": ["desk"]}, id="A2"),
        *pair("c4", "cancel", {"ok": True}, id="A2"),
    ]
    _, carried = carry(plan_for(raw, 7, []), raw, MASK)
    assert [item["call_id"] for item in carried] == ["c2", "c2", "c3", "c3"]


def test_a_short_answer_is_carried_as_it_is() -> None:
    raw = [
        user("what's in my order?"),
        {"type": "function_call", "call_id": "c1", "name": "get_order", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": '{"items": []}'},
        *pair("c2", "cancel", {"ok": True}, id="A1"),
    ]
    _, carried = carry(plan_for(raw, 3, []), raw, MASK)
    assert carried == raw[1:3]


def test_a_carried_call_leaves_its_item_id_behind_with_its_reasoning() -> None:
    """The reasoning before a call is summarised with the rest of the turn; the Responses
    API refuses a call replayed by its item id without that reasoning item, so the
    carried call goes without its id (its call_id still pairs it with its output)."""
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gA"}
    call, output = pair("c1", "get_order", {"items": ["lamp"]}, id="A1")
    raw = [user("check my order"), reasoning, {**call, "id": "fc_1"}, output]
    previous = [{"role": "developer", "content": "summary"}]
    plan, carried = carry(plan_for(raw, 4, previous), raw, MASK)
    assert [item.get("type") for item in carried] == ["function_call", "function_call_output"]
    assert "id" not in carried[0] and carried[0]["call_id"] == "c1"
    assert reasoning in plan.covered  # summarised, as every covered item
    assert history_problems([*previous, *carried]) == []


def test_pairs_carried_for_good_are_pinned_first_and_found_there_again() -> None:
    task = user("cancel my order")
    raw = [
        *pair("c1", "get_user", {"payment_methods": {"card_1": {"last_four": "7447"}}}, id="u"),
        {"role": "assistant", "content": "Hello."},
        task,
        *pair("c2", "get_order", {"items": ["lamp"]}, id="A1"),
        *pair("c3", "cancel", {"ok": True}, id="A1"),
    ]
    plan, carried = carry(plan_for(raw, 6, []), raw, MASK, beyond_turn=["get_user"])
    plan, rest = pin_lasting(plan, carried, beyond_turn=["get_user"])
    assert [item.get("call_id") for item in plan.pinned] == ["c1", "c1", None]  # then the task
    assert plan.pinned[2] == task and [item["call_id"] for item in rest] == ["c2", "c2"]
    # The next compaction in the turn finds the pinned pair, and pins it first again.
    summary = {"role": "developer", "content": "summary"}
    tail = raw[6:]
    again = Plan(None, 2, (), [summary, *rest], tail[:2], list(plan.pinned), 2, 2, [])
    again, carried = carry(again, tail, MASK, beyond_turn=["get_user"])
    assert again.pinned == [task] and again.previous == [summary]
    again, rest = pin_lasting(again, carried, beyond_turn=["get_user"])
    assert again.pinned == plan.pinned and [item["call_id"] for item in rest] == ["c2", "c2"]
