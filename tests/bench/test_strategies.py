"""Peer baselines: each reproduces what its peer does, on small histories."""

from __future__ import annotations

import json
from typing import Any

from memstack.bench.strategies import (
    jetbrains_observation_masking,
    langchain_clear_tool_uses,
    sdk_responses_compaction_shape,
)
from memstack.history import history_problems, is_pinned

Item = dict[str, Any]


def agent_loop(steps: int, output: str = "line\n" * 50) -> list[Item]:
    items: list[Item] = [{"role": "user", "content": "fix it"}]
    for n in range(steps):
        items += [
            {"role": "assistant", "content": f"step {n}"},
            {"type": "function_call", "call_id": f"c{n}", "name": "bash",
             "arguments": json.dumps({"command": f"cat f{n}"})},
            {"type": "function_call_output", "call_id": f"c{n}", "output": output},
        ]  # fmt: skip
    return items


def outputs(view: list[Item]) -> list[str]:
    return [item["output"] for item in view if item.get("type") == "function_call_output"]


async def view_after(spec: Any, items: list[Item]) -> list[Item]:
    strategy = spec.make("s")
    await strategy.add(items)
    view: list[Item] = await strategy.view()
    return view


async def test_jetbrains_masking_keeps_the_last_ten_turns_outputs() -> None:
    view = await view_after(jetbrains_observation_masking(), agent_loop(13))
    shown = outputs(view)
    assert shown[:3] == ["Old environment output: (50 lines omitted)"] * 3
    assert shown[3:] == ["line\n" * 50] * 10
    assert not history_problems(view)


async def test_langchain_clear_tool_uses_clears_all_but_three_past_the_trigger() -> None:
    items = agent_loop(6)
    assert await view_after(langchain_clear_tool_uses(trigger=100_000), items) == items
    view = await view_after(langchain_clear_tool_uses(trigger=200, keep=3), items)
    assert outputs(view) == ["[cleared]"] * 3 + ["line\n" * 50] * 3
    assert not history_problems(view)


async def test_sdk_compaction_shape_keeps_user_messages_and_one_item() -> None:
    strategy = sdk_responses_compaction_shape().make("s")
    items = agent_loop(5)  # 15 candidates: compacted on the next view
    await strategy.add(items[:10])  # 9 candidates: not yet
    assert await strategy.view() == items[:10]
    await strategy.add(items[10:])
    view = await strategy.view()
    assert view[0] == items[0] and len(view) == 2 and is_pinned(view[1])
    assert "cat f4" in view[1]["content"]
    more = agent_loop(4)[1:]  # 12 more candidates: compacted again into one item
    await strategy.add(more)
    again = await strategy.view()
    assert len(again) == 2 and again[1] != view[1] and not history_problems(again)
