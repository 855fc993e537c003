"""A multi-turn agent conversation through the real SDK ``Runner``, offline.

    >>> from memstack.testing.conversation import run_conversation
    >>> from memstack.testing import InMemorySession
    >>> len(run_conversation(lambda: InMemorySession("demo")))
    8

Runs three turns against a scripted model with a function tool, the way one sync
program would: ``Runner.run`` (a tool call) and ``Runner.run_streamed`` on the thread's
event loop, and ``Runner.run_sync`` in between, which reuses that same loop. Then it
undoes the last turn with ``pop_item``. Async stores (asyncpg, redis) bind pooled
connections to one loop, so the session is made, used and closed on that one loop.
Returns what the session holds at the end, and checks it on the way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool
from agents.memory import Session

from memstack.history import history_problems
from memstack.testing.model import ScriptedModel, ToolCall

__all__ = ["EXPECTED_TURNS", "run_conversation"]

EXPECTED_TURNS = ["Oslo: 7°C and rain", "Rome: 21°C and sun", "Thanks!"]


@function_tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return {"Oslo": "7°C and rain", "Rome": "21°C and sun"}.get(city, "unknown")


def _texts(items: list[Any]) -> list[str]:
    texts: list[str] = []
    for item in items:
        content = item.get("content")
        if item.get("role") == "assistant" and isinstance(content, list):
            texts.extend(part.get("text", "") for part in content)
    return texts


def run_conversation(
    make_session: Callable[[], Session],
    *,
    cleanup: Callable[[], Awaitable[None]] | None = None,
) -> list[Any]:
    """Run the conversation on a fresh event loop; ``cleanup`` runs on that loop last."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        session = make_session()
        try:
            return _converse(loop, session)
        finally:
            if cleanup is not None:
                loop.run_until_complete(cleanup())
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def _converse(loop: asyncio.AbstractEventLoop, session: Session) -> list[Any]:
    model = ScriptedModel(
        [
            ToolCall("get_weather", {"city": "Oslo"}),
            EXPECTED_TURNS[0],
            ToolCall("get_weather", {"city": "Rome"}),
            EXPECTED_TURNS[1],
            EXPECTED_TURNS[2],
        ]
    )
    agent = Agent(name="weather", instructions="Answer briefly.", model=model, tools=[get_weather])
    config = RunConfig(tracing_disabled=True)

    run = loop.run_until_complete

    first = run(Runner.run(agent, "Weather in Oslo?", session=session, run_config=config))
    assert first.final_output == EXPECTED_TURNS[0], first.final_output

    second = Runner.run_sync(agent, "And Rome?", session=session, run_config=config)
    assert second.final_output == EXPECTED_TURNS[1], second.final_output

    async def stream() -> Any:
        streamed = Runner.run_streamed(agent, "Thanks", session=session, run_config=config)
        async for _ in streamed.stream_events():
            pass
        return streamed.final_output

    third = run(stream())
    assert third == EXPECTED_TURNS[2], third

    # The model saw the whole history on the last call: both tool results included.
    last_input = model.inputs[-1]
    assert "Oslo" in str(last_input) and "21°C and sun" in str(last_input)

    stored = run(session.get_items())
    assert _texts(stored) == EXPECTED_TURNS, _texts(stored)
    assert history_problems(stored) == [], history_problems(stored)

    # Undo the last turn: the assistant reply, then the user message.
    popped: list[Any] = [run(session.pop_item()), run(session.pop_item())]
    assert popped[0]["role"] == "assistant" and popped[1]["content"] == "Thanks", popped
    after: list[Any] = run(session.get_items())
    assert after == stored[:-2]
    run(session.clear_session())
    return after
