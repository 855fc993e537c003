"""``delete_written_before``: deleting by the store's own write time, on every backend."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from memstack import CapabilityError, GenericCapabilities, PassthroughSession, capabilities_of
from memstack.backends.capabilities import kept_after_delete
from memstack.testing import InMemorySession, sample_items

from ..conftest import SQL_BACKENDS, Store
from ..direct import backdate, stored


async def test_deletes_only_rows_the_store_wrote_before_the_cutoff(store: Store) -> None:
    session_id = f"written-{uuid.uuid4().hex[:8]}"
    session = store.open(session_id)
    other = store.open(f"{session_id}-other")
    items = sample_items(7)
    await session.add_items(items)
    await other.add_items(sample_items(2, tag="o"))
    caps = capabilities_of(PassthroughSession(session))  # unchanged items: the store's own
    if store.backend not in SQL_BACKENDS:
        with pytest.raises(CapabilityError, match="no per-item write time"):
            await caps.delete_written_before(60)
        return

    assert await caps.delete_written_before(3600) == 0
    await backdate(store, session_id, 5)
    assert await caps.delete_written_before(3600, batch_size=2) == 5  # three batches
    assert await stored(store, session_id) == items[5:]
    assert await session.get_items() == items[5:]
    assert len(await other.get_items()) == 2  # other sessions keep theirs


async def test_generic_and_in_memory_stores_refuse() -> None:
    with pytest.raises(CapabilityError, match="InMemorySession keeps no per-item write time"):
        await capabilities_of(InMemorySession("s")).delete_written_before(1)

    class Bare:
        session_id = "bare"
        session_settings = None

        async def get_items(self, limit: int | None = None) -> list[Any]:
            return []

        async def add_items(self, items: list[Any]) -> None: ...
        async def pop_item(self) -> Any: ...
        async def clear_session(self) -> None: ...

    caps = capabilities_of(Bare())  # type: ignore[arg-type]
    assert isinstance(caps, GenericCapabilities)
    with pytest.raises(CapabilityError, match="no per-item write time"):
        await caps.delete_written_before(1)


@pytest.mark.parametrize("prefix_only", [False, True])
def test_kept_after_delete_asks_each_item_once(prefix_only: bool) -> None:
    asked: list[int] = []

    def matches(item: int) -> bool:
        asked.append(item)
        return item % 2 == 0

    assert kept_after_delete([0, 2, 3, 4, 5], matches, prefix_only=prefix_only) == (
        [3, 4, 5] if prefix_only else [3, 5]
    )
    assert asked == ([0, 2, 3] if prefix_only else [0, 2, 3, 4, 5])
    asked.clear()
    assert kept_after_delete([0, 2], matches, prefix_only=prefix_only) == []
    assert asked == [0, 2]
