"""EncryptedSession: contract and Runner over every backend, loud failures, tampering,
rotation, SDK migration, capabilities through encryption, and what reaches the disk."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from agents.extensions.memory import EncryptedSession as SdkEncryptedSession
from agents.memory import SessionSettings, SQLiteSession
from sqlalchemy import text

from memstack import (
    BackendError,
    CapabilityError,
    ConfigurationError,
    DecryptionError,
    EncryptedSession,
    ItemValidationError,
    LayerSpec,
    PassthroughSession,
    SessionLayer,
    build_stack,
    capabilities_of,
)
from memstack.backends.capabilities import Item, PassingCapabilities, Predicate, Tail
from memstack.crypto import Keyring, generate_key, key_id, keyring_from_env
from memstack.testing import (
    CONTRACT_CHECKS,
    FakeClock,
    InMemoryCapabilities,
    InMemorySession,
    sample_items,
)

from ..backends.test_generic_support import PlainSession
from ..conftest import (
    BACKENDS,
    POSTGRES_URL,
    Store,
    require_service,
    runner_conversation,
    shared_data,
)

KEY = generate_key()
OTHER = generate_key()


def encrypted(store: InMemorySession | Any, **options: Any) -> EncryptedSession:
    options.setdefault("key", KEY)
    return EncryptedSession(store, **options)


def conversation_items(limit: int = 300) -> list[dict[str, Any]]:
    """Real items, half customer service (short turns), half coding (big tool outputs)."""
    halves = []
    for name, count in (("airline_tau.jsonl", limit // 2), ("swe_coding.jsonl", limit)):
        items: list[dict[str, Any]] = []
        with shared_data(name).open() as lines:
            for line in lines:
                items.extend(json.loads(line)["items"])
                if len(items) >= count:
                    break
        halves.append(items[:count])
    items = (halves[0] + halves[1])[:limit]
    while items and items[-1].get("type") == "function_call":
        items.pop()  # whole units: a call cut from its output would be an invalid history
    return items


# -- the contract over every backend, alone and stacked --------------------------------------

try:  # the TTL layer is developed alongside; its stacks join when it is there
    from memstack.layers.ttl import TTLSession
except ImportError:  # pragma: no cover
    TTLSession = None  # type: ignore[assignment,misc]
needs_ttl = pytest.mark.skipif(TTLSession is None, reason="memstack.layers.ttl not available")

STACKS = {
    "encrypted": [LayerSpec("encrypted", {"key": KEY})],
    "passthrough→encrypted": [LayerSpec("passthrough"), LayerSpec("encrypted", {"key": KEY})],
    "encrypted→passthrough": [LayerSpec("encrypted", {"key": KEY}), LayerSpec("passthrough")],
    "uncompressed": [LayerSpec("encrypted", {"key": KEY, "compress": False})],
}
if TTLSession is not None:
    STACKS["ttl→encrypted"] = [LayerSpec(TTLSession, {"ttl": 3600}), STACKS["encrypted"][0]]
    STACKS["encrypted→ttl"] = [STACKS["encrypted"][0], LayerSpec(TTLSession, {"ttl": 3600})]


@pytest.mark.parametrize("stack", list(STACKS))
@pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda check: check.__name__)
async def test_contract(store: Store, stack: str, check: Any) -> None:
    await check(lambda session_id: build_stack(store.open(session_id), STACKS[stack]))


@pytest.mark.parametrize("stack", ["encrypted", "passthrough→encrypted"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_runner_conversation(
    backend: str, stack: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runner_conversation(backend, tmp_path, caplog, lambda store: build_stack(store, STACKS[stack]))


# -- what the layer below sees ---------------------------------------------------------------


async def test_layer_below_sees_only_envelopes_under_the_active_key() -> None:
    store = InMemorySession("s1")
    session = encrypted(store)
    items = sample_items(6)
    await session.add_items(items)
    rows = [json.loads(row) for row in store.rows]
    assert len(rows) == 6
    assert all(row.keys() == {"menc", "kid", "ct"} for row in rows)
    assert {row["kid"] for row in rows} == {key_id(KEY)}
    assert len({row["ct"] for row in rows}) == 6  # fresh nonce per item
    assert await session.get_items() == items
    assert await session.get_items(limit=2) == items[-2:]


async def test_stored_bytes_are_smaller_than_plaintext_on_real_histories() -> None:
    items = conversation_items()
    store = InMemorySession("sizes")
    await encrypted(store).add_items(items)
    plaintext = sum(len(json.dumps(item)) for item in items)
    stored = sum(len(row) for row in store.rows)
    assert stored < 0.8 * plaintext, (stored, plaintext)
    assert await encrypted(store).get_items() == items


async def test_wrapper_is_forwarded_to_the_store() -> None:
    store = InMemorySession("s1")
    session = encrypted(store)
    marker: Any = object()
    await session.add_items(sample_items(1), wrapper=marker)
    assert store.last_wrapper is marker
    await session.get_items(wrapper=marker)
    assert store.last_wrapper is marker


# -- loud failures ---------------------------------------------------------------------------


async def test_wrong_key_raises_naming_session_and_key_id() -> None:
    store = InMemorySession("alice")
    await encrypted(store).add_items(sample_items(3))
    wrong = encrypted(store, keyring=Keyring({key_id(KEY): OTHER}, active=key_id(KEY)), key=None)
    with pytest.raises(DecryptionError) as caught:
        await wrong.get_items()
    error = caught.value
    assert error.session_id == "alice" and error.layer == "EncryptedSession"
    assert error.key_id == key_id(KEY)  # type: ignore[attr-defined]
    assert "EncryptedSession session 'alice'" in str(error)
    assert f"key id {key_id(KEY)!r}" in str(error)


async def test_missing_key_raises_instead_of_returning_an_empty_history() -> None:
    store = InMemorySession("s1")
    await encrypted(store).add_items(sample_items(4))
    stranger = encrypted(store, key=OTHER)
    with pytest.raises(DecryptionError, match="which the key provider does not hold"):
        await stranger.get_items()
    with pytest.raises(DecryptionError):
        await stranger.get_items(limit=1)
    assert len(store.rows) == 4


async def test_one_bad_item_fails_the_whole_read_rather_than_shortening_it() -> None:
    store = InMemorySession("s1")
    session = encrypted(store)
    await session.add_items(sample_items(5))
    envelope = json.loads(store.rows[2])
    envelope["ct"] = envelope["ct"][:-4]
    store.rows[2] = json.dumps(envelope)
    with pytest.raises(DecryptionError):
        await session.get_items()
    assert len(await session.get_items(limit=2)) == 2  # the tail after it is still readable


async def test_envelope_moved_to_another_session_is_rejected() -> None:
    alice, bob = InMemorySession("alice"), InMemorySession("bob")
    await encrypted(alice).add_items([{"role": "user", "content": "alice's secret"}])
    await encrypted(bob).add_items([{"role": "user", "content": "bob's"}])
    bob.rows.append(alice.rows[0])
    with pytest.raises(DecryptionError, match="belongs to another session") as caught:
        await encrypted(bob).get_items()
    assert caught.value.session_id == "bob"


async def test_unknown_format_version_raises() -> None:
    store = InMemorySession("s1")
    await encrypted(store).add_items(sample_items(1))
    store.rows[0] = json.dumps({**json.loads(store.rows[0]), "menc": 3})
    with pytest.raises(DecryptionError, match="unknown envelope format version 3"):
        await encrypted(store).get_items()


async def test_plaintext_in_storage_is_an_error_unless_admitted() -> None:
    store = InMemorySession("s1")
    await store.add_items([{"role": "user", "content": "written before encryption"}])
    await encrypted(store).add_items([{"role": "assistant", "content": "after"}])
    with pytest.raises(DecryptionError, match="plaintext item"):
        await encrypted(store).get_items()
    admitted = encrypted(store, allow_plaintext=True)
    assert [i["content"] for i in await admitted.get_items()] == [
        "written before encryption",
        "after",
    ]
    assert await admitted.migrate() == 1
    assert "written before" not in str(store.rows)
    assert [i["content"] for i in await encrypted(store).get_items()] == [
        "written before encryption",
        "after",
    ]


def _flip(rng: random.Random, stored: str) -> tuple[dict[str, Any], str] | None:
    """One random bit flipped in a stored row, if the row is still a JSON dict."""
    data = bytearray(stored.encode())
    bit = rng.randrange(len(data) * 8)
    data[bit // 8] ^= 1 << (bit % 8)
    try:
        value = json.loads(data.decode())
    except ValueError:
        return None  # the store's own JSON broke: the backend, not this layer, sees that
    if not isinstance(value, dict) or value == json.loads(stored):
        return None
    original = json.loads(stored)
    if value.keys() != original.keys():
        return value, "field name"
    return value, next(k for k in ("ct", "kid", "menc") if value[k] != original[k])


async def test_a_thousand_random_bit_flips_of_stored_envelopes_all_raise() -> None:
    rng = random.Random(4242)
    store = InMemorySession("flips")
    session = encrypted(store)
    await session.add_items([*conversation_items(12), {"role": "user", "content": "ok"}])
    originals = list(store.rows)
    hits: dict[str, int] = {}
    detected = 0
    while detected < 1000:
        index = rng.randrange(len(originals))
        flipped = _flip(rng, originals[index])
        if flipped is None:
            continue
        value, where = flipped
        store.rows[:] = originals
        store.rows[index] = json.dumps(value)
        with pytest.raises(DecryptionError):
            await session.get_items()
        hits[where] = hits.get(where, 0) + 1
        detected += 1
    store.rows[:] = originals
    assert len(await session.get_items()) == len(originals)
    assert set(hits) == {"ct", "kid", "menc", "field name"}, hits  # every part was hit


async def test_truncated_stored_envelopes_all_raise() -> None:
    rng = random.Random(99)
    store = InMemorySession("cuts")
    session = encrypted(store)
    await session.add_items(conversation_items(8))
    originals = list(store.rows)
    cases = 0
    for index, row in enumerate(originals):
        envelope = json.loads(row)
        lengths = set(rng.sample(range(len(envelope["ct"])), min(60, len(envelope["ct"]))))
        for length in lengths | {0, 1, len(envelope["ct"]) - 1}:
            store.rows[:] = originals
            store.rows[index] = json.dumps({**envelope, "ct": envelope["ct"][:length]})
            with pytest.raises(DecryptionError):
                await session.get_items()
            cases += 1
        for field in ("kid", "ct", "menc"):  # a field cut off altogether
            store.rows[:] = originals
            store.rows[index] = json.dumps({k: v for k, v in envelope.items() if k != field})
            with pytest.raises(DecryptionError):
                await session.get_items()
            cases += 1
    assert cases > 400


async def test_tampered_row_in_a_real_sqlite_file_raises(tmp_path: Path) -> None:
    path = tmp_path / "tamper.db"
    store = SQLiteSession("s1", db_path=path)
    session = encrypted(store)
    await session.add_items(conversation_items(5))
    with sqlite3.connect(path) as db:
        row_id, data = db.execute(
            "SELECT id, message_data FROM agent_messages ORDER BY id LIMIT 1 OFFSET 2"
        ).fetchone()
        envelope = json.loads(data)
        position = len(envelope["ct"]) // 2
        swapped = "A" if envelope["ct"][position] != "A" else "B"
        envelope["ct"] = envelope["ct"][:position] + swapped + envelope["ct"][position + 1 :]
        db.execute(
            "UPDATE agent_messages SET message_data = ? WHERE id = ?",
            (json.dumps(envelope), row_id),
        )
    with pytest.raises(DecryptionError, match="cannot authenticate"):
        await session.get_items()
    store.close()


async def test_skip_policy_is_opt_in_logs_and_never_deletes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = InMemorySession("s1")
    items = sample_items(4)
    await encrypted(store).add_items(items[:2])
    await encrypted(store, key=OTHER).add_items(items[2:3])
    await encrypted(store).add_items(items[3:])
    lenient = encrypted(store, unreadable="skip")
    with caplog.at_level(logging.WARNING, logger="memstack.encrypted"):
        assert await lenient.get_items() == [*items[:2], items[3]]
    assert "skipping an unreadable item" in caplog.text and key_id(OTHER) in caplog.text
    assert len(store.rows) == 4
    # With a limit, as a layer above reads a tail: the newest 2 readable, not 1 of 2 read.
    assert await lenient.get_items(limit=2) == [items[1], items[3]]
    assert await lenient.get_items(limit=9) == [*items[:2], items[3]]
    assert await lenient.pop_item() == items[3]
    with pytest.raises(DecryptionError):  # popping never discards what it cannot read
        await lenient.pop_item()
    assert len(store.rows) == 3


async def test_pop_of_an_unreadable_item_puts_it_back() -> None:
    store = InMemorySession("s1")
    await encrypted(store).add_items(sample_items(2))
    await encrypted(store, key=OTHER).add_items([{"role": "user", "content": "other key"}])
    before = list(store.rows)
    with pytest.raises(DecryptionError, match=key_id(OTHER)):
        await encrypted(store).pop_item()
    assert store.rows == before


# -- keys and rotation -----------------------------------------------------------------------


async def test_rotation_loses_and_duplicates_nothing_and_old_keys_can_then_go() -> None:
    old, new = generate_key(), generate_key()
    store = InMemorySession("s1")
    items = sample_items(40)
    await encrypted(store, key=old).add_items(items[:25])
    both = encrypted(store, keyring=Keyring.of(new, old), key=None)
    await both.add_items(items[25:])
    assert await both.get_items() == items  # old items read with the old key meanwhile
    assert {json.loads(r)["kid"] for r in store.rows} == {key_id(old), key_id(new)}

    assert await both.rotate() == 25
    assert {json.loads(r)["kid"] for r in store.rows} == {key_id(new)}
    assert await both.rotate() == 0
    only_new = encrypted(store, key=new)
    assert await only_new.get_items() == items
    with pytest.raises(DecryptionError):
        await encrypted(store, key=old).get_items()


async def test_rotation_over_every_backend(store: Store) -> None:
    old, new = generate_key(), generate_key()
    session_id = f"rotate-{uuid.uuid4().hex[:8]}"
    items = conversation_items(30)
    await encrypted(store.open(session_id), key=old).add_items(items[:20])
    both = encrypted(store.open(session_id), keyring=Keyring.of(new, old), key=None)
    await both.add_items(items[20:])
    assert await both.rotate() == 20
    raw = await both.stored()
    assert len(raw) == len(items) and {r["kid"] for r in raw} == {key_id(new)}
    assert await encrypted(store.open(session_id), key=new).get_items() == items
    await both.clear_session()


async def test_rotation_retries_when_history_changes_under_it() -> None:
    old, new = generate_key(), generate_key()
    store = InMemorySession("s1")
    items = sample_items(12)
    await encrypted(store, key=old).add_items(items)
    ring = Keyring.of(new, old)
    session = encrypted(store, keyring=ring, key=None)
    rival = encrypted(store, keyring=ring, key=None)
    real_stored = session.stored
    calls = 0

    async def racing_stored(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        seen = await real_stored(*args)
        if calls == 1:  # another process rotates between our read and our write
            await rival.rotate()
        return seen

    session.stored = racing_stored  # type: ignore[method-assign]
    assert await session.rotate() == 0  # second attempt finds nothing stale left
    assert calls == 2
    assert await encrypted(store, key=new).get_items() == items


async def test_rotation_gives_up_after_max_attempts() -> None:
    old, new = generate_key(), generate_key()
    store = InMemorySession("s1")
    await encrypted(store, key=old).add_items(sample_items(3))
    session = encrypted(store, keyring=Keyring.of(new, old), key=None)
    real_stored = session.stored

    writer = encrypted(store, key=old)

    async def always_changing(*args: Any) -> Any:
        seen = await real_stored(*args)
        # Another writer re-seals the oldest item (same item, fresh nonce) every time.
        store.rows[0] = json.dumps(writer.seal([writer.open(json.loads(store.rows[0]))])[0])
        return seen

    session.stored = always_changing  # type: ignore[method-assign]
    with pytest.raises(CapabilityError, match="changed during each of 3 rotation attempts"):
        await session.rotate(max_attempts=3)
    assert len(store.rows) == 3


async def test_rotation_concurrent_with_writers_keeps_every_item(tmp_path: Path) -> None:
    old, new = generate_key(), generate_key()
    store = SQLiteSession("s1", db_path=tmp_path / "race.db")
    base = sample_items(31, tag="base")  # whole units: the last call has its output
    await encrypted(store, key=old).add_items(base)
    session = encrypted(store, keyring=Keyring.of(new, old), key=None)
    batches = [sample_items(3, tag=f"w{n}") for n in range(8)]
    results = await asyncio.gather(session.rotate(), *(session.add_items(b) for b in batches))
    assert results[0] == 31
    stored = await encrypted(store, key=new).get_items()
    assert stored[:31] == base
    appended = stored[31:]
    assert sorted(map(json.dumps, appended)) == sorted(json.dumps(i) for b in batches for i in b)
    store.close()


class LimitedPlainSession(PlainSession):
    """A third-party session that honours session_settings.limit, as the SDK's do."""

    async def get_items(self, limit: int | None = None) -> list[Any]:
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        return await super().get_items(limit)


