"""RedactSession: nothing planted reaches the disk, pairs stay valid, block, vault, audit,
capabilities, the contract and the Runner over every backend."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.memory import SQLiteSession

from memstack import (
    CapabilityError,
    ConfigurationError,
    ContentBlockedError,
    DecryptionError,
    LayerSpec,
    RedactSession,
    build_stack,
    capabilities_of,
)
from memstack.backends.whole_store import whole_store
from memstack.crypto import Keyring, generate_key
from memstack.history import history_problems
from memstack.layers import EncryptedSession, TTLSession
from memstack.redaction import reveal
from memstack.testing import CONTRACT_CHECKS, InMemorySession, ScriptedModel, ToolCall

from ..conftest import BACKENDS, Store, runner_conversation
from ..redaction.planted import planted_conversation, spellings

KEY = generate_key()


def _skeleton(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (item.get("type"), item.get("role"), item.get("id"), item.get("call_id"), item.get("name"))
        for item in items
    ]


def _database_bytes(path: Path) -> bytes:
    files = [p for p in path.parent.iterdir() if p.name.startswith(path.name)]
    return b"".join(p.read_bytes() for p in files)


# -- the acceptance test: 200 planted messages over SQLite --------------------------------


async def test_nothing_planted_reaches_the_sqlite_files(tmp_path: Path) -> None:
    items, planted = planted_conversation(200)
    assert len(planted) == 600
    db = tmp_path / "chat.db"
    store = SQLiteSession("ann:t1", db_path=db)
    session = RedactSession(store)
    for start in range(0, len(items), 8):  # batches of two user turns, as a Runner adds them
        await session.add_items(items[start : start + 8])

    stored = await session.get_items()
    wal_files = sorted(p.name for p in tmp_path.glob("chat.db*"))  # noqa: ASYNC240
    assert "chat.db-wal" in wal_files, wal_files  # the journal is part of what is checked
    for when in ("open", "closed"):
        data = _database_bytes(db)
        leaked = [value for value in planted if any(form in data for form in spellings(value))]
        assert leaked == [], (when, leaked[:3])
        store.close()

    assert history_problems(stored) == []
    assert _skeleton(stored) == _skeleton(items)  # ids, call ids, types and names untouched
    for item in stored:
        if item.get("type") == "function_call":
            json.loads(item["arguments"])  # still valid JSON
        if item.get("type") == "function_call_output" and item["output"].startswith("{"):
            json.loads(item["output"])
    assert "[EMAIL]" in json.dumps(stored) and "[PRIVATE_KEY]" in json.dumps(stored)


async def test_redaction_is_idempotent_and_leaves_clean_items_alone() -> None:
    store = InMemorySession("s")
    session = RedactSession(store)
    clean = [{"role": "user", "content": "order A-1042, 3 items, version 1.2.3, 2024-01-15"}]
    await session.add_items(clean)
    once = await session.get_items()
    assert once == clean
    await session.add_items([{"role": "user", "content": "mail a@b.io"}])
    twice = RedactSession(InMemorySession("t"))
    await twice.add_items(await session.get_items())
    assert await twice.get_items() == await session.get_items()


# -- strategies through the layer -----------------------------------------------------------


async def test_block_raises_and_stores_nothing(sqlite_store: Store) -> None:
    backend = sqlite_store.open("ann:block")
    session = RedactSession(backend, strategies={"secrets": "block"}, key=KEY, audit_key=KEY)
    await session.add_items([{"role": "user", "content": "hello"}])
    batch = [
        {"role": "user", "content": "my key is AKIAIOSFODNN7EXAMPLE, mail a@b.io"},
        {"role": "assistant", "content": "ok"},
    ]
    with pytest.raises(ContentBlockedError) as caught:
        await session.add_items(batch)
    assert caught.value.counts == {"aws_key": 1}
    assert "AKIA" not in str(caught.value) and "RedactSession" in str(caught.value)
    assert await session.get_items() == [{"role": "user", "content": "hello"}]
    records = await whole_store(backend).audit_read(10)
    assert records == []  # a refused batch is not a redaction


async def test_mask_and_hash() -> None:
    store = InMemorySession("s")
    session = RedactSession(store, strategies={"card": "mask", "email": "hash"}, key=KEY)
    await session.add_items([{"role": "user", "content": "4111 1111 1111 1111 / ann@example.com"}])
    content = (await session.get_items())[0]["content"]
    assert content.startswith("**** **** **** 1111 / [EMAIL:")
    other = RedactSession(InMemorySession("t"), strategies={"email": "hash"}, key=KEY)
    await other.add_items([{"role": "user", "content": "ann@example.com"}])
    linked = (await other.get_items())[0]["content"]
    assert content.endswith(linked)  # same key, same token: linkable across sessions
    stranger = RedactSession(InMemorySession("u"), strategies={"email": "hash"}, key=generate_key())
    await stranger.add_items([{"role": "user", "content": "ann@example.com"}])
    assert (await stranger.get_items())[0]["content"] != linked


# InMemorySession has no side tables (see the next test).
@pytest.mark.parametrize("store", [b for b in BACKENDS if b != "memory"], indirect=True)
async def test_vault_round_trip_on_every_backend(store: Store) -> None:
    sid = f"ann-{uuid.uuid4().hex[:8]}:t1"
    base = store.open(sid)
    session = build_stack(
        base,
        [
            LayerSpec("encrypted", {"key": KEY}),
            LayerSpec("redact", {"strategies": {"email": "vault", "card": "vault"}, "key": KEY}),
        ],
    )
    original = [
        {"role": "user", "content": "ann@example.com, card 4111 1111 1111 1111"},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "mail",
            "arguments": json.dumps({"to": "ann@example.com"}),
        },
        {"type": "function_call_output", "call_id": "c1", "output": "sent"},
    ]
    await session.add_items(original)
    stored = await session.get_items()
    assert "ann@example.com" not in json.dumps(stored) and ":vault:" in json.dumps(stored)
    assert await reveal(base, stored, key=KEY) == [
        {**original[0]},
        {**original[1], "arguments": '{"to":"ann@example.com"}'},
        original[2],
    ]
    with pytest.raises(DecryptionError):
        await reveal(base, stored, key=generate_key())
    assert len(await whole_store(base).vault_all(sid)) == 3
    await session.clear_session()
    assert await whole_store(base).vault_all(sid) == {}
    assert await reveal(base, stored, key=KEY) == stored  # gone: tokens stay tokens


async def test_rotate_vault_reseals_under_the_active_key(sqlite_store: Store) -> None:
    old, new = generate_key(), generate_key()
    base = sqlite_store.open("ann:rotate")
    before = RedactSession(base, strategies={"email": "vault"}, key=old)
    await before.add_items([{"role": "user", "content": "a@b.io"}])
    stored = await before.get_items()
    after = RedactSession(base, strategies={"email": "vault"}, keyring=Keyring.of(new, old))
    assert after.vaults and await after.rotate_vault() == 1
    assert await after.rotate_vault() == 0
    assert (await reveal(base, stored, key=new))[0]["content"] == "a@b.io"
    with pytest.raises(DecryptionError):
        await reveal(base, stored, key=old)


async def test_vault_needs_a_key_and_a_store_with_side_tables() -> None:
    with pytest.raises(ConfigurationError, match="vault strategy needs key"):
        RedactSession(InMemorySession("s"), strategies={"email": "vault"})
    session = RedactSession(InMemorySession("s"), strategies={"email": "vault"}, key=KEY)
    with pytest.raises(CapabilityError, match="side tables"):
        await session.add_items([{"role": "user", "content": "a@b.io"}])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"strategies": {"email": "shred"}}, "unknown strategy 'shred'"),
        ({"strategies": {"emails": "mask"}}, "'emails' is not a detector in use"),
        ({"strategies": {"email": "hash"}}, "hash strategy needs a key"),
        ({"detectors": ["email", "ssn"]}, "unknown detector 'ssn'"),
        ({"patterns": {"order": "("}}, "not a valid regex"),
        ({"patterns": {"email": "x"}}, "shadow a built-in"),
        ({"audit": "yes"}, "audit must be True or False"),
        ({"key": "password123"}, "must be 32 random bytes"),
        ({"presidio": True}, "pip install memstack[presidio]"),
    ],
)
def test_bad_options_name_the_layer(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match="RedactSession") as caught:
        RedactSession(InMemorySession("s"), **options)
    assert message in str(caught.value)


async def test_custom_patterns_and_detector_subset() -> None:
    session = RedactSession(
        InMemorySession("s"),
        detectors=["email"],
        patterns={"order_id": r"\bA-\d{4}\b"},
        strategies={"order_id": "mask"},
    )
    await session.add_items([{"role": "user", "content": "A-1042 from a@b.io at 10.0.0.1"}])
    # A mask never shows more than a quarter of a short value.
    assert (await session.get_items())[0]["content"] == "*-***2 from [EMAIL] at 10.0.0.1"


# -- audit ---------------------------------------------------------------------------------


async def test_hits_are_audited_with_counts_and_a_keyed_digest(sqlite_store: Store) -> None:
    backend = sqlite_store.open("ann:audit")
    session = RedactSession(backend, audit_key=KEY, actor="tests")
    await session.add_items([{"role": "user", "content": "a@b.io and c@d.io, 4111 1111 1111 1111"}])
    await session.add_items([{"role": "user", "content": "nothing here"}])
    [record] = await whole_store(backend).audit_read(10)
    assert record["action"] == "redact" and record["actor"] == "tests"
    assert record["counts"] == {"email": 2, "card": 1}
    assert record["scope"].startswith("p:") and "ann" not in json.dumps(record)
    assert record["digest"] and "a@b.io" not in json.dumps(record)


# -- capabilities, contract, Runner --------------------------------------------------------


async def test_rewrites_through_capabilities_are_redacted() -> None:
    store = InMemorySession("s")
    session = RedactSession(store)
    await session.add_items(
        [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
    )
    caps = capabilities_of(session)
    summary = {"role": "user", "content": "summary: the user is a@b.io"}
    assert await caps.replace_oldest(2, [summary])
    assert await session.get_items() == [
        {"role": "user", "content": "summary: the user is [EMAIL]"}
    ]
    assert caps.atomic and await caps.count() == 1


async def test_write_times_cross_redaction_and_derived_items_are_redacted() -> None:
    """store → TTL → Encrypted → Redact: a summary written above keeps its sources' date."""
    from memstack.testing import FakeClock

    clock, store = FakeClock(), InMemorySession("s")
    start = clock.now
    ttl = TTLSession(store, ttl=3600, clock=clock, purge_every=None)
    session = RedactSession(EncryptedSession(ttl, key=KEY))
    await session.add_items([{"role": "user", "content": "hi"}])
    clock.tick(100)
    caps = capabilities_of(session)
    summary = {"role": "developer", "content": "summary: the user is a@b.io"}
    await caps.add_derived([summary], derived_from=start - 900)
    tail = await caps.read_tail(10)
    assert tail.items[-1] == {"role": "developer", "content": "summary: the user is [EMAIL]"}
    assert tail.written_at == [start, start - 900]
    clock.set(start - 900 + 3600)  # its sources' time is up: the summary goes, "hi" stays
    assert await session.get_items() == [{"role": "user", "content": "hi"}]


