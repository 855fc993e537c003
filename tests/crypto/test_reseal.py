"""memstack.crypto.reseal: which stored values are re-sealed, and how the rewrite is guarded."""

from __future__ import annotations

from typing import Any

import pytest

from memstack import ConfigurationError, DecryptionError
from memstack.crypto import Keyring, generate_key, key_id
from memstack.crypto.envelope import SessionCipher
from memstack.crypto.reseal import read_stored, reseal, resealed
from memstack.testing import InMemoryCapabilities, InMemorySession

OLD, NEW = generate_key(), generate_key()
ITEM = {"role": "user", "content": "hi"}


def refuse_plaintext(value: object) -> dict[str, Any]:
    raise DecryptionError("plaintext item", key_id=None)


def test_only_stale_values_are_sealed_again() -> None:
    before = SessionCipher("s1", Keyring.of(OLD))
    after = SessionCipher("s1", Keyring.of(NEW, OLD))
    current, stale = after.seal(ITEM), before.seal(ITEM)
    fresh = resealed([current, stale], after, after.open, plaintext=False)
    assert fresh[0] == current  # already under the active key: kept byte for byte
    assert fresh[1] != stale and fresh[1]["kid"] == key_id(NEW)
    assert [after.open(value) for value in fresh] == [ITEM, ITEM]


def test_plaintext_is_sealed_as_is_only_when_adopting() -> None:
    cipher = SessionCipher("s1", Keyring.of(NEW))
    [sealed] = resealed([dict(ITEM)], cipher, refuse_plaintext, plaintext=True)
    assert cipher.open(sealed) == ITEM
    with pytest.raises(DecryptionError, match="plaintext item"):
        resealed([dict(ITEM)], cipher, refuse_plaintext, plaintext=False)


async def test_reseal_rewrites_the_store_and_reads_through_read() -> None:
    store = InMemorySession("s1")
    await store.add_items([SessionCipher("s1", Keyring.of(OLD)).seal(ITEM)] * 3)  # type: ignore[list-item]
    cipher = SessionCipher("s1", Keyring.of(NEW, OLD))
    reads: list[int] = []

    async def read(caps: Any) -> list[Any]:
        values = await read_stored(store, caps)
        reads.append(len(values))
        return values

    assert await reseal(store, cipher, cipher.open, plaintext=False, layer="L", read=read) == 3
    assert reads == [3]
    assert all(cipher.is_current(value) for value in await store.get_items())
    assert await reseal(store, cipher, cipher.open, plaintext=False, layer="L") == 0
    assert await read_stored(store, InMemoryCapabilities(store)) == await store.get_items()


@pytest.mark.parametrize("attempts", [0, True, 2.0])
async def test_max_attempts_must_be_an_int_of_at_least_one(attempts: Any) -> None:
    store = InMemorySession("s1")
    cipher = SessionCipher("s1", Keyring.of(NEW))
    with pytest.raises(ConfigurationError, match="max_attempts must be an int >= 1") as caught:
        await reseal(store, cipher, cipher.open, plaintext=False, layer="L", max_attempts=attempts)
    assert (caught.value.layer, caught.value.session_id) == ("L", "s1")
