"""A Session written against the SDK protocol alone: no ``wrapper``, no capabilities adapter.

Stands for a user's own (or an older) session class: layers must work over it, forward no
``wrapper`` to it, and fall back to ``GenericCapabilities`` for it.
"""

from __future__ import annotations

from typing import Any


class PlainSession:
    def __init__(self, session_id: str = "plain") -> None:
        self.session_id = session_id
        self.session_settings = None
        self.items: list[Any] = []

    async def get_items(self, limit: int | None = None) -> list[Any]:
        if limit is None:
            return list(self.items)
        return self.items[-limit:] if limit > 0 else []

    async def add_items(self, items: list[Any]) -> None:
        self.items.extend(items)

    async def pop_item(self) -> Any:
        return self.items.pop() if self.items else None

    async def clear_session(self) -> None:
        self.items.clear()
