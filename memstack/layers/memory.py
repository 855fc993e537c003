"""Long-term memory in the prompt: one pinned developer message, recalled per turn.

    >>> import asyncio
    >>> from memstack.layers.memory import MemorySession
    >>> from memstack.memory import MemoryStore
    >>> from memstack.testing import InMemorySession
    >>> store = MemoryStore.from_url("sqlite://:memory:")
    >>> _ = asyncio.run(store.remember("ana", "Ana is vegetarian", kind="preference"))
    >>> session = MemorySession(InMemorySession("chat-1"), store=store, scope="ana")
    >>> asyncio.run(session.add_items([{"role": "user", "content": "Dinner ideas?"}]))
    >>> [item["role"] for item in asyncio.run(session.get_items())]
    ['developer', 'user']
    >>> len(asyncio.run(session.inner.get_items()))  # never written into the session
    1

The message holds memories recalled for the newest user message, topped up with the
scope's standing preferences, within ``max_tokens``, in precedence order
(``memstack.memory.ranking``). It is a developer message, so windows and compaction above
this layer keep it pinned; the layer is a view (``view_only``), so export and compaction
below it see only history.

The SDK reads a session before it stores the run's new input, so ``get_items`` can only
recall for the previous user message. To recall for the message being answered, also pass
``RunConfig(call_model_input_filter=memstack.input_filter(stack))``: the layer's
``filter_model_input`` then re-pins the block for the newest user message on each model call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agents.memory import Session

from memstack.backends.capabilities import Tail
from memstack.base import SessionLayer
from memstack.errors import ConfigurationError
from memstack.history import is_user_message
from memstack.memory.ranking import HEADER
from memstack.memory.store import MemoryStore
from memstack.pipeline import Need

if TYPE_CHECKING:
    from agents.run_context import RunContextWrapper

__all__ = ["MemorySession"]


def _text_of(item: Mapping[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            part.get("text", "") for part in content if isinstance(part, Mapping)
        ).strip()
    return ""


def latest_user_text(*histories: Sequence[Mapping[str, Any]]) -> str:
    """The newest user message's text, looking through ``histories`` in order."""
    for items in histories:
        for item in reversed(items):
            if is_user_message(item) and (text := _text_of(item)):
                return text
    return ""


# The block's budget when none is given, in tokens.
DEFAULT_MAX_TOKENS = 500


class MemorySession(SessionLayer):
    """Pins what is remembered about ``scope`` at the head of ``get_items()``."""

    layer_name = "memory"
    view_only = True

    def __init__(
        self,
        inner: Session,
        *,
        store: MemoryStore,
        scope: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        header: str = HEADER,
    ) -> None:
        super().__init__(inner)
        if not isinstance(store, MemoryStore):
            raise ConfigurationError(
                f"store must be a memstack.memory.MemoryStore, not {type(store).__name__}",
                layer=type(self).__name__,
            )
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 50:
            raise ConfigurationError(
                f"max_tokens must be an int >= 50, not {max_tokens!r}", layer=type(self).__name__
            )
        if not isinstance(header, str) or not header:  # "" would mark every developer item
            raise ConfigurationError(
                f"header must be a non-empty string, not {header!r}", layer=type(self).__name__
            )
        if scope is not None and (not isinstance(scope, str) or not scope):
            raise ConfigurationError(
                f"scope must be a non-empty string, not {scope!r}", layer=type(self).__name__
            )
        self.store = store
        self.scope = scope if scope is not None else self.session_id
        self.max_tokens = max_tokens
        self.header = header
        # A run calls the model several times for one user message: recall once for it.
        self._last_query: str | None = None
        self._last_item: dict[str, Any] | None = None

    def repr_options(self) -> dict[str, object]:
        return {"scope": self.scope, "max_tokens": self.max_tokens}

    def _is_ours(self, item: Mapping[str, Any]) -> bool:
        content = item.get("content")
        return (
            item.get("role") == "developer"
            and isinstance(content, str)
            and content.startswith(self.header)
        )

    async def memory_item(self, query: str) -> dict[str, Any] | None:
        """The developer message for ``query``, or None when nothing is remembered."""
        recalled = await self.store.recall(
            self.scope, query, max_tokens=self.max_tokens, header=self.header, profile=True
        )
        if not recalled:
            return None
        return {"role": "developer", "content": recalled.text}

    async def filter_model_input(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The model input with this layer's block recalled for its newest user message."""
        rest = [item for item in items if not self._is_ours(item)]
        query = latest_user_text(rest)
        if query != self._last_query:
            self._last_query, self._last_item = query, await self.memory_item(query)
        return rest if self._last_item is None else [dict(self._last_item), *rest]

    async def shape(self, below: Tail, wrapper: RunContextWrapper[Any] | None) -> Tail | Need:
        """The block, then the history: the block is the oldest item of the view, so only
        a whole history shows it (``limit`` counts it, as the SDK counts items)."""
        if not below.complete:
            return below
        turn_input = list(getattr(wrapper, "turn_input", None) or [])
        pinned = await self.memory_item(latest_user_text(turn_input, below.items))
        if pinned is None:
            return below
        return Tail(
            [pinned, *below.items],
            [None, *below.written_at],
            [None, *below.keys],
            complete=True,
            reach=below.reach,
        )

    async def write(self, items: Sequence[Any], wrapper: RunContextWrapper[Any] | None) -> None:
        # A caller that echoes the view back (a session_input_callback) must not store it.
        kept = [item for item in items if not self._is_ours(item)]
        if kept or not items:
            await self.write_below(kept, wrapper)
