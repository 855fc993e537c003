"""Store-wide adapters over every backend that can address its other sessions."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from memstack import CapabilityError, LayerSpec, build_stack
from memstack.backends.whole_store import whole_store
from memstack.testing import InMemorySession

from ..conftest import SHARED_BACKENDS, Store


def _ids() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"ann-{tag}:t1", f"bob-{tag}:t1"


async def _side_store(store: Store):  # type: ignore[no-untyped-def]
    ann, bob = _ids()
    a, b = store.open(ann), store.open(bob)
    await a.add_items([{"role": "user", "content": "1"}, {"role": "user", "content": "2"}])
    await b.add_items([{"role": "user", "content": "3"}])
    return whole_store(a), ann, bob


@pytest.mark.parametrize("store", SHARED_BACKENDS, indirect=True)
async def test_lists_sessions_with_counts_and_last_activity(store: Store) -> None:
    wide, ann, bob = await _side_store(store)
    listed = {info.session_id: info for info in await wide.list_sessions()}
    assert listed[ann].items == 2 and listed[bob].items == 1
    now = datetime.now(UTC)
    for sid in (ann, bob):
        when = listed[sid].last_activity
        assert when is not None and abs(when - now) < timedelta(minutes=5), when
    assert "session_id" not in wide.where


@pytest.mark.parametrize("store", SHARED_BACKENDS, indirect=True)
async def test_delete_sessions_removes_rows_and_keeps_the_others(store: Store) -> None:
    wide, ann, bob = await _side_store(store)
    assert await wide.delete_sessions([ann, "nobody:t9"]) == 2
    listed = {info.session_id: info.items for info in await wide.list_sessions()}
    assert ann not in listed and listed[bob] == 1
    assert await store.open(bob).get_items() == [{"role": "user", "content": "3"}]
    assert await wide.delete_sessions([]) == 0


@pytest.mark.parametrize("store", SHARED_BACKENDS, indirect=True)
async def test_vault_and_audit_side_tables(store: Store) -> None:
    wide, ann, bob = await _side_store(store)
    await wide.vault_put(ann, {"0123456789abcdef": "sealed-1", "fedcba9876543210": "sealed-2"})
    await wide.vault_put(bob, {"00000000000000aa": "sealed-3"})
    assert await wide.vault_get(ann, ["0123456789abcdef", "missing"]) == {
        "0123456789abcdef": "sealed-1"
    }
    assert len(await wide.vault_all(ann)) == 2
    sessions = await wide.vault_sessions()
    assert sessions[ann] == 2 and sessions[bob] == 1
    assert await wide.vault_delete([ann]) == 2
    assert ann not in await wide.vault_sessions() and await wide.vault_all(bob)

    record = {
        "record_id": uuid.uuid4().hex,
        "at": time.time(),
        "action": "purge",
        "actor": "tests",
        "scope": "*",
        "counts": {"items": 3},
        "digest": None,
    }
    await wide.audit_append(record)
    assert record in await wide.audit_read(50)  # a shared database holds other tests' too


async def test_stores_that_cannot_list_say_so() -> None:
    with pytest.raises(CapabilityError, match="InMemorySession cannot list"):
        whole_store(InMemorySession("s"))
    stack = build_stack(InMemorySession("s"), [LayerSpec("passthrough")])
    with pytest.raises(CapabilityError):
        whole_store(stack)