async def test_rotation_refuses_a_non_atomic_store_unless_allowed() -> None:
    old, new = generate_key(), generate_key()
    plain = LimitedPlainSession("plain")
    plain.session_settings = SessionSettings(limit=2)  # must not cut the rewrite short
    items = sample_items(5)
    await encrypted(plain, key=old).add_items(items)
    session = encrypted(plain, keyring=Keyring.of(new, old), key=None)
    with pytest.raises(CapabilityError, match="allow_non_atomic=True"):
        await session.rotate()
    assert {r["kid"] for r in plain.items} == {key_id(old)}
    assert await session.rotate(allow_non_atomic=True) == 5
    assert await session.rotate(allow_non_atomic=True) == 0
    assert len(plain.items) == 5 and {r["kid"] for r in plain.items} == {key_id(new)}
    assert await encrypted(plain, key=new).get_items(limit=5) == items


async def test_a_failed_refill_hands_back_the_re_encrypted_envelopes() -> None:
    old, new = generate_key(), generate_key()

    class FailingRefill(PlainSession):
        fail = False

        async def add_items(self, items: list[Any]) -> None:
            if self.fail:
                raise OSError("disk full")
            await super().add_items(items)

    plain = FailingRefill("plain")
    items = sample_items(4)
    await encrypted(plain, key=old).add_items(items)
    session = encrypted(plain, keyring=Keyring.of(new, old), key=None)
    plain.fail = True
    with pytest.raises(BackendError, match="unsaved_items") as caught:
        await session.rotate(allow_non_atomic=True)
    plain.fail = False
    await plain.add_items(caught.value.unsaved_items)  # type: ignore[attr-defined]
    assert await encrypted(plain, key=new).get_items() == items


