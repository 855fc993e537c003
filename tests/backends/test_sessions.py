"""Listing a store's sessions, for maintenance over a whole deployment."""

from __future__ import annotations

import uuid

import pytest

from memstack.backends.whole_store import whole_store
from memstack.errors import CapabilityError

from ..conftest import Store


async def test_every_session_with_items_is_listed(store: Store) -> None:
    prefix = f"list-{uuid.uuid4().hex[:8]}"
    names = [f"{prefix}-b", f"{prefix}-a", f"{prefix}:with:colons"]
    for name in names:
        await store.open(name).add_items([{"role": "user", "content": name}])
    await store.open(f"{prefix}-empty").get_items()
    probe = store.open(names[0])
    if store.backend == "memory":
        with pytest.raises(CapabilityError):
            whole_store(probe)
        return
    infos = await whole_store(probe).list_sessions()
    listed = sorted(info.session_id for info in infos if info.session_id.startswith(prefix))
    # Each in-memory SQLiteSession is a database of its own, holding its one session.
    assert listed == ([names[0]] if store.backend == "sqlite-memory" else sorted(names))
