"""Agent tools over a ``MemoryStore``: remember, recall, list and forget, for one scope.

    >>> from memstack.memory import MemoryStore, memory_tools
    >>> tools = memory_tools(MemoryStore.from_url("sqlite://:memory:"), "user-42")
    >>> sorted(tools[0].params_json_schema["properties"])
    ['key', 'kind', 'text']

The scope is bound when the tools are made, never chosen by the model: an agent serving
one user cannot read or erase another's memories. Memories the agent writes are
``explicit`` (the user said so) unless it passes ``inferred``; the audit trail names the
actor ``agent``. Every tool answers within ``max_tokens``: ``list_memories`` shows a page
that fits and the ``offset`` of the next, so a scope of thousands of memories cannot
flood the model's context.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from agents import FunctionTool, function_tool

from memstack.errors import ConfigurationError, MemstackError
from memstack.memory.store import MemoryStore

__all__ = ["memory_tools"]

_ACTOR = "agent"
_MORE = " …"


def _cut(text: str, budget: int, count: Callable[[str], int]) -> str:
    """``text``, or its longest prefix (marked ``…``) of at most ``budget`` tokens."""
    if count(text) <= budget:
        return text
    # A token rarely spans more than eight characters: bisect within that prefix only, so
    # a megabyte answer costs a few counts of kilobytes.
    low, high = 0, min(len(text), 8 * budget)
    while low < high:
        middle = (low + high + 1) // 2
        if count(text[:middle] + _MORE) <= budget:
            low = middle
        else:
            high = middle - 1
    return text[:low] + _MORE


def _page(
    entries: list[dict[str, Any]], offset: int, budget: int, count: Callable[[str], int]
) -> str:
    """As many ``entries`` from ``offset`` as fit ``budget`` tokens, as JSON, and where next."""
    shown: list[dict[str, Any]] = []

    def render(next_offset: int | None) -> str:
        page = {"memories": shown, "total": len(entries), "offset": offset}
        return json.dumps({**page, "next_offset": next_offset}, ensure_ascii=False)

    used = count(render(len(entries)))  # the frame, with the widest next_offset
    end = offset
    for entry in entries[offset:]:
        cost = count(json.dumps(entry, ensure_ascii=False)) + 1  # and the ", " before it
        if used + cost > budget:
            break
        shown.append(entry)
        used += cost
        end += 1
    if not shown and end < len(entries):  # one memory longer than the budget: its beginning
        text = str(entries[end]["text"])
        shown.append({**entries[end], "text": ""})
        end += 1
        frame = count(render(end if end < len(entries) else None))
        shown[0]["text"] = _cut(text, max(budget - frame - 2, 1), count)  # 2: text boundaries
    # Tokens of a whole are not quite the sum of its parts' tokens: check the whole.
    while len(shown) > 1 and count(render(end if end < len(entries) else None)) > budget:
        shown.pop()
        end -= 1
    return render(end if end < len(entries) else None)


def memory_tools(
    store: MemoryStore, scope: str, *, recall_tokens: int = 800, max_tokens: int = 1000
) -> list[FunctionTool]:
    """SDK function tools bound to ``scope``; add them to any ``Agent(tools=...)``.

    ``recall_tokens`` is the budget of what ``recall`` looks up, ``max_tokens`` the most
    any tool answers with (``list_memories`` pages; a longer answer is cut).
    """
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 100:
        raise ConfigurationError(
            f"max_tokens must be an int >= 100, not {max_tokens!r}", layer="memory_tools"
        )
    count = store.count_tokens

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
            return _cut(f"not saved: {exc.reason}", max_tokens, count)
        return f"saved memory {memory.id}"

    @function_tool
    async def recall(query: str) -> str:
        """Look up what you know about the user that is relevant to a question.

        Args:
            query: What you want to know, in a few words.
        """
        found = await store.recall(scope, query, max_tokens=min(recall_tokens, max_tokens))
        if not found:
            return "nothing relevant remembered"
        return _cut("\n".join(f"[{m.id}] {m.text}" for m in found), max_tokens, count)

    @function_tool
    async def list_memories(kind: str | None = None, offset: int = 0) -> str:
        """List what is remembered about the user (ids, kinds, keys and texts), a page at a time.

        Args:
            kind: Only this kind (preference, fact, procedure, note); all when omitted.
            offset: Where the page starts; pass the previous answer's next_offset for more.
        """
        try:
            memories = await store.list_memories(scope, kind=kind)
        except MemstackError as exc:
            return f"cannot list: {exc.reason}"
        entries = [{"id": m.id, "kind": m.kind, "key": m.key, "text": m.text} for m in memories]
        return _page(entries, min(max(offset, 0), len(entries)), max_tokens, count)

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
