"""Forgetting a user also erases their long-term memories, with the memory store's events:
no row of theirs left in the memory tables, every other user intact."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from memstack import LayerSpec, build_stack, open_backend
from memstack.crypto import generate_key
from memstack.governance import forget_user
from memstack.memory import MemoryStore

from ..memory.conftest import MEMORY_BACKENDS, memory_url

KEY = generate_key()


async def _memory_rows(store: MemoryStore, users: tuple[str, ...]) -> list[str]:
    """Rows of every memory table that mention one of ``users`` (the scope column)."""
    found = []
    tables = (store.tables.memories, store.tables.terms, store.tables.events)
    async with store.engine.connect() as conn:
        for table in tables:
            for row in (await conn.execute(text(f"SELECT * FROM {table.name}"))).all():
                line = json.dumps([str(value) for value in row])
                found += [line for user in users if user in line]
    return found


@pytest.mark.parametrize("backend", MEMORY_BACKENDS)
async def test_forget_user_erases_memories_and_their_events(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORGET_MEMORY_KEY", KEY)
    tag = uuid.uuid4().hex[:8]
    ann, bob = f"ann{tag}", f"bob{tag}"
    sessions_url = f"sqlite:///{tmp_path / 'sessions.db'}"
    recipe = tmp_path / "assistant.toml"
    recipe.write_text(
        f'[backend]\nurl = "{sessions_url}"\n\n'
        f'[memory]\nurl = "{memory_url(backend, tmp_path)}"\n'
        'key = { env = "FORGET_MEMORY_KEY" }\n\n'
        '[[layers]]\nlayer = "window"\nmax_items = 50\n'
    )
    for user in (ann, bob):
        stack = build_stack(open_backend(sessions_url, f"{user}:t1"), [LayerSpec("passthrough")])
        await stack.add_items([{"role": "user", "content": f"hi from {user}"}])
        stack.close()  # type: ignore[attr-defined]
    memory = MemoryStore.from_url(memory_url(backend, tmp_path), key=KEY)
    try:
        for user in (ann, bob):
            await memory.remember(user, f"{user} is vegetarian", kind="preference")
            await memory.remember(user, f"{user} lives in Lisbon", kind="fact")
        assert len(await _memory_rows(memory, (ann,))) >= 2

        report = await forget_user(str(recipe), ann)

        assert report.removed.get("memories") == 2, report
        assert report.removed.get("sessions") == 1, report
        assert await _memory_rows(memory, (ann,)) == []  # not even an event naming the scope
        left: Any = await memory.recall(bob, "where does bob live", max_tokens=200)
        assert any("Lisbon" in found.text for found in left)
        assert list(await memory.recall(ann, "vegetarian", max_tokens=200)) == []
    finally:
        await memory.forget(bob)
        await memory.close()