class SwitchableProvider:
    """A key provider as a secret manager might back it: the active key changes at runtime."""

    def __init__(self) -> None:
        self.keys = {"2024": OTHER}
        self.active_kid = "2024"

    def key(self, kid: str) -> str | None:
        return self.keys.get(kid)


async def test_an_injected_key_provider_is_asked_per_write() -> None:
    provider = SwitchableProvider()
    store = InMemorySession("s1")
    session = encrypted(store, keyring=provider, key=None)
    await session.add_items(sample_items(3))
    provider.keys["2025"] = KEY
    provider.active_kid = "2025"
    await session.add_items(sample_items(3, tag="n"))
    assert [json.loads(r)["kid"] for r in store.rows] == ["2024"] * 3 + ["2025"] * 3
    assert await session.rotate() == 3
    del provider.keys["2024"]
    fresh = encrypted(store, keyring=provider, key=None)
    assert len(await fresh.get_items()) == 6


# -- migration from the SDK's EncryptedSession -----------------------------------------------


@pytest.mark.parametrize("sdk_key", ["fernet", "weak raw string"])
async def test_sdk_history_is_read_and_migrated_in_place(sdk_key: str, tmp_path: Path) -> None:
    from cryptography.fernet import Fernet

    legacy = Fernet.generate_key().decode() if sdk_key == "fernet" else "hunter2"
    store = SQLiteSession("user-1", db_path=tmp_path / "sdk.db")
    items = conversation_items(20)
    sdk = SdkEncryptedSession("user-1", store, legacy, ttl=3600)
    await sdk.add_items(items)  # type: ignore[arg-type]

    with pytest.raises(DecryptionError, match="legacy_sdk_key="):
        await encrypted(store).get_items()
    with pytest.raises(DecryptionError, match="wrong legacy_sdk_key"):
        await encrypted(store, legacy_sdk_key="not-it").get_items()
    switching = encrypted(store, legacy_sdk_key=legacy)
    assert await switching.get_items() == items
    await switching.add_items([{"role": "user", "content": "after the switch"}])
    assert await switching.migrate() == len(items)
    raw = await switching.stored()
    assert all(r.keys() == {"menc", "kid", "ct"} for r in raw) and len(raw) == len(items) + 1
    assert await encrypted(store).get_items() == [
        *items,
        {"role": "user", "content": "after the switch"},
    ]
    store.close()


