"""``memstack/memory/forgetting.py`` and its facade: arguments are checked before the database."""

from __future__ import annotations

import pytest

from memstack.errors import BackendError, ConfigurationError
from memstack.memory import MemoryStore
from memstack.testing import FakeClock


async def test_bad_arguments_fail_before_the_database_is_touched() -> None:
    # Nothing listens on port 1: any database access fails at once with a BackendError
    # (a SQLite file in a missing folder fails too, but aiosqlite's worker thread then
    # reports into the closed loop of the next test).
    store = MemoryStore.from_url("postgresql://postgres@127.0.0.1:1/test", embedder=None)
    try:
        with pytest.raises(ConfigurationError, match="scope"):
            await store.forget("")
        with pytest.raises(ConfigurationError, match="memory_id or key, not both"):
            await store.forget("ana", "m1", key="diet")
        with pytest.raises(ConfigurationError, match="scope"):
            await store.erase("")
        with pytest.raises(ConfigurationError, match="needs a store with an embedder"):
            await store.embed_missing("ana")
        with pytest.raises(ConfigurationError, match="needs a store opened with a key"):
            await store.rotate()
        with pytest.raises(BackendError, match="preparing the memory tables"):
            await store.forget("ana")
    finally:
        await store.close()


async def test_forget_by_key_takes_current_and_superseded_and_nothing_else(
    memory: MemoryStore, scope: str, clock: FakeClock
) -> None:
    await memory.write(scope, "diet", "Vegetarian")
    clock.tick(1)
    await memory.write(scope, "diet", "Vegan")
    kept = await memory.write(scope, "city", "Lyon")
    assert await memory.delete(scope, "diet") == 2
    assert [m.id for m in await memory.list_memories(scope, include_inactive=True)] == [kept.id]
    assert await memory.keys(scope) == ["city"]


async def test_purge_expired_deletes_only_what_has_expired(
    memory: MemoryStore, scope: str, clock: FakeClock
) -> None:
    short = await memory.remember(scope, "In Tokyo this week", expires_at=clock() + 60)
    later = await memory.remember(scope, "In Osaka next month", expires_at=clock() + 3600)
    clock.tick(61)
    assert await memory.purge_expired(scope, actor="retention") == 1
    remaining = await memory.list_memories(scope, include_inactive=True)
    assert [m.id for m in remaining] == [later.id]
    assert [(e.action, e.actor) for e in await memory.history(short.id)][-1] == (
        "expired",
        "retention",
    )
    # "In Osaka next month" is near "Tokyo" in meaning; the expired memory is gone.
    assert "Tokyo" not in (await memory.recall(scope, "Tokyo")).text
