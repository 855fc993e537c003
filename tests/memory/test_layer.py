"""MemorySession and memory_tools under the SDK's real Runner, alone and with a window."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents.memory import SQLiteSession

from memstack import LayerSpec, build_stack
from memstack.compaction import input_filter
from memstack.errors import ConfigurationError
from memstack.layers.memory import MemorySession
from memstack.memory import MemoryStore, memory_tools
from memstack.testing import InMemorySession, ScriptedModel, ToolCall

from ..conftest import runner_conversation


def _developer(inputs: list[Any]) -> list[str]:
    return [i["content"] for i in inputs if isinstance(i, dict) and i.get("role") == "developer"]


@pytest.mark.parametrize("order", ["memory-under-window", "memory-on-top"])
async def test_runner_with_memory_tools_and_memory_session(tmp_path: Path, order: str) -> None:
    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'memory.db'}")
    await store.remember("ana", "Ana is vegetarian", kind="preference")
    memory = LayerSpec("memory", {"store": store, "scope": "ana", "max_tokens": 200})
    window = LayerSpec("window", {"max_tokens": 4000})
    specs = [memory, window] if order == "memory-under-window" else [window, memory]
    session = build_stack(SQLiteSession("chat-1", str(tmp_path / "chat.db")), specs)
    model = ScriptedModel(
        [
            ToolCall("remember", {"text": "Ana's birthday is on 3 May", "kind": "fact"}),
            "Noted, happy early birthday!",
            "How about a mushroom risotto?",
        ]
    )
    agent = Agent(name="assistant", model=model, tools=memory_tools(store, "ana"))
    config = RunConfig(tracing_disabled=True)

    first = await Runner.run(agent, "My birthday is on 3 May", session=session, run_config=config)
    assert first.final_output == "Noted, happy early birthday!"
    assert [m.text for m in await store.recall("ana", "birthday")] == ["Ana's birthday is on 3 May"]
    history = await store.history((await store.recall("ana", "birthday")).memories[0].id)
    assert [(e.action, e.actor) for e in history] == [("remembered", "agent")]

    second = await Runner.run(
        agent, "What should I cook for my birthday dinner?", session=session, run_config=config
    )
    assert second.final_output == "How about a mushroom risotto?"
    [pinned] = _developer(model.inputs[-1])
    assert "Ana is vegetarian" in pinned and "birthday is on 3 May" in pinned
    assert model.inputs[-1][0]["role"] == "developer"  # pinned at the head

    raw = await list(session)[-1].get_items()
    assert _developer(raw) == []  # never written into the session
    assert raw[0] == {"role": "user", "content": "My birthday is on 3 May"}


def test_runner_conversation_through_memory_layer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'memory.db'}")
    runner_conversation(
        "sqlite-file",
        tmp_path,
        caplog,
        lambda inner: build_stack(inner, [LayerSpec("memory", {"store": store, "scope": "u"})]),
    )


async def test_memory_session_pins_profile_without_a_query(tmp_path: Path) -> None:
    store = MemoryStore.from_url("sqlite://:memory:")
    await store.remember("ana", "Prefers short answers", kind="preference")
    session = MemorySession(InMemorySession("s"), store=store, scope="ana")
    view = await session.get_items()
    assert view[0]["role"] == "developer" and "short answers" in view[0]["content"]
    await session.add_items([view[0], {"role": "user", "content": "hi"}])
    assert await session.inner.get_items() == [{"role": "user", "content": "hi"}]
    assert repr(session).endswith("MemorySession(scope='ana', max_tokens=500)")
    empty = MemorySession(InMemorySession("t"), store=store, scope="nobody")
    assert await empty.get_items() == []
    await store.close()


def test_memory_session_checks_its_options() -> None:
    store = MemoryStore.from_url("sqlite://:memory:")
    with pytest.raises(ConfigurationError, match="store must be"):
        MemorySession(InMemorySession("s"), store="sqlite://")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="max_tokens"):
        MemorySession(InMemorySession("s"), store=store, max_tokens=10)


async def test_an_empty_header_is_refused() -> None:
    """The header marks the layer's own block: "" would mark every developer message,
    which the layer then drops from what it writes below and from the model's input."""
    store = MemoryStore.from_url("sqlite://:memory:")
    with pytest.raises(ConfigurationError, match="header must be a non-empty string"):
        MemorySession(InMemorySession("s"), store=store, header="")
    inner = InMemorySession("s")
    layer = MemorySession(inner, store=store, header="Memory:")
    await layer.add_items([{"role": "developer", "content": "be brief"}])
    assert await inner.get_items() == [{"role": "developer", "content": "be brief"}]
    await store.close()


async def test_tools_are_bound_to_their_scope() -> None:
    store = MemoryStore.from_url("sqlite://:memory:")
    await store.remember("bob", "Bob's PIN hint is the cat")
    remember, recall, list_memories, forget = memory_tools(store, "ana")
    from agents.tool_context import ToolContext

    def ctx(name: str, args: dict[str, Any]) -> ToolContext[Any]:
        return ToolContext(
            context=None, tool_name=name, tool_call_id="c1", tool_arguments=json.dumps(args)
        )

    async def call(tool: Any, args: dict[str, Any]) -> str:
        return str(await tool.on_invoke_tool(ctx(tool.name, args), json.dumps(args)))

    assert await call(recall, {"query": "PIN hint cat"}) == "nothing relevant remembered"
    assert (await call(remember, {"text": "Ana likes cats", "kind": "preference"})).startswith(
        "saved memory"
    )
    listed = json.loads(await call(list_memories, {}))["memories"]
    assert [m["text"] for m in listed] == ["Ana likes cats"]
    assert await call(forget, {"memory_id": listed[0]["id"]}) == "deleted 1 memory"
    assert await call(forget, {}) == "give exactly one of memory_id or key"
    assert len(await store.list_memories("bob")) == 1
    await store.close()


async def test_input_filter_recalls_for_the_message_being_answered(tmp_path: Path) -> None:
    store = MemoryStore.from_url("sqlite://:memory:")
    await store.remember("ana", "Ana's passport number ends in 4471")
    session = MemorySession(InMemorySession("chat"), store=store, scope="ana")
    model = ScriptedModel(["Hello!", "It ends in 4471."])
    agent = Agent(name="assistant", model=model)
    config = RunConfig(tracing_disabled=True, call_model_input_filter=input_filter(session))
    await Runner.run(agent, "hello there", session=session, run_config=config)
    assert _developer(model.inputs[-1]) == []  # nothing relevant, no profile yet
    await Runner.run(
        agent, "What does my passport number end in?", session=session, run_config=config
    )
    [pinned] = _developer(model.inputs[-1])
    assert "4471" in pinned
    assert _developer(await session.inner.get_items()) == []
    await store.close()
