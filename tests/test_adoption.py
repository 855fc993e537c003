"""Adding memstack to an existing deployment: history written by the bare SDK store survives.

Each test writes history with the SDK's own session (no layer), then wraps that same
store in a layer, on every backend: nothing may be hidden or deleted unless asked for.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from memstack import LayerSpec, build_stack
from memstack.adoption import adopt_stack
from memstack.compaction import ExtractiveSummarizer, Items, Summarize
from memstack.crypto import generate_key
from memstack.crypto.envelope import is_envelope
from memstack.errors import CapabilityError, ConfigurationError, DecryptionError
from memstack.layers import CompactionSession, EncryptedSession, SlidingWindowSession, TTLSession
from memstack.layers.ttl.record import MARKER
from memstack.testing import FakeClock

from .conftest import SQL_BACKENDS, Store
from .direct import backdate, stored
from .sessions import PlainSession

HOUR = 3600.0
KEY = generate_key()

BEFORE = [
    {"role": "user", "content": "written before memstack"},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    {"role": "assistant", "content": "done"},
]
LATER = {"role": "user", "content": "written through the layer"}


async def existing(store: Store) -> tuple[str, Any]:
    """A session holding ``BEFORE``, written by the bare SDK store."""
    session_id = f"adopt-{uuid.uuid4().hex[:12]}"
    bare = store.open(session_id)
    await bare.add_items(BEFORE)
    return session_id, bare


# -- TTL ------------------------------------------------------------------------------------
async def test_ttl_keeps_history_written_before_it(store: Store) -> None:
    session_id, bare = await existing(store)
    clock = FakeClock()
    ttl = TTLSession(bare, ttl=HOUR, clock=clock, purge_every=0)
    assert await ttl.get_items() == BEFORE
    await ttl.add_items([LATER])  # a write purges: nothing old may go
    assert await ttl.get_items() == [*BEFORE, LATER]
    assert await ttl.purge_expired() == 0
    assert len(await stored(store, session_id)) == 5


async def test_ttl_stamps_unstamped_items_on_first_sight_and_expires_them_later(
    store: Store,
) -> None:
    session_id, bare = await existing(store)
    clock = FakeClock()
    assert await TTLSession(bare, ttl=HOUR, clock=clock).get_items() == BEFORE
    # The first read stamped them in the store: another process counts from then too.
    assert all(MARKER in value for value in await stored(store, session_id))
    clock.tick(HOUR - 60)
    later = TTLSession(store.open(session_id), ttl=HOUR, clock=clock, purge_every=0)
    assert await later.get_items() == BEFORE
    clock.tick(120)
    assert await later.get_items() == []
    assert await later.purge_expired() == 4


# Stores that keep a per-item write time; the others count from first sight (tested above).
@pytest.mark.parametrize("store", SQL_BACKENDS, indirect=True)
async def test_ttl_counts_unstamped_items_from_the_stores_own_write_time(store: Store) -> None:
    session_id, bare = await existing(store)
    await bare.add_items([LATER])
    await backdate(store, session_id, 4)  # the store wrote BEFORE in the year 2000
    ttl = TTLSession(bare, ttl=HOUR, clock=FakeClock(), purge_every=0)
    assert await ttl.get_items() == [LATER]
    assert await ttl.purge_expired() == 4
    assert [value["item"] for value in await stored(store, session_id)] == [LATER]


async def test_ttl_adopt_is_explicit_and_idempotent(store: Store) -> None:
    _, bare = await existing(store)
    ttl = TTLSession(bare, ttl=HOUR, clock=FakeClock())
    with pytest.raises(ConfigurationError, match="max_attempts must be an int >= 1") as error:
        await ttl.adopt(max_attempts=0)
    assert error.value.session_id == ttl.session_id
    assert await ttl.adopt() == 4
    assert await ttl.adopt() == 0
    assert await ttl.get_items() == BEFORE


async def test_ttl_over_a_store_without_atomic_rewrites_shows_unstamped_items() -> None:
    plain = PlainSession("plain-adopt")
    plain.items = [dict(item) for item in BEFORE]
    clock = FakeClock()
    ttl = TTLSession(plain, ttl=HOUR, clock=clock)
    clock.tick(10 * HOUR)
    assert await ttl.get_items() == BEFORE  # never hidden, never deleted
    await ttl.add_items([LATER])
    assert await ttl.get_items() == [*BEFORE, LATER]
    assert plain.items[:4] == BEFORE
    tail = await ttl.storage_capabilities().read_tail(10)  # what a compaction above dates by
    assert tail.items == [*BEFORE, LATER]
    assert tail.written_at[:4] == [None] * 4 and tail.written_at[4] == clock()
    with pytest.raises(CapabilityError, match="allow_non_atomic"):
        await ttl.adopt()
    assert await ttl.adopt(allow_non_atomic=True) == 4
    clock.tick(HOUR)
    assert await ttl.get_items() == []


# -- encryption -------------------------------------------------------------------------------
async def test_encryption_over_plaintext_is_loud_until_adopted(store: Store) -> None:
    session_id, bare = await existing(store)
    encrypted = EncryptedSession(bare, key=KEY)
    with pytest.raises(DecryptionError, match="plaintext"):
        await encrypted.get_items()
    assert await stored(store, session_id) == BEFORE  # the failed read changed nothing
    assert await encrypted.adopt() == 4
    assert await encrypted.get_items() == BEFORE
    values = await stored(store, session_id)
    assert all(is_envelope(value) for value in values)
    assert "written before memstack" not in json.dumps(values)
    assert await encrypted.adopt() == 0


# -- views --------------------------------------------------------------------------------------
async def test_compaction_over_existing_history_keeps_it_visible(store: Store) -> None:
    session_id, bare = await existing(store)
    compaction = CompactionSession(
        bare,
        strategy=Summarize(ExtractiveSummarizer(), max_tokens=200),
        trigger=Items(50, target=10),
    )
    assert await compaction.get_items() == BEFORE
    await compaction.add_items([LATER])
    assert await compaction.get_items() == [*BEFORE, LATER]
    assert await stored(store, session_id) == [*BEFORE, LATER]


async def test_window_over_existing_history_keeps_it_visible(store: Store) -> None:
    session_id, bare = await existing(store)
    window = SlidingWindowSession(bare, max_items=10)
    assert await window.get_items() == BEFORE
    await window.add_items([LATER])
    assert await window.get_items() == [*BEFORE, LATER]
    assert await stored(store, session_id) == [*BEFORE, LATER]


# -- a whole stack --------------------------------------------------------------------------------
@pytest.mark.parametrize("ttl_below_encryption", [True, False], ids=["ttl-low", "ttl-high"])
async def test_a_full_stack_adopts_existing_history(
    store: Store, ttl_below_encryption: bool
) -> None:
    session_id, bare = await existing(store)
    ttl = LayerSpec("ttl", {"ttl": HOUR, "clock": FakeClock()})
    encrypted = LayerSpec("encrypted", {"key": KEY})
    specs = [ttl, encrypted] if ttl_below_encryption else [encrypted, ttl]
    stack = build_stack(bare, [*specs, LayerSpec("window", {"max_items": 20})])
    with pytest.raises(DecryptionError):
        await stack.get_items()
    counts = await adopt_stack(stack)
    # Below encryption, TTL already dated the plaintext on the failed read's first sight.
    assert counts == {"TTLSession": 0 if ttl_below_encryption else 4, "EncryptedSession": 4}
    assert await stack.get_items() == BEFORE
    assert await adopt_stack(stack) == {"TTLSession": 0, "EncryptedSession": 0}
    assert "written before memstack" not in json.dumps(await stored(store, session_id))
