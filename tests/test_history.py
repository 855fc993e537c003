"""History units and turns: hand-made cases for every item family, random histories, and
every conversation in ../shared/data."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstack.errors import ItemValidationError
from memstack.history import (
    CALL_TO_OUTPUT,
    cut_points,
    history_problems,
    is_pinned,
    is_user_message,
    pair_key,
    split_turns,
    split_units,
    validate_items,
)

from .conftest import no_transcripts, shared_data, shared_transcripts


def load_conversations() -> list[dict[str, Any]]:
    conversations = []
    for path in shared_transcripts():  # MEMSTACK_DATA, default ../shared/data
        with path.open() as lines:
            conversations.extend(json.loads(line) for line in lines)
    return conversations


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def spans(items: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(unit.start, unit.stop) for unit in split_units(items)]


@pytest.mark.parametrize(
    ("call", "output"),
    [
        (
            {"type": "function_call", "call_id": "a"},
            {"type": "function_call_output", "call_id": "a"},
        ),
        (
            {"type": "custom_tool_call", "call_id": "a"},
            {"type": "custom_tool_call_output", "call_id": "a"},
        ),
        (
            {"type": "computer_call", "call_id": "a"},
            {"type": "computer_call_output", "call_id": "a"},
        ),
        ({"type": "shell_call", "call_id": "a"}, {"type": "shell_call_output", "call_id": "a"}),
        (
            {"type": "local_shell_call", "call_id": "a", "id": "ls_1"},
            {"type": "local_shell_call_output", "id": "a"},
        ),
        (
            {"type": "apply_patch_call", "call_id": "a"},
            {"type": "apply_patch_call_output", "call_id": "a"},
        ),
        (
            {"type": "tool_search_call", "call_id": "a"},
            {"type": "tool_search_output", "call_id": "a"},
        ),
        (
            {"type": "program", "call_id": "a", "id": "p"},
            {"type": "program_output", "call_id": "a"},
        ),
        (
            {"type": "mcp_approval_request", "id": "a"},
            {"type": "mcp_approval_response", "approval_request_id": "a"},
        ),
    ],
    ids=lambda item: item["type"],
)
def test_every_call_family_pairs_with_its_output(call, output):
    items = [user("go"), call, assistant("in between"), output, assistant("done")]
    assert pair_key(call) == pair_key(output) is not None
    assert spans(items) == [(0, 1), (1, 4), (4, 5)]
    assert history_problems(items) == []
    assert history_problems(items[3:]) != []  # the output alone is an orphan


def test_every_sdk_call_type_is_known():
    from agents.run_internal.items import _TOOL_CALL_TO_OUTPUT_TYPE

    for call, output in _TOOL_CALL_TO_OUTPUT_TYPE.items():
        assert CALL_TO_OUTPUT[call] == output


def test_parallel_calls_with_interleaved_outputs_form_one_unit():
    items = [
        user("two things"),
        {"type": "function_call", "call_id": "a"},
        {"type": "function_call", "call_id": "b"},
        {"type": "function_call_output", "call_id": "a"},
        {"type": "function_call_output", "call_id": "b"},
        assistant("both done"),
    ]
    assert spans(items) == [(0, 1), (1, 5), (5, 6)]


def test_reasoning_binds_to_what_follows_it():
    items = [
        user("think"),
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "reasoning", "id": "rs_2", "summary": []},
        {"type": "function_call", "call_id": "a"},
        {"type": "function_call_output", "call_id": "a"},
        {"type": "reasoning", "id": "rs_3", "summary": []},
        assistant("answer"),
    ]
    assert spans(items) == [(0, 1), (1, 5), (5, 7)]


def test_self_contained_items_stand_alone():
    items = [
        user("search"),
        {"type": "web_search_call", "id": "ws", "status": "completed"},
        {"type": "mcp_call", "id": "m", "name": "x", "output": "y"},
        {"type": "mcp_list_tools", "id": "l", "tools": []},
        {"type": "compaction", "encrypted_content": "..."},
        {"type": "item_reference", "id": "msg_1"},
        assistant("ok"),
    ]
    assert spans(items) == [(i, i + 1) for i in range(len(items))]
    assert history_problems(items) == []


def test_turns_start_at_user_messages_outside_units():
    items = [
        {"role": "system", "content": "rules"},
        user("q1"),
        {"type": "function_call", "call_id": "a"},
        user("interjection inside the pair"),
        {"type": "function_call_output", "call_id": "a"},
        assistant("a1"),
        user("q2"),
        assistant("a2"),
    ]
    assert [(t.start, t.stop) for t in split_turns(items)] == [(0, 1), (1, 6), (6, 8)]


def test_pinned_items():
    assert is_pinned({"role": "system", "content": "x"})
    assert is_pinned({"type": "message", "role": "developer", "content": "x"})
    assert is_pinned({"type": "compaction", "encrypted_content": "x"})
    assert not is_pinned(user("x"))
    assert not is_pinned({"type": "function_call", "call_id": "a"})


def test_problems_found():
    assert history_problems([{"type": "function_call_output", "call_id": "zz"}])
    pending = [user("q"), {"type": "function_call", "call_id": "a"}]
    assert history_problems(pending) == []  # a call still waiting for its output
    assert history_problems([*pending, user("next")])  # ...but never answered
    cut_reasoning = [user("q"), {"type": "reasoning", "id": "r"}, user("again")]
    assert history_problems(cut_reasoning)


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ("not a list", "must be a list"),
        ([user("ok"), "text"], "item 1 must be a dict"),
        ([{"role": "user", "content": object()}], r"item 0 \(message\), field content: a object"),
        ([{"role": "user", "content": float("nan")}], "field content: nan is not a JSON number"),
        (
            [user("ok"), {"role": "user", "content": [{"type": "input_text", "text": "\ud83d"}]}],
            r"item 1 \(message\), field content\[0\]\.text: '\\ud83d' at 0 is a lone surrogate",
        ),
    ],
)
def test_validate_items_names_the_problem(items, message):
    with pytest.raises(ItemValidationError, match=message):
        validate_items(items, layer="TestLayer")


CONVERSATIONS = load_conversations()


def test_shared_transcripts_are_present():
    shared_data("airline_tau.jsonl")  # skips, naming where it looked, when the data is absent
    assert len(CONVERSATIONS) >= 268


@pytest.mark.parametrize(
    "conversation",
    [pytest.param(c, id=c["id"]) for c in CONVERSATIONS] or [pytest.param(None, id="no-data")],
)
def test_real_transcripts(conversation):
    if conversation is None:
        no_transcripts()
    items = conversation["items"]
    validate_items(items)
    assert history_problems(items) == []
    units = split_units(items)
    # Units tile the history, and every suffix starting at a unit is API-valid.
    assert [u.start for u in units] == [0, *[u.stop for u in units[:-1]]]
    assert units[-1].stop == len(items)
    for unit in units:
        assert history_problems(items[unit.start :]) == []
    # Each call sits in the same unit as its output.
    unit_of = {i: n for n, u in enumerate(units) for i in range(u.start, u.stop)}
    calls = {}
    for index, item in enumerate(items):
        key = pair_key(item)
        if key is not None:
            calls.setdefault(key, []).append(unit_of[index])
    assert all(len(set(found)) == 1 for found in calls.values())
    turns = split_turns(items)
    assert all(items[t.start]["role"] == "user" for t in turns[1:])


# -- random histories --------------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Valid histories: turns of reasoning, messages and (parallel) tool calls."""
    items: list[dict[str, Any]] = []
    if draw(st.booleans()):
        items.append({"role": "system", "content": "sys"})
    call_no = 0
    for _ in range(draw(st.integers(0, 6))):
        items.append(user("q"))
        for _ in range(draw(st.integers(0, 3))):
            if draw(st.booleans()):
                items.append({"type": "reasoning", "id": f"rs{len(items)}", "summary": []})
            if draw(st.booleans()):
                items.append(assistant("a"))
                continue
            family = draw(st.sampled_from(["function_call", "shell_call", "custom_tool_call"]))
            ids = [f"c{call_no + k}" for k in range(draw(st.integers(1, 3)))]
            call_no += len(ids)
            items.extend({"type": family, "call_id": i} for i in ids)
            order = draw(st.permutations(ids))
            items.extend({"type": CALL_TO_OUTPUT[family], "call_id": i} for i in order)
        items.append(assistant("final"))
    return items


