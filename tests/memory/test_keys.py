"""A key that cannot read a scope is refused before anything is written or silently missed."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from memstack.crypto import Keyring, generate_key
from memstack.errors import DecryptionError
from memstack.memory import MemoryStore

from .conftest import MEMORY_BACKENDS, memory_url


@pytest.fixture(params=MEMORY_BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return memory_url(request.param, tmp_path)


async def test_a_wrong_key_is_refused_not_an_empty_recall(url: str) -> None:
    scope, key = f"user-{uuid.uuid4().hex[:12]}", generate_key()
    right = MemoryStore.from_url(url, key=key)
    await right.remember(scope, "Allergic to peanuts")
    await right.write(scope, "city", "Lyon")
    await right.close()

    wrong = MemoryStore.from_url(url, key=generate_key())
    try:
        for attempt in (
            wrong.recall(scope, "peanuts"),
            wrong.read(scope, "city"),
            wrong.keys(scope),
            wrong.remember(scope, "would poison the scope"),
            wrong.forget(scope, key="city"),
        ):
            with pytest.raises(DecryptionError, match="which the key provider does not hold"):
                await attempt
        # Other scopes, and erasing this one (no key needed), still work.
        assert not await wrong.recall(f"other-{uuid.uuid4().hex[:8]}", "peanuts")
    finally:
        await wrong.close()

    keyless = MemoryStore.from_url(url)
    try:
        with pytest.raises(DecryptionError, match="opened without a key") as error:
            await keyless.remember(scope, "plaintext among envelopes")
        assert error.value.key_id is not None
        assert await keyless.forget(scope) == 2  # a whole-scope forget needs no key
    finally:
        await keyless.close()


async def test_plaintext_memories_refuse_a_keyed_store(url: str) -> None:
    scope = f"user-{uuid.uuid4().hex[:12]}"
    plain = MemoryStore.from_url(url)
    await plain.remember(scope, "Prefers tea")
    await plain.close()
    keyed = MemoryStore.from_url(url, key=generate_key())
    try:
        with pytest.raises(DecryptionError, match="stored in plaintext"):
            await keyed.recall(scope, "tea")
    finally:
        await keyed.close()


async def test_an_older_key_in_the_ring_reads_and_rotates(url: str) -> None:
    scope, old, new = f"user-{uuid.uuid4().hex[:12]}", generate_key(), generate_key()
    before = MemoryStore.from_url(url, key=old)
    await before.remember(scope, "Lives in Lyon")
    await before.close()
    both = MemoryStore.from_url(url, keyring=Keyring.of(new, old))
    try:
        assert [m.text for m in await both.recall(scope, "Lyon")] == ["Lives in Lyon"]
        assert await both.rotate(scope) == 1
    finally:
        await both.close()
    after = MemoryStore.from_url(url, key=new)
    try:
        assert [m.text for m in await after.recall(scope, "Lyon")] == ["Lives in Lyon"]
    finally:
        await after.close()
