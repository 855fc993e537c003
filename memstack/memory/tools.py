"""Agent tools over a ``MemoryStore``: remember, recall, list and forget, for one scope.

    >>> from memstack.memory import MemoryStore, memory_tools
    >>> tools = memory_tools(MemoryStore.from_url("sqlite://:memory:"), "user-42")
    >>> sorted(tools[0].params_json_schema["properties"])
    ['key', 'kind', 'text']

The scope is bound when the tools are made, never chosen by the model: an agent serving
one user cannot read or erase another's memories. Memories the agent writes are
``explicit`` (the user said so) unless it passes ``inferred``; the audit trail names the
actor ``agent``.
"""

from __future__ import annotations

import json
from typing import Literal

from agents import FunctionTool, function_tool

from memstack.errors import MemstackError
from memstack.memory.store import MemoryStore

__all__ = ["memory_tools"]

_ACTOR = "agent"


def memory_tools(store: MemoryStore, scope: str, *, recall_tokens: int = 800) -> list[FunctionTool]:
    """SDK function tools bound to ``scope``; add them to any ``Agent(tools=...)``."""

    @function_tool
    async def remember(
        text: str,
        kind: Literal["preference", "fact", "procedure", "note"] = "fact",
        key: str | None = None,
    ) -> str:
        """Save something worth knowing about the user in later conversations.

        Args:
            text: The memory, as a short self-contained sentence.
            kind: preference, fact, procedure (how to do something for them) or note.
            key: Optional stable name (e.g. "home_city"); a new value replaces the old one.
        """
        try:
            memory = await store.remember(scope, text, kind=kind, key=key, actor=_ACTOR)
        except MemstackError as exc:
            return f"not saved: {exc.reason}"
        return f"saved memory {memory.id}"

    @function_tool
    async def recall(query: str) -> str:
        """Look up what you know about the user that is relevant to a question.

        Args:
            query: What you want to know, in a few words.
        """
        found = await store.recall(scope, query, max_tokens=recall_tokens)
        if not found:
            return "nothing relevant remembered"
        return "\n".join(f"[{m.id}] {m.text}" for m in found)

    @function_tool
    async def list_memories(kind: str | None = None) -> str:
        """List everything remembered about the user (ids, kinds, keys and texts).

        Args:
            kind: Only this kind (preference, fact, procedure, note); all when omitted.
        """
        try:
            memories = await store.list_memories(scope, kind=kind)
        except MemstackError as exc:
            return f"cannot list: {exc.reason}"
        return json.dumps(
            [{"id": m.id, "kind": m.kind, "key": m.key, "text": m.text} for m in memories],
            ensure_ascii=False,
        )

    @function_tool
    async def forget(memory_id: str | None = None, key: str | None = None) -> str:
        """Delete a memory the user wants gone, by its id or by its key.

        Args:
            memory_id: Id of the memory, as shown by recall or list_memories.
            key: Delete every memory stored under this key instead.
        """
        if (memory_id is None) == (key is None):
            return "give exactly one of memory_id or key"
        count = await store.forget(scope, memory_id, key=key, actor=_ACTOR)
        return f"deleted {count} memor{'y' if count == 1 else 'ies'}"

    return [remember, recall, list_memories, forget]