@settings(max_examples=300, deadline=None)
@given(histories())
def test_random_histories_cut_only_where_valid(items):
    assert history_problems(items) == []
    ok = cut_points(items)
    for cut in range(len(items) + 1):
        suffix_valid = history_problems(items[cut:]) == [] and (
            cut == 0 or items[cut - 1].get("type") != "reasoning"
        )
        if ok[cut]:
            assert suffix_valid, (cut, items)
    assert [u.stop for u in split_units(items)] == [i for i in range(1, len(items) + 1) if ok[i]]


def test_a_reused_call_id_makes_two_units_not_one():
    call = {"type": "function_call", "call_id": "same"}
    output = {"type": "function_call_output", "call_id": "same"}
    items = [user("a"), call, output, assistant("x"), user("b"), call, output, assistant("y")]
    assert spans(items) == [(0, 1), (1, 3), (3, 4), (4, 5), (5, 7), (7, 8)]
    assert [(t.start, t.stop) for t in split_turns(items)] == [(0, 4), (4, 8)]


def test_odd_type_values_classify_as_before_and_never_crash() -> None:
    """A str subclass is its string; any other non-string type is a plain message."""
    from enum import StrEnum

    class Kind(StrEnum):
        CALL = "function_call"
        OUTPUT = "function_call_output"

    call = {"type": Kind.CALL, "call_id": "c1", "name": "f", "arguments": "{}"}
    output = {"type": Kind.OUTPUT, "call_id": "c1", "output": "ok"}
    assert pair_key(call) == pair_key(output) == ("function_call", "c1")
    assert [(s.start, s.stop) for s in split_units([call, output])] == [(0, 2)]
    for odd in (["x"], {"a": 1}, 5):
        assert is_pinned({"type": odd, "role": "system"})
        assert is_user_message({"type": odd, "role": "user"})
        assert pair_key({"type": odd, "call_id": "c1"}) is None
