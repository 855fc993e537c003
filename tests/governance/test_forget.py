"""Forgetting a user on every store: no row of theirs left in any table memstack writes,
every other user intact, the erasure audited without the user's id."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from memstack import ConfigurationError, LayerSpec, UnknownUserError, build_stack
from memstack.audit import AuditTrail
from memstack.backends.sql import Query
from memstack.backends.whole_sql import SqlWholeStore
from memstack.backends.whole_store import WholeStore, whole_store
from memstack.crypto import generate_key
from memstack.governance import (
    LongTermMemoryEraser,
    SessionEraser,
    UserSessions,
    VaultEraser,
    forget,
    forget_user,
)
from memstack.redaction import reveal

from ..conftest import SHARED_BACKENDS, Store

KEY, AUDIT_KEY = generate_key(), generate_key()


def _stack(store: Store, session_id: str) -> Any:
    return build_stack(
        store.open(session_id),
        [
            LayerSpec("ttl", {"ttl": 3600}),
            LayerSpec("encrypted", {"key": KEY}),
            LayerSpec(
                "redact", {"strategies": {"email": "vault"}, "key": KEY, "audit_key": AUDIT_KEY}
            ),
        ],
    )


def _turn(user: str, n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"I am {user}.{n}@example.com"},
        {"type": "function_call", "call_id": f"c{n}", "name": "f", "arguments": '{"a": 1}'},
        {"type": "function_call_output", "call_id": f"c{n}", "output": "done"},
        {"role": "assistant", "content": "ok"},
    ]


async def _everything_stored(wide: WholeStore, store: Store) -> list[str]:
    """Every row of every table memstack writes (SQL), or every key and value (Redis)."""
    if isinstance(wide, SqlWholeStore):
        rows: list[str] = []
        t = wide.tables
        for table in (t.sessions, t.messages, t.vault, t.audit, t.user_keys):

            def dump(table: str = table) -> Any:
                return (yield Query(f"SELECT * FROM {table}"))

            rows += [json.dumps([str(v) for v in row]) for row in await wide.run(dump)]
        return rows
    client = wide.client  # type: ignore[attr-defined]
    found: list[str] = []
    async for raw in client.scan_iter(match=f"{store.redis_prefix}*"):
        key = raw.decode()
        kind = (await client.type(key)).decode()
        if kind == "hash":
            value: Any = await client.hgetall(key)
        elif kind == "list":
            value = await client.lrange(key, 0, -1)
        else:
            value = await client.get(key)
        found.append(key + " " + str(value))
    return found


@pytest.mark.parametrize("store", SHARED_BACKENDS, indirect=True)
async def test_forget_user_leaves_no_row_and_keeps_everyone_else(store: Store) -> None:
    tag = uuid.uuid4().hex[:8]
    ann, bob, annex = f"ann-{tag}", f"bob-{tag}", f"ann-{tag}x"  # annex: a prefix trap
    kept: dict[str, list[Any]] = {}
    for user, threads in ((ann, 2), (bob, 1), (annex, 1)):
        for thread in range(threads):
            session = _stack(store, f"{user}:t{thread}")
            await session.add_items(_turn(user, thread))
            kept[f"{user}:t{thread}"] = await session.get_items()

    wide = whole_store(store.open(f"{bob}:t0"))
    before = "\n".join(await _everything_stored(wide, store))
    assert f"{ann}:t0" in before and f"{ann}:t1" in before

    trail = AuditTrail(wide, key=AUDIT_KEY, actor="dpo@example")
    report = await forget(wide, ann, audit=trail)
    assert report.removed == {"user_keys": 0, "vault_entries": 2, "sessions": 2, "items": 8}
    assert report.audit is not None and report.audit.scope == trail.pseudonym(f"user:{ann}")

    after = await _everything_stored(wide, store)
    left = [row for row in after if f"{ann}:" in row or f"{ann}.0@" in row]
    assert left == []
    assert all(f"{ann}." not in row for row in after)  # no planted address, sealed or not
    for session_id in (f"{bob}:t0", f"{annex}:t0"):
        session = _stack(store, session_id)
        assert await session.get_items() == kept[session_id]
        revealed = await reveal(session.backend, kept[session_id], key=KEY)
        assert session_id.split(":")[0] + ".0@example.com" in revealed[0]["content"]
    [erasure] = await trail.read(1, scope=f"user:{ann}")
    assert erasure.action == "erase" and erasure.counts == report.removed

    with pytest.raises(UnknownUserError, match="nothing removed"):
        await forget(wide, ann)
    assert (await forget(wide, ann, missing_ok=True)).removed == {
        "user_keys": 0,
        "vault_entries": 0,
        "sessions": 0,
        "items": 0,
    }


async def test_erasers_are_idempotent_and_the_memory_hook_is_called(sqlite_store: Store) -> None:
    ann = f"ann-{uuid.uuid4().hex[:8]}"
    await _stack(sqlite_store, f"{ann}:t0").add_items(_turn(ann, 0))
    wide = whole_store(sqlite_store.open("admin"))
    scopes: list[str] = []

    async def forget_memories(scope: str) -> int:
        scopes.append(scope)
        return 2

    # A run that stopped after the vault: the next full run finishes the job.
    assert (await forget(wide, ann, erasers=[VaultEraser()])).removed == {"vault_entries": 1}
    erasers = [VaultEraser(), SessionEraser(), LongTermMemoryEraser(forget_memories)]
    report = await forget(wide, ann, erasers=erasers)
    assert report.removed == {"vault_entries": 0, "sessions": 1, "items": 4, "memories": 2}
    assert scopes == [ann]  # memory scopes are user ids
    assert "2 memories" in str(report)


def test_user_session_patterns() -> None:
    default = UserSessions()
    assert default.owns("ann", "ann:t1") and not default.owns("ann", "ann2:t1")
    assert not default.owns("ann", "ann") and default.user_of("bob:x:y") == "bob"
    custom = UserSessions("tenant-7/{user}/{thread}")
    assert custom.owns("ann", "tenant-7/ann/support") and not custom.owns("ann", "ann/support")
    whole = UserSessions("{user}")
    assert whole.owns("ann", "ann") and not whole.owns("ann", "ann:t1")
    with pytest.raises(ConfigurationError, match="contains ':'"):
        default.owns("ann:t1", "ann:t1:x")
    with pytest.raises(ConfigurationError, match="non-empty"):
        default.check_user(" ")
    for bad in ("{thread}", "{user}{thread}", "{user}:{user}", "{user}:{session}"):
        with pytest.raises(ConfigurationError):
            UserSessions(bad)


async def test_forget_user_from_a_recipe(tmp_path: Path) -> None:
    recipe = {
        "backend": {"url": f"sqlite:///{tmp_path / 'r.db'}"},
        "governance": {"user_sessions": "u/{user}/{thread}"},
        "layers": [{"layer": "redact"}],
    }
    from memstack import from_recipe

    for session_id in ("u/ann/1", "u/ann/2", "u/bob/1"):
        session = from_recipe(recipe, session_id=session_id)
        await session.add_items([{"role": "user", "content": "hi"}])
        session.backend.close()  # type: ignore[attr-defined]
    report = await forget_user(recipe, "ann", actor="tests")
    assert report.removed["sessions"] == 2 and report.removed["items"] == 2
    assert report.audit is not None and report.audit.scope == "-"  # no audit key: not recorded
    with pytest.raises(UnknownUserError):
        await forget_user(recipe, "ann")