async def test_sdk_migration_over_every_backend(store: Store) -> None:
    session_id = f"sdk-{uuid.uuid4().hex[:8]}"
    legacy = generate_key()
    items = sample_items(10)
    await SdkEncryptedSession(session_id, store.open(session_id), legacy).add_items(items)  # type: ignore[arg-type]
    session = encrypted(store.open(session_id), legacy_sdk_key=legacy)
    assert await session.migrate() == 10
    assert await encrypted(store.open(session_id)).get_items() == items
    await session.clear_session()


# -- capabilities through encryption ---------------------------------------------------------


async def test_capabilities_translate_over_every_backend(store: Store) -> None:
    session = encrypted(store.open(f"caps-{uuid.uuid4().hex[:8]}"))
    items = sample_items(12)
    await session.add_items(items)
    caps = capabilities_of(session)
    assert caps.atomic and await caps.count() == 12

    summary = {"role": "assistant", "content": "summary of the first four"}
    assert not await caps.replace_oldest(4, [summary], expect=items[1:5])  # stale read
    assert await caps.replace_oldest(4, [summary], expect=items[:4])
    assert await session.get_items() == [summary, *items[4:]]

    assert await caps.delete_oldest(1) == 1
    users = lambda item: item.get("role") == "user"  # noqa: E731
    assert await caps.delete_where(users, batch_size=2) == 2
    assert await session.get_items() == [i for i in items[4:] if not users(i)]
    assert all(r.keys() == {"menc", "kid", "ct"} for r in await session.stored())
    await session.clear_session()


