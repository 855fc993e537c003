"""An in-memory Session with atomic capabilities, for tests and examples."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agents.memory import SessionSettings

from memstack.backends.capabilities import (
    Item,
    Predicate,
    StorageCapabilities,
    check_replacement,
    kept_after_delete,
)
from memstack.history import validate_items

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.run_context import RunContextWrapper


class InMemorySession:
    """A Session kept in a list; items are stored as JSON like a real store keeps them.

    It declares the SDK's ``wrapper`` argument and records the last one it was given
    (``last_wrapper``), so tests can check that layers forward it.
    """

    def __init__(self, session_id: str, *, session_settings: SessionSettings | None = None) -> None:
        self.session_id = session_id
        self.session_settings: SessionSettings | None = session_settings or SessionSettings()
        self.rows: list[str] = []
        self.last_wrapper: RunContextWrapper[Any] | None = None

    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        self.last_wrapper = wrapper
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        rows = self.rows if limit is None else self.rows[-limit:] if limit > 0 else []
        return [json.loads(row) for row in rows]

    async def add_items(
        self, items: list[TResponseInputItem], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        self.last_wrapper = wrapper
        validate_items(items, layer=type(self).__name__)
        self.rows.extend(json.dumps(item) for item in items)

    async def pop_item(
        self, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> TResponseInputItem | None:
        self.last_wrapper = wrapper
        return json.loads(self.rows.pop()) if self.rows else None

    async def clear_session(self, *, wrapper: RunContextWrapper[Any] | None = None) -> None:
        self.last_wrapper = wrapper
        self.rows.clear()

    def storage_capabilities(self) -> StorageCapabilities:
        return InMemoryCapabilities(self)

    def __repr__(self) -> str:
        return f"InMemorySession(session_id={self.session_id!r})"


class InMemoryCapabilities(StorageCapabilities):
    """Atomic by construction: no operation awaits between its read and its write."""

    session: InMemorySession

    async def count(self) -> int:
        return len(self.session.rows)

    async def delete_oldest(self, n: int) -> int:
        n = max(0, min(n, len(self.session.rows)))
        del self.session.rows[:n]
        return n

    async def replace_oldest(
        self, n: int, items: Sequence[Item], *, expect: Sequence[Item] | None = None
    ) -> bool:
        check_replacement(n, items)
        rows = self.session.rows
        if len(rows) < n or (
            expect is not None and [json.loads(row) for row in rows[:n]] != list(expect)
        ):
            return False
        rows[:n] = [json.dumps(item) for item in items]
        return True

    async def delete_where(
        self, predicate: Predicate, *, batch_size: int = 500, prefix_only: bool = False
    ) -> int:
        rows = self.session.rows
        keep = kept_after_delete(
            rows, lambda row: predicate(json.loads(row)), prefix_only=prefix_only
        )
        deleted = len(rows) - len(keep)
        rows[:] = keep
        return deleted
