"""Bringing a stack's layers onto history written before they existed.

    >>> import asyncio
    >>> from memstack import LayerSpec, build_stack
    >>> from memstack.adoption import adopt_stack
    >>> from memstack.crypto import generate_key
    >>> from memstack.testing import InMemorySession
    >>> store = InMemorySession("user-42")
    >>> asyncio.run(store.add_items([{"role": "user", "content": "from before"}]))
    >>> stack = build_stack(store, [LayerSpec("ttl", {"ttl": 3600}),
    ...                             LayerSpec("encrypted", {"key": generate_key()})])
    >>> asyncio.run(adopt_stack(stack))
    {'TTLSession': 1, 'EncryptedSession': 1}
    >>> asyncio.run(stack.get_items())
    [{'role': 'user', 'content': 'from before'}]

Each layer that stores items in its own form has an ``adopt()`` method (TTL dates
unstamped items, encryption seals plaintext); views (compaction, windows) need none.
Layers adopt bottom up, so each reads what the layers below it already converted.
"""

from __future__ import annotations

from typing import Any

from agents.memory import Session

from memstack.base import SessionLayer, iter_chain

__all__ = ["adopt_stack"]


async def adopt_stack(stack: Session, *, allow_non_atomic: bool = False) -> dict[str, int]:
    """Run every layer's ``adopt()``, bottom up; how many items each converted, by layer."""
    counts: dict[str, int] = {}
    for session in reversed(list(iter_chain(stack))):
        adopt: Any = getattr(session, "adopt", None)
        if isinstance(session, SessionLayer) and callable(adopt):
            name = type(session).__name__
            counts[name] = counts.get(name, 0) + await adopt(allow_non_atomic=allow_non_atomic)
    return counts
