"""Capabilities over every backend: the same behaviour from every adapter."""

from __future__ import annotations

import asyncio

import pytest

from memstack import CapabilityError, GenericCapabilities, PassthroughSession, capabilities_of
from memstack.backends.capabilities import StorageCapabilities
from memstack.testing import sample_items

from ..conftest import Store


async def filled(store: Store, n: int = 10, name: str = "caps"):
    session = store.open(f"{name}-{id(store)}")
    await session.clear_session()
    items = sample_items(n)
    await session.add_items(items)
    return session, items


async def test_adapter_is_atomic_for_every_sdk_backend(store: Store):
    session, _ = await filled(store, 1)
    caps = capabilities_of(session)
    assert isinstance(caps, StorageCapabilities)
    assert caps.atomic, caps
    # Through a layer that does not transform items, the store's adapter is used.
    assert type(capabilities_of(PassthroughSession(session))) is type(caps)
    await session.clear_session()


async def test_count(store: Store):
    session, _ = await filled(store, 7)
    caps = capabilities_of(session)
    assert await caps.count() == 7
    other = store.open("caps-other")
    await other.add_items(sample_items(3, tag="o"))
    assert await caps.count() == 7
    await other.clear_session()
    await session.clear_session()
    assert await caps.count() == 0


async def test_delete_oldest(store: Store):
    session, items = await filled(store, 10)
    caps = capabilities_of(session)
    assert await caps.delete_oldest(4) == 4
    assert await session.get_items() == items[4:]
    assert await caps.delete_oldest(0) == 0
    assert await caps.delete_oldest(100) == 6
    assert await session.get_items() == []
    await session.add_items(items[:2])
    assert await session.get_items() == items[:2]
    await session.clear_session()


async def test_replace_oldest_keeps_position(store: Store):
    session, items = await filled(store, 8)
    caps = capabilities_of(session)
    summary = {"role": "system", "content": "summary of the first five"}
    assert await caps.replace_oldest(5, [summary], expect=items[:5])
    assert await session.get_items() == [summary, *items[5:]]
    # New writes still land after the replaced range.
    await session.add_items([{"role": "user", "content": "later"}])
    assert (await session.get_items())[-1] == {"role": "user", "content": "later"}
    assert await session.pop_item() == {"role": "user", "content": "later"}
    await session.clear_session()


async def test_replace_oldest_refuses_a_stale_snapshot(store: Store):
    session, items = await filled(store, 6)
    caps = capabilities_of(session)
    stale = [dict(items[0], content="not what is stored"), *items[1:3]]
    assert not await caps.replace_oldest(3, [{"role": "system", "content": "s"}], expect=stale)
    assert not await caps.replace_oldest(9, [], expect=None)  # fewer than n stored
    assert await session.get_items() == items
    with pytest.raises(CapabilityError, match="can shrink in place but not grow"):
        await caps.replace_oldest(1, items[:2])
    await session.clear_session()


async def test_delete_where_in_batches(store: Store):
    session, items = await filled(store, 23)
    caps = capabilities_of(session)
    is_call = lambda item: item.get("type") == "function_call"  # noqa: E731
    expected = [item for item in items if not is_call(item)]
    assert await caps.delete_where(is_call, batch_size=4) == 23 // 4 + 1
    assert await session.get_items() == expected
    await session.clear_session()


async def test_delete_where_prefix_only_stops_at_first_keeper(store: Store):
    session, items = await filled(store, 12)
    caps = capabilities_of(session)
    doomed = {id_ for id_ in range(5)}
    positions = {items[i]["call_id" if "call_id" in items[i] else "content"]: i for i in range(12)}

    def early(item):
        key = item.get("call_id") or item.get("content")
        return positions[key] in doomed or positions[key] == 8

    assert await caps.delete_where(early, batch_size=3, prefix_only=True) == 5
    assert await session.get_items() == items[5:]
    await session.clear_session()


async def test_concurrent_writes_survive_a_rewrite(store: Store):
    session, items = await filled(store, 40)
    caps = capabilities_of(session)
    extra = sample_items(20, tag="late")

    async def writer():
        for item in extra:
            await session.add_items([item])

    await asyncio.gather(caps.delete_oldest(30), writer())
    assert await session.get_items() == items[30:] + extra
    await session.clear_session()


async def test_generic_fallback_refuses_destructive_work_by_default():
    from ..sessions import PlainSession

    session = PlainSession()
    caps = capabilities_of(session)
    assert isinstance(caps, GenericCapabilities) and not caps.atomic
    await session.add_items(sample_items(4))
    assert await caps.count() == 4
    with pytest.raises(CapabilityError, match="PlainSession has no atomic delete_oldest"):
        await caps.delete_oldest(1)
    allowed = GenericCapabilities(session, allow_non_atomic=True)
    assert await allowed.delete_oldest(1) == 1
    assert len(await session.get_items()) == 3
    assert await allowed.delete_where(lambda i: "role" in i) == 1  # the assistant reply
    assert await allowed.replace_oldest(2, [{"role": "system", "content": "s"}])
    assert await session.get_items() == [{"role": "system", "content": "s"}]


async def test_generic_fallback_sees_the_whole_history_despite_a_session_limit(tmp_path):
    from agents.memory import SessionSettings, SQLiteSession

    class Subclassed(SQLiteSession):  # subclasses get the generic adapter
        pass

    session = Subclassed("s", db_path=tmp_path / "g.db", session_settings=SessionSettings(limit=3))
    items = sample_items(10)
    await session.add_items(items)
    caps = GenericCapabilities(session, allow_non_atomic=True)
    assert type(capabilities_of(session)) is GenericCapabilities
    assert await caps.count() == 10
    assert await caps.delete_oldest(1) == 1
    session.session_settings = SessionSettings()
    assert await session.get_items() == items[1:]
    session.close()
