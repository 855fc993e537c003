"""Listing a store's sessions, for maintenance over a whole deployment."""

from __future__ import annotations

import uuid

import pytest

from memstack.backends.sessions import session_ids
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
        with pytest.raises(CapabilityError, match="cannot list its sessions"):
            await session_ids(probe)
        return
    listed = [name for name in await session_ids(probe) if name.startswith(prefix)]
    # Each in-memory SQLiteSession is a database of its own, holding its one session.
    assert listed == ([names[0]] if store.backend == "sqlite-memory" else sorted(names))
