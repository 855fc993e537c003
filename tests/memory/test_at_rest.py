"""No plaintext at rest: forget leaves nothing behind; with a key nothing is written in clear."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from memstack.crypto import Keyring, generate_key
from memstack.errors import DecryptionError
from memstack.memory import MemoryStore

from ..conftest import POSTGRES_URL, require_service

SECRET = "Zanzibarquux"


async def _file_bytes(path: Path) -> bytes:
    data = await asyncio.to_thread(path.read_bytes)
    journal = path.with_name(path.name + "-journal")
    if journal.exists():
        data += await asyncio.to_thread(journal.read_bytes)
    return data


async def test_forget_scope_leaves_no_plaintext_in_the_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    store = MemoryStore.from_url(f"sqlite:///{db}")
    for n in range(30):
        await store.remember("ana", f"{SECRET} note number {n} " * 5, key=f"k{n}")
    await store.remember("bob", "Bob likes sailing")
    await store.close()
    assert SECRET.encode() in await _file_bytes(db)

    store = MemoryStore.from_url(f"sqlite:///{db}")
    assert await store.forget("ana") == 30
    assert not await store.recall("ana", SECRET)
    await store.close()
    data = await _file_bytes(db)
    assert SECRET.encode() not in data
    assert SECRET.lower().encode() not in data
    assert b"Bob likes sailing" in data  # other scopes untouched


async def test_forget_scope_vacuums_postgresql(tmp_path: Path) -> None:
    require_service("PostgreSQL", POSTGRES_URL)
    store = MemoryStore.from_url(POSTGRES_URL)
    # A scope and marker of this run's own: other runs share the test database.
    run = uuid.uuid4().hex[:8]
    marker, scope = f"{SECRET}{run}", f"pg-forget-{run}"
    try:
        for n in range(50):
            await store.remember(scope, f"{marker} fact {n}")
        assert await store.forget(scope) == 50
        # Other clients of the shared test database may hold snapshots that still see the
        # deleted rows; the rewrite can drop them only once those end.
        # Generous (two minutes): the wait is for other clients, never what is checked.
        deadline = time.monotonic() + 120
        while await _tables_holding(store, marker) and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            await store.scrub()
        assert await _tables_holding(store, marker) == []
    finally:
        await store.close()


async def _tables_holding(store: MemoryStore, marker: str) -> list[str]:
    holding = []
    async with store.engine.connect() as conn:
        await conn.execute(text("CHECKPOINT"))
        for table in (store.tables.memories, store.tables.terms, store.tables.events):
            path = (
                await conn.execute(text(f"SELECT pg_relation_filepath('{table.name}')"))
            ).scalar()
            raw = (await conn.execute(text(f"SELECT pg_read_binary_file('{path}')"))).scalar()
            if marker.encode() in raw:
                holding.append(table.name)
    return holding


async def test_with_a_key_no_text_is_stored_in_clear(tmp_path: Path) -> None:
    db = tmp_path / "enc.db"
    key = generate_key()
    store = MemoryStore.from_url(f"sqlite:///{db}", key=key)
    await store.remember("ana", f"{SECRET} is the wifi password", key="wifi")
    found = await store.recall("ana", f"what is the {SECRET.lower()} wifi")
    assert [m.text for m in found] == [f"{SECRET} is the wifi password"]
    assert (await store.read("ana", "wifi")) is not None
    await store.close()
    data = await _file_bytes(db)
    for word in (SECRET, SECRET.lower(), "wifi", "password"):
        assert word.encode() not in data

    wrong = MemoryStore.from_url(f"sqlite:///{db}", key=generate_key())
    # Other key, other digests: a recall would match nothing, so it is refused instead.
    with pytest.raises(DecryptionError, match="key id"):
        await wrong.recall("ana", "wifi")
    with pytest.raises(DecryptionError, match="key id"):
        await wrong.list_memories("ana")
    await wrong.close()

    plain = MemoryStore.from_url(f"sqlite:///{db}")
    with pytest.raises(DecryptionError, match="without a key"):
        await plain.list_memories("ana")
    await plain.close()


async def test_rotation_keeps_memories_searchable(tmp_path: Path) -> None:
    db = tmp_path / "rot.db"
    old, new = generate_key(), generate_key()
    store = MemoryStore.from_url(f"sqlite:///{db}", key=old)
    await store.remember("ana", "Ana plays the cello", key="instrument")
    await store.close()

    both = MemoryStore.from_url(f"sqlite:///{db}", keyring=Keyring.of(new, old))
    assert [m.text for m in await both.recall("ana", "cello")] == ["Ana plays the cello"]
    assert await both.rotate() == 1
    await both.close()

    only_new = MemoryStore.from_url(f"sqlite:///{db}", key=new)
    assert [m.text for m in await only_new.recall("ana", "cello")] == ["Ana plays the cello"]
    assert (await only_new.read("ana", "instrument")) is not None
    await only_new.close()