STACKS = {
    "redact": [LayerSpec("redact")],
    "ttl→encrypted→redact": [
        LayerSpec(TTLSession, {"ttl": 3600}),
        LayerSpec(EncryptedSession, {"key": KEY}),
        LayerSpec("redact", {"strategies": {"email": "hash"}, "key": KEY}),
    ],
}


@pytest.mark.parametrize("stack", list(STACKS))
@pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda check: check.__name__)
async def test_contract(store: Store, stack: str, check: Any) -> None:
    await check(lambda session_id: build_stack(store.open(session_id), STACKS[stack]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_runner_conversation(
    backend: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runner_conversation(
        backend, tmp_path, caplog, lambda store: build_stack(store, STACKS["ttl→encrypted→redact"])
    )


@function_tool
def find_account(email: str) -> str:
    """The account of a customer."""
    return f"account of {email}: card 4111 1111 1111 1111, IBAN GB82WEST12345698765432"


async def test_runner_stores_redacted_history_and_the_next_turn_sees_it(tmp_path: Path) -> None:
    db = tmp_path / "runner.db"
    session = RedactSession(SQLiteSession("ann:runner", db_path=db))
    model = ScriptedModel(
        [ToolCall("find_account", {"email": "ann@example.com"}), "Found it.", "You're welcome."]
    )
    agent = Agent(name="support", model=model, tools=[find_account])
    config = RunConfig(tracing_disabled=True)
    first = "I am ann@example.com, key sk-" + "a" * 30
    await Runner.run(agent, first, session=session, run_config=config)
    await Runner.run(agent, "Thanks", session=session, run_config=config)

    stored = await session.get_items()
    assert history_problems(stored) == []
    text = json.dumps(stored)
    for planted in ("ann@example.com", "4111 1111 1111 1111", "GB82WEST12345698765432", "sk-aaaa"):
        assert planted not in text
        assert planted.encode() not in _database_bytes(db)
    # The second turn's model input came from the store: redacted.
    assert "ann@example.com" not in json.dumps(model.inputs[-1], default=str)
    assert "[EMAIL]" in json.dumps(model.inputs[-1], default=str)
