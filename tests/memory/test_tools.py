"""``memory_tools`` answers within a token budget; oversized memories are refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents.tool_context import ToolContext

from memstack.errors import ConfigurationError, MemoryTooLargeError
from memstack.memory import MemoryStore, memory_tools
from memstack.tokens import TokenCounter

count = TokenCounter().count_text


async def call(tool: Any, args: dict[str, Any]) -> str:
    context: ToolContext[Any] = ToolContext(
        context=None, tool_name=tool.name, tool_call_id="c1", tool_arguments=json.dumps(args)
    )
    return str(await tool.on_invoke_tool(context, json.dumps(args)))


async def test_list_memories_pages_within_the_budget() -> None:
    store = MemoryStore.from_url("sqlite://:memory:")
    words = [f"Remembered fact number {i} about the user's garden and bicycles" for i in range(400)]
    await store.remember_many([store.new_memory("ana", text) for text in words])
    _, _, list_memories, _ = memory_tools(store, "ana", max_tokens=500)
    seen: list[str] = []
    offset: int | None = 0
    pages = 0
    while offset is not None:
        answer = await call(list_memories, {"offset": offset})
        assert count(answer) <= 500
        page = json.loads(answer)
        assert page["total"] == 400 and page["offset"] == offset
        seen += [m["text"] for m in page["memories"]]
        offset = page["next_offset"]
        pages += 1
    assert seen == words and pages > 10
    await store.close()


async def test_a_memory_longer_than_the_answer_budget_is_cut() -> None:
    store = MemoryStore.from_url("sqlite://:memory:", max_memory_tokens=None)
    await store.remember("ana", "word " * 200_000)
    _, recall, list_memories, _ = memory_tools(store, "ana", max_tokens=300)
    answer = await call(list_memories, {})
    assert count(answer) <= 300
    assert json.loads(answer)["memories"][0]["text"].endswith(" …")
    assert count(await call(recall, {"query": "word"})) <= 300
    await store.close()


async def test_remember_refuses_a_memory_no_recall_could_return() -> None:
    store = MemoryStore.from_url("sqlite://:memory:")
    with pytest.raises(MemoryTooLargeError, match="max_memory_tokens=1000") as caught:
        await store.remember("ana", "x" * 1_000_000)
    assert caught.value.tokens > 1000 and caught.value.limit == 1000
    assert await store.list_memories("ana") == []
    remember, _, _, _ = memory_tools(store, "ana")
    answer = await call(remember, {"text": "garden " * 5000})
    assert answer.startswith("not saved: a memory of 5000 tokens is longer than")
    await store.remember("ana", "garden " * 900)  # under the limit: stored
    with pytest.raises(ConfigurationError, match="max_memory_tokens must be"):
        MemoryStore.from_url("sqlite://:memory:", max_memory_tokens=0)
    await store.close()


def test_memory_tools_check_their_budget() -> None:
    with pytest.raises(ConfigurationError, match="max_tokens must be an int >= 100"):
        memory_tools(MemoryStore.from_url("sqlite://:memory:"), "ana", max_tokens=10)