async def test_delete_where_on_undecryptable_items_raises_and_deletes_nothing() -> None:
    store = InMemorySession("s1")
    await encrypted(store, key=OTHER).add_items(sample_items(3))
    caps = capabilities_of(encrypted(store))
    with pytest.raises(DecryptionError):
        await caps.delete_where(lambda item: True)
    assert len(store.rows) == 3


async def test_capabilities_of_a_non_atomic_store_stay_non_atomic() -> None:
    caps = capabilities_of(encrypted(PlainSession()))
    assert not caps.atomic
    with pytest.raises(CapabilityError):
        await caps.delete_oldest(1)


# -- what reaches the disk -------------------------------------------------------------------


def _disk_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


@pytest.mark.parametrize("compress", [True, False])
async def test_canary_never_reaches_the_sqlite_file_or_its_wal(
    compress: bool, tmp_path: Path
) -> None:
    canary = f"CANARY-{uuid.uuid4().hex}"
    items = [
        {"role": "user", "content": f"my secret is {canary}"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": canary * 50},
    ]
    bare_path, enc_path = tmp_path / "bare.db", tmp_path / "enc.db"
    bare = SQLiteSession("s1", db_path=bare_path)
    await bare.add_items(items)  # type: ignore[arg-type]
    assert canary.encode() in _disk_bytes(bare_path)  # the method does find plaintext
    store = SQLiteSession("s1", db_path=enc_path)
    session = encrypted(store, compress=compress)
    await session.add_items(items)
    assert await session.get_items() == items
    on_disk = _disk_bytes(enc_path)
    assert len(on_disk) > 0 and canary.encode() not in on_disk
    assert canary[:16].encode() not in on_disk
    bare.close()
    store.close()


async def test_canary_never_reaches_the_postgres_table() -> None:
    require_service("PostgreSQL", POSTGRES_URL)
    store = Store("postgres", Path("/nonexistent"))
    canary = f"CANARY-{uuid.uuid4().hex}"
    session_id, bare_id = f"canary-{uuid.uuid4().hex[:8]}", f"bare-{uuid.uuid4().hex[:8]}"
    try:
        session = encrypted(store.open(session_id), compress=False)
        items = [
            {"role": "user", "content": f"IBAN {canary}"},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": canary},
        ]
        await session.add_items(items)
        await store.open(bare_id).add_items(items)  # type: ignore[arg-type]
        async with store.engine.connect() as conn:
            rows = (
                (
                    await conn.execute(
                        text("SELECT m::text FROM agent_messages m WHERE session_id = :sid"),
                        {"sid": session_id},
                    )
                )
                .scalars()
                .all()
            )
            bare_rows = (
                (
                    await conn.execute(
                        text("SELECT m::text FROM agent_messages m WHERE session_id = :sid"),
                        {"sid": bare_id},
                    )
                )
                .scalars()
                .all()
            )
        assert len(rows) == 3 and all('"menc"' in row for row in rows)
        assert not any(canary in row for row in rows)
        assert sum(canary in row for row in bare_rows) == 2  # the query does see plaintext
        assert await session.get_items() == items
        await session.clear_session()
        await store.open(bare_id).clear_session()
    finally:
        await store.aclose()


# -- construction ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "exactly one of key= or keyring="),
        ({"key": KEY, "keyring": Keyring.of(KEY)}, "exactly one of key= or keyring="),
        ({"key": "hunter2"}, "key must be 32 random bytes"),
        ({"keyring": {"a": KEY}}, "keyring must be a memstack.crypto.Keyring"),
        ({"key": KEY, "compress": "yes"}, "compress must be True or False"),
        ({"key": KEY, "allow_plaintext": 1}, "allow_plaintext must be True or False"),
        ({"key": KEY, "compress_min_bytes": -1}, "compress_min_bytes must be an int >= 0"),
        ({"key": KEY, "compress_min_bytes": 1.5}, "compress_min_bytes must be an int"),
        ({"key": KEY, "unreadable": "ignore"}, "unreadable must be 'raise' or 'skip'"),
        ({"key": KEY, "legacy_sdk_key": ""}, "legacy_sdk_key must be"),
    ],
)
def test_options_are_validated_naming_the_field(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        EncryptedSession(InMemorySession("s1"), **options)
    assert caught.value.layer == "EncryptedSession"
    assert KEY not in str(caught.value)  # a misplaced key is never echoed


def test_a_provider_without_its_active_key_is_refused_up_front() -> None:
    provider = SwitchableProvider()
    provider.active_kid = "missing"
    with pytest.raises(ConfigurationError, match="no key for its own active key id 'missing'"):
        EncryptedSession(InMemorySession("s1"), keyring=provider)


def test_repr_shows_key_ids_never_keys() -> None:
    old = generate_key()
    session = EncryptedSession(
        PassthroughSession(InMemorySession("s1")),
        keyring=Keyring.of(KEY, old),
        legacy_sdk_key="sdk-secret",
    )
    shown = repr(session)
    assert shown == (
        "InMemorySession(session_id='s1') → PassthroughSession() → "
        f"EncryptedSession(kid={key_id(KEY)!r}, kids={[key_id(KEY), key_id(old)]!r}, "
        "compress=True, legacy_sdk_key='***')"
    )
    assert KEY not in shown and old not in shown and "sdk-secret" not in shown


def test_build_stack_by_name_and_unknown_options() -> None:
    stack = build_stack(InMemorySession("s1"), [LayerSpec("encrypted", {"key": KEY})])
    assert isinstance(stack, EncryptedSession)
    with pytest.raises(ConfigurationError, match="unknown option"):
        build_stack(InMemorySession("s1"), [LayerSpec("encrypted", {"key": KEY, "ttl": 5})])


async def test_invalid_items_are_refused_before_anything_is_stored() -> None:
    store = InMemorySession("s1")
    session = encrypted(store)
    with pytest.raises(ItemValidationError, match=r"item 1 \(message\), field bad: a object"):
        await session.add_items([{"ok": 1}, {"bad": object()}])
    with pytest.raises(ItemValidationError, match="items must be a list"):
        await session.add_items({"role": "user"})  # type: ignore[arg-type]
    assert store.rows == []


# -- cooperation with a retention layer below ------------------------------------------------


class StampingLayer(SessionLayer):
    """Stands in for a retention layer: dates what it stores, reports the dates up."""

    def __init__(self, inner: InMemorySession) -> None:
        super().__init__(inner)
        self.times: list[float] = []
        self.clock = 100.0

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        await self.write(items, derived_from=None)

    async def write(self, items: list[Any], *, derived_from: float | None) -> None:
        for _ in items:
            self.clock += 1
            self.times.append(derived_from if derived_from is not None else self.clock)
        await self.inner.add_items(items)

    async def pop_item(self, *, wrapper: Any = None) -> Any:
        item = await self.inner.pop_item()
        if item is not None:
            self.times.pop()
        return item

    async def shape(self, below: Tail, wrapper: Any) -> Tail:
        times = self.times[len(self.times) - len(below.items) :]
        return Tail(below.items, times, below.keys, below.complete)

    def storage_capabilities(self) -> StampingCapabilities:
        return StampingCapabilities(self)


class StampingCapabilities(PassingCapabilities):
    session: StampingLayer

    def __init__(self, session: StampingLayer) -> None:
        super().__init__(session, capabilities_of(session.inner))

    async def add_derived(
        self, items: Any, *, derived_from: float | None, wrapper: Any = None
    ) -> None:
        await self.session.write(list(items), derived_from=derived_from)

    async def replace_oldest(self, n: int, items: Any, *, expect: Any = None) -> bool:
        raise AssertionError("not used here")

    async def delete_where(
        self, predicate: Predicate, *, batch_size: int = 500, prefix_only: bool = False
    ) -> int:
        raise AssertionError("not used here")


async def test_skipped_items_keep_their_write_times_aligned() -> None:
    below = StampingLayer(InMemorySession("s1"))
    two = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    await encrypted(below).add_items(two)  # written at 101, 102
    await encrypted(below, key=OTHER).add_items(sample_items(1, tag="x"))  # 103, unreadable
    await encrypted(below).add_items(sample_items(1, tag="y"))  # 104
    tail = await capabilities_of(encrypted(below, unreadable="skip")).read_tail(10)
    assert len(tail.items) == 3 and tail.written_at == [101.0, 102.0, 104.0]
    assert tail.items == [*two, *sample_items(1, tag="y")]
    # A limit counts readable items: the skipped one is made up for from further back.
    short = await capabilities_of(encrypted(below, unreadable="skip")).read_tail(2)
    assert short.items == [two[1], *sample_items(1, tag="y")]
    assert short.written_at == [102.0, 104.0]
    with pytest.raises(DecryptionError):
        await capabilities_of(encrypted(below)).read_tail(10)


async def test_derived_items_are_sealed_and_keep_their_date_on_the_way_down() -> None:
    below = StampingLayer(InMemorySession("s1"))
    summary: list[Item] = [{"role": "developer", "content": "summary of older things"}]
    await capabilities_of(encrypted(below)).add_derived(summary, derived_from=42.0)
    assert below.times == [42.0] and "older things" not in str(below.inner.rows)  # type: ignore[attr-defined]
    tail = await capabilities_of(encrypted(below)).read_tail(1)
    assert (tail.items, tail.written_at) == (summary, [42.0])


async def test_a_failed_pop_leaves_the_item_where_it_was() -> None:
    below = StampingLayer(InMemorySession("s1"))
    await encrypted(below).add_items(sample_items(1))
    await encrypted(below, key=OTHER).add_items(sample_items(1, tag="x"))  # written at 102
    rows = list(below.inner.rows)  # type: ignore[attr-defined]
    with pytest.raises(DecryptionError):
        await encrypted(below).pop_item()
    assert below.times == [101.0, 102.0] and below.inner.rows == rows  # type: ignore[attr-defined]
    assert await encrypted(below, key=OTHER).pop_item() == sample_items(1, tag="x")[0]


async def test_delete_written_before_needs_no_key_and_passes_through() -> None:
    calls: list[tuple[float, int]] = []

    class Caps(InMemoryCapabilities):
        async def delete_written_before(self, older_than: float, *, batch_size: int = 500) -> int:
            calls.append((older_than, batch_size))
            return 7

    class Store(InMemorySession):
        def storage_capabilities(self) -> Any:
            return Caps(self)  # type: ignore[arg-type]

    store = Store("s1")
    await encrypted(store, key=OTHER).add_items(sample_items(2))  # a key we no longer hold
    caps = capabilities_of(encrypted(store))
    assert await caps.delete_written_before(86400.0, batch_size=50) == 7
    assert calls == [(86400.0, 50)]


def test_keyring_from_env_for_recipes(monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = generate_key(), generate_key()
    monkeypatch.setenv("CHAT_KEY_NEW", new)
    monkeypatch.setenv("CHAT_KEY_OLD", old)
    ring = keyring_from_env("CHAT_KEY_NEW", ["CHAT_KEY_OLD"])
    assert ring.active_kid == key_id(new) and ring.kids == (key_id(new), key_id(old))
    with pytest.raises(ConfigurationError, match="'CHAT_KEY_GONE' holding a key is not set"):
        keyring_from_env("CHAT_KEY_GONE")
    monkeypatch.setenv("CHAT_KEY_WEAK", "hunter2")
    with pytest.raises(ConfigurationError, match=r"keys from CHAT_KEY_WEAK"):
        keyring_from_env("CHAT_KEY_WEAK")


@needs_ttl
async def test_ttl_below_encryption_purges_without_a_key_and_rotation_keeps_stamps() -> None:
    old, new = generate_key(), generate_key()
    clock, store = FakeClock(), InMemorySession("s1")
    session = encrypted(TTLSession(store, ttl=100, clock=clock), key=old)
    first, second = sample_items(4, tag="first"), sample_items(4, tag="second")
    await session.add_items(first)
    clock.tick(50)
    await session.add_items(second)
    written = [json.loads(row)["t"] for row in store.rows]

    rotating = encrypted(
        TTLSession(store, ttl=100, clock=clock), keyring=Keyring.of(new, old), key=None
    )
    assert await rotating.rotate() == 8
    rows = [json.loads(row) for row in store.rows]
    assert [row["t"] for row in rows] == written  # re-encryption keeps each write time
    assert {row["item"]["kid"] for row in rows} == {key_id(new)}
    assert "first" not in str(store.rows) and "question" not in str(store.rows)

    clock.tick(60)  # the first four are 110 s old now
    assert await encrypted(TTLSession(store, ttl=100, clock=clock), key=new).get_items() == second
    # A retention job with no key at all: records are plaintext stamps around envelopes.
    assert await TTLSession(store, ttl=100, clock=clock, purge_every=None).purge_expired() == 4
    assert len(store.rows) == 4
    assert await encrypted(TTLSession(store, ttl=100, clock=clock), key=new).get_items() == second


@needs_ttl
async def test_ttl_above_encryption_is_sealed_and_purges_with_the_key() -> None:
    clock, store = FakeClock(), InMemorySession("s1")
    session = TTLSession(encrypted(store), ttl=100, clock=clock, purge_every=None)
    await session.add_items(sample_items(3, tag="old"))
    clock.tick(150)
    await session.add_items(sample_items(2, tag="new"))
    rows = [json.loads(row) for row in store.rows]
    assert all(row.keys() == {"menc", "kid", "ct"} for row in rows)  # stamps are sealed
    assert "__memstack_ttl__" not in str(store.rows)
    assert await session.purge_expired() == 3
    assert await session.get_items() == sample_items(2, tag="new")
    with pytest.raises(DecryptionError):  # without the key nothing can be judged by content
        await TTLSession(encrypted(store, key=OTHER), ttl=100, clock=clock).purge_expired()


async def test_a_subclass_that_passes_values_through_never_hands_out_shared_ones(
    sqlite_store: Store,
) -> None:
    """Sharing is for ``EncryptedSession.open``, which opens every item anew: a subclass
    whose ``open`` returns what it read (its own clear format) gets values of its own."""
    from memstack import TTLSession

    class ClearWhenPublic(EncryptedSession):
        def open(self, stored: object) -> dict[str, Any]:
            if isinstance(stored, dict) and stored.get("public") is True:
                return stored  # written in clear on purpose
            return super().open(stored)

    stack = ClearWhenPublic(TTLSession(sqlite_store.open("subclass"), ttl=3600), key=KEY)
    notice = {"role": "user", "content": "hello", "public": True}
    await stack.inner.add_items([notice])
    await stack.add_items(sample_items(2))
    first = await stack.get_items()
    first[0]["content"] = "altered"
    assert await stack.get_items() == [notice, *sample_items(2)]


@pytest.mark.parametrize("ttl", [False, True], ids=["on the store", "over TTL"])
async def test_a_value_the_store_changes_in_place_is_opened_again(ttl: bool) -> None:
    """Only a ``Reuse`` vouches that an object seen before is unchanged: a store of your own
    may hand back the very objects it holds, and change them in place."""
    plain = PlainSession("s")
    session = encrypted(TTLSession(plain, ttl=3600) if ttl else plain)
    await session.add_items(sample_items(2))  # type: ignore[arg-type]
    assert await session.get_items(2) == sample_items(2)
    envelope = plain.items[-1]["item"] if ttl else plain.items[-1]
    edited = {"role": "user", "content": "edited"}
    envelope.update(encrypted(InMemorySession("s")).seal([edited])[0])
    assert (await session.get_items(2))[-1] == edited
    text = envelope["ct"]
    envelope["ct"] = text[:10] + ("B" if text[10] == "A" else "A") + text[11:]
    with pytest.raises(DecryptionError):
        await session.get_items(2)
    with pytest.raises(DecryptionError):
        await session.pop_item()


@pytest.mark.parametrize("ttl", [False, True], ids=["on the store", "over TTL"])
@pytest.mark.parametrize("limit", [None, 5], ids=["all", "limit"])
async def test_a_store_failure_during_a_read_names_the_layer(ttl: bool, limit: int | None) -> None:
    """The raw reads below encryption (``read_values``) fail as ``get_items`` would."""
    from memstack.backends import open_backend

    store = open_backend("postgresql://postgres@127.0.0.1:1/test", "s")  # nothing listens
    session = encrypted(TTLSession(store, ttl=3600) if ttl else store)
    try:
        for read in (lambda: session.get_items(limit), session.pop_item):
            with pytest.raises(BackendError) as caught:
                await read()
            assert caught.value.layer is not None, str(caught.value)
            assert "SQLAlchemySession failed: ConnectionRefusedError" in str(caught.value)
            assert caught.value.__cause__ is not None
    finally:
        await store.engine.dispose()


# -- token counts sealed with the items (format 2) ----------------------------------------
def real_items(count: int) -> list[Item]:
    """The first ``count`` items of the team's coding and airline transcripts, alternating."""
    items: list[Item] = []
    for name in ("swe_coding.jsonl", "airline_tau.jsonl"):
        with shared_data(name).open(encoding="utf-8") as lines:
            for line in lines:
                items += [i for i in json.loads(line)["items"] if i.get("role") != "system"]
                if len(items) >= count * (1 + (name == "airline_tau.jsonl")):
                    break
    return items[: 2 * count : 2] + items[1 : 2 * count : 2]


async def test_sealed_counts_are_the_counts_every_counter_of_that_encoding_makes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dataclasses

    from memstack import cache
    from memstack.tokens import TokenCounter, counts, total

    items = [
        *real_items(150),
        {"role": "user", "content": [{"type": "input_image", "image_url": "data:x"}]},
        {"type": "function_call", "call_id": "c", "name": "n", "arguments": '{"a": 1.5}'},
    ]
    store = InMemorySession("sealed-counts")
    await encrypted(store, token_counts="o200k_base").add_items(items)
    assert all(json.loads(row)["menc"] == 2 for row in store.rows)
    counters = [TokenCounter(), TokenCounter("gpt-4.1", item_overhead=0, media_tokens=5)]
    exact = [
        [TokenCounter(**c, cache_size=0).count_item(i) for i in items]
        for c in ({}, {"model": "gpt-4.1", "item_overhead": 0, "media_tokens": 5})
    ]
    cache.clear()  # a new process: nothing counted, nothing opened
    whole = await store_tail(store)
    tail = await encrypted(store).shape(whole, None)
    assert isinstance(tail, Tail) and tail.items == items and len(tail.sealed) == len(items)
    with monkeypatch.context() as patched:  # none tokenised: the parts travel with the tail
        patched.setattr(TokenCounter, "parts", None)
        for counter, expected in zip(counters, exact, strict=True):
            assert [
                counts(counter, tail.items, tail.keys, sealed=tail.sealed)(i)
                for i in range(len(items))
            ] == expected
            assert total(counter, tail.items, tail.keys, session_id="t", sealed=tail.sealed) == (
                sum(expected)
            )

    # A tail a longer read may follow keeps them in the process cache instead: that read
    # finds these rows opened already, without the parts sealed with them.
    cache.clear()
    tail = await encrypted(store).shape(dataclasses.replace(whole, complete=False), None)
    assert isinstance(tail, Tail) and tail.sealed == ()
    before = cache.stats()["token parts"].hits if "token parts" in cache.stats() else 0
    for counter, expected in zip(counters, exact, strict=True):
        assert [
            counter.count_keyed(i, k) for i, k in zip(tail.items, tail.keys, strict=True)
        ] == expected
    assert cache.stats()["token parts"].hits - before == 2 * len(items)  # none tokenised


async def store_tail(store: InMemorySession) -> Tail:
    """The whole store as the layer above it reads it (rows keyed by their text)."""
    from memstack.backends.adapters import capabilities_of

    return await capabilities_of(store).read_newest(len(store.rows) + 1)


async def test_sealed_counts_leave_every_trigger_and_window_decision_as_exact_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstack import cache
    from memstack.compaction import ExtractiveSummarizer, Mask, Summarize, Tokens
    from memstack.tokens import TokenCounter

    tokenised = {"exact": 0, "sealed": 0, "writes": 0}
    parts, counting = TokenCounter.parts, ["exact"]

    def noted(self: TokenCounter, item: Item) -> tuple[int, int]:
        tokenised[counting[0]] += 1
        return parts(self, item)

    monkeypatch.setattr(TokenCounter, "parts", noted)

    def stack(name: str, token_counts: str | None) -> SessionLayer:
        specs = [
            LayerSpec("encrypted", {"key": KEY, "token_counts": token_counts}),
            LayerSpec(
                "compaction",
                {
                    "strategy": [
                        Mask(keep_last_turns=1, min_chars=200),
                        Summarize(ExtractiveSummarizer(), max_tokens=300),
                    ],
                    "trigger": Tokens(6000, target=2500),
                },
            ),
            LayerSpec("window", {"max_tokens": 4000}),
        ]
        return build_stack(SQLiteSession("s", str(tmp_path / name)), specs)  # type: ignore[return-value]

    exact, sealed = stack("exact.db", None), stack("sealed.db", "o200k_base")
    items = real_items(160)
    for start in range(0, len(items), 8):
        views, measures = [], []
        for name, session in (("exact", exact), ("sealed", sealed)):
            cache.clear()  # each write and read as a new process's first
            counting[0] = "writes"
            await session.add_items(items[start : start + 8])
            cache.clear()
            counting[0] = name
            views.append(await session.get_items())
            compaction = session.inner
            measures.append(cache.get(compaction._measured))  # type: ignore[attr-defined]
        assert views[0] == views[1] and measures[0] == measures[1], start
    # Reads tokenise only what they make (placeholders, summaries), not what was sealed.
    assert tokenised["sealed"] < tokenised["exact"] / 3, tokenised
    rows = [
        [
            json.loads(r[0])
            for r in sqlite3.connect(tmp_path / n).execute(
                "SELECT message_data FROM agent_messages ORDER BY id"
            )
        ]
        for n in ("exact.db", "sealed.db")
    ]
    assert {r["menc"] for r in rows[0]} == {1} and {r["menc"] for r in rows[1]} == {2}
    assert len(rows[0]) == len(rows[1]) > len(items)  # the same compaction records written
