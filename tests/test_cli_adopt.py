"""``memstack adopt``: a recipe's layers take over history the bare SDK store wrote."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from agents.memory import SQLiteSession

from memstack.crypto.envelope import is_envelope
from memstack.layers.ttl.record import MARKER

from .test_cli import history, memstack, one_line_error, recipe

__all__ = ["recipe"]  # the fixture, shared with test_cli


def write_bare(db: Path, session_id: str, items: list[object]) -> None:
    store = SQLiteSession(session_id, db_path=str(db))
    try:
        asyncio.run(store.add_items(items))  # type: ignore[arg-type]
    finally:
        store.close()


def stored_values(db: Path) -> dict[str, list[object]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT session_id, message_data FROM agent_messages ORDER BY id")
        values: dict[str, list[object]] = {}
        for session_id, data in rows:
            values.setdefault(session_id, []).append(json.loads(data))
    return values


def test_adopt_one_session_then_every_session(recipe: Path, tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    items = [json.loads(line) for line in history(tmp_path).read_text().splitlines()]
    for session_id in ("alice", "bob", "carol"):
        write_bare(db, session_id, items)

    one = memstack("adopt", str(recipe), "--session", "alice")
    assert one.returncode == 0, one.stderr
    assert "session 'alice': items adopted by TTLSession 5, EncryptedSession 5" in one.stdout
    exported = memstack("export", str(recipe), "--session", "alice")
    assert exported.returncode == 0, exported.stderr
    assert [json.loads(line) for line in exported.stdout.splitlines()] == items

    # Encryption stays loud over plaintext until adopted; a look (export) dates nothing.
    before = memstack("export", str(recipe), "--session", "bob")
    assert before.returncode == 1
    assert "plaintext" in one_line_error(before)

    every = memstack("adopt", str(recipe), "--all")
    assert every.returncode == 0, every.stderr
    assert "session 'alice': items adopted by TTLSession 0, EncryptedSession 0" in every.stdout
    assert "session 'bob': items adopted by TTLSession 5, EncryptedSession 5" in every.stdout
    assert "session 'carol': items adopted by TTLSession 5, EncryptedSession 5" in every.stdout
    assert "adopted 3 session(s)" in every.stdout
    values = stored_values(db)
    assert sorted(values) == ["alice", "bob", "carol"]
    for session_values in values.values():
        assert len(session_values) == 5
        # TTL is below encryption in this recipe: its records hold the sealed items.
        assert all(is_envelope(value["item"]) for value in session_values)  # type: ignore[index]
        assert all(MARKER in value for value in session_values)  # type: ignore[operator]
        assert "Where is order" not in json.dumps(session_values)


def test_adopt_needs_a_session_or_all(recipe: Path) -> None:
    result = memstack("adopt", str(recipe))
    assert result.returncode == 2
    assert "--session" in result.stderr and "--all" in result.stderr
