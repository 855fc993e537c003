"""The Session contract as reusable checks, for memstack's tests and for users' own stacks.

    import pytest
    from memstack.testing import CONTRACT_CHECKS

    @pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda c: c.__name__)
    async def test_my_stack(check):
        await check(lambda session_id: my_stack(session_id))

A check takes a factory ``session_id -> Session`` (or an awaitable of one); every session
it makes shares one store, so checks can see whether sessions stay apart. Checks use
fresh random session ids and clear what they wrote.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from agents.items import TResponseInputItem
from agents.memory import Session

__all__ = ["CONTRACT_CHECKS", "SessionFactory", "run_contract", "sample_items", "tool_turn"]

SessionFactory = Callable[[str], "Session | Awaitable[Session]"]
Check = Callable[[SessionFactory], Awaitable[None]]


def sample_items(count: int, tag: str = "m") -> list[TResponseInputItem]:
    """Distinct, realistic items: user/assistant turns with tool calls in between."""
    items: list[Any] = []
    for i in range(count):
        kind = i % 4
        if kind == 0:
            items.append({"role": "user", "content": f"{tag}-{i} question"})
        elif kind == 1:
            items.append(
                {
                    "type": "function_call",
                    "call_id": f"{tag}-c{i}",
                    "name": "lookup",
                    "arguments": f'{{"n": {i}}}',
                }
            )
        elif kind == 2:
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": f"{tag}-c{i - 1}",
                    "output": f"result {i}",
                }
            )
        else:
            items.append({"role": "assistant", "content": f"{tag}-{i} answer"})
    return items


async def _open(factory: SessionFactory, session_id: str | None = None) -> Session:
    made = factory(session_id or f"contract-{uuid.uuid4().hex[:12]}")
    session = await made if inspect.isawaitable(made) else made
    assert isinstance(session, Session), f"factory returned {type(session).__name__}"
    return session


async def check_empty_session(factory: SessionFactory) -> None:
    session = await _open(factory)
    assert await session.get_items() == []
    assert await session.get_items(limit=3) == []
    assert await session.pop_item() is None
    await session.clear_session()
    assert await session.get_items() == []


async def check_add_and_get_keeps_order(factory: SessionFactory) -> None:
    session = await _open(factory)
    items = sample_items(9)
    await session.add_items(items[:4])
    await session.add_items(items[4:])
    assert await session.get_items() == items
    await session.clear_session()


async def check_add_nothing(factory: SessionFactory) -> None:
    session = await _open(factory)
    await session.add_items([])
    assert await session.get_items() == []
    await session.add_items(sample_items(2))
    await session.add_items([])
    assert len(await session.get_items()) == 2
    await session.clear_session()


async def check_limit(factory: SessionFactory) -> None:
    session = await _open(factory)
    items = sample_items(8)
    await session.add_items(items)
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=1) == items[-1:]
    assert await session.get_items(limit=3) == items[-3:]
    assert await session.get_items(limit=8) == items
    assert await session.get_items(limit=50) == items
    await session.clear_session()


def tool_turn(tag: str = "t") -> list[TResponseInputItem]:
    """One user turn with a tool call: user, call, its output, the answer (a list item)."""
    items: list[Any] = [
        {"role": "user", "content": f"{tag}: what is the weather?"},
        {"type": "function_call", "call_id": f"{tag}-call", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"{tag}-call", "output": "sunny"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "It is sunny.", "annotations": []}],
        },
    ]
    return items


async def check_limit_is_the_newest_items(factory: SessionFactory) -> None:
    """``limit=n`` is the newest n items, as in the SDK's stores, even when the cut leaves a
    tool output without its call (the Runner drops such an output from the model input)."""
    session = await _open(factory)
    history = tool_turn()
    await session.add_items(history)
    for n in range(len(history) + 2):
        assert await session.get_items(limit=n) == (history[-n:] if n else []), f"limit={n}"
    await session.clear_session()
    await session.add_items(history[:3])  # a history that ends in a tool output
    assert await session.get_items(limit=1) == history[2:3]
    assert await session.get_items(limit=2) == history[1:3]
    await session.clear_session()


async def check_pop_item(factory: SessionFactory) -> None:
    session = await _open(factory)
    items = sample_items(5)
    await session.add_items(items)
    assert await session.pop_item() == items[-1]
    assert await session.get_items() == items[:-1]
    for expected in reversed(items[:-1]):
        assert await session.pop_item() == expected
    assert await session.pop_item() is None
    assert await session.get_items() == []
    await session.add_items(items[:2])
    assert await session.get_items() == items[:2]
    await session.clear_session()


async def check_clear_session(factory: SessionFactory) -> None:
    session = await _open(factory)
    await session.add_items(sample_items(6))
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None
    fresh = sample_items(3, tag="after")
    await session.add_items(fresh)
    assert await session.get_items() == fresh
    await session.clear_session()


async def check_sessions_stay_apart(factory: SessionFactory) -> None:
    first, second = await _open(factory), await _open(factory)
    a, b = sample_items(4, tag="a"), sample_items(6, tag="b")
    await first.add_items(a[:2])
    await second.add_items(b)
    await first.add_items(a[2:])
    assert await first.get_items() == a
    assert await second.get_items() == b
    assert await first.pop_item() == a[-1]
    await second.clear_session()
    assert await first.get_items() == a[:-1]
    assert await second.get_items() == []
    await first.clear_session()


async def check_reopen_sees_history(factory: SessionFactory) -> None:
    session_id = f"contract-{uuid.uuid4().hex[:12]}"
    items = sample_items(5)
    await (await _open(factory, session_id)).add_items(items)
    again = await _open(factory, session_id)
    assert await again.get_items() == items
    await again.clear_session()


async def check_faithful_round_trip(factory: SessionFactory) -> None:
    session = await _open(factory)
    items: list[Any] = [
        {"role": "user", "content": 'héllo wörld — 你好 🚀 "quotes" \\ back\nnew line'},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "part one"},
                {"type": "input_text", "text": "part two"},
            ],
        },
        {
            "type": "function_call",
            "call_id": "rt-1",
            "name": "f",
            "arguments": '{"a": [1, 2.5, true, null]}',
        },
        {"type": "function_call_output", "call_id": "rt-1", "output": "x" * 100_000},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "t"}]},
        {"role": "assistant", "content": "", "nested": {"deep": {"n": -1, "f": 0.1}}},
    ]
    await session.add_items(items)
    assert await session.get_items() == items
    await session.clear_session()


async def check_many_items(factory: SessionFactory) -> None:
    session = await _open(factory)
    items = sample_items(300)
    await session.add_items(items)
    assert await session.get_items(limit=40) == items[-40:]
    assert await session.get_items() == items
    await session.clear_session()


CONTRACT_CHECKS: list[Check] = [
    check_empty_session,
    check_add_and_get_keeps_order,
    check_add_nothing,
    check_limit,
    check_limit_is_the_newest_items,
    check_pop_item,
    check_clear_session,
    check_sessions_stay_apart,
    check_reopen_sees_history,
    check_faithful_round_trip,
    check_many_items,
]


async def run_contract(factory: SessionFactory) -> None:
    """Run every check; the first failure raises ``AssertionError`` naming the check."""
    for check in CONTRACT_CHECKS:
        try:
            await check(factory)
        except AssertionError as exc:
            raise AssertionError(f"{check.__name__}: {exc}") from exc
