"""Opened envelopes are cached for the whole process: never across sessions, keys or revocation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memstack import DecryptionError, EncryptedSession, cache
from memstack.crypto import Keyring, generate_key, key_id
from memstack.testing import InMemorySession, sample_items

ITEMS = sample_items(4)


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


class Provider:
    """A key provider of your own (a secret manager): keys can be dropped or swapped."""

    def __init__(self, keys: dict[str, str], active: str, *, raises: bool = False) -> None:
        self.keys, self.active_kid, self.raises = dict(keys), active, raises

    def key(self, kid: str) -> str | None:
        if self.raises and kid not in self.keys:
            raise KeyError(kid)
        return self.keys.get(kid)


async def test_an_envelope_moved_to_another_session_fails_though_opened_before() -> None:
    key = generate_key()
    alice, bob = InMemorySession("alice"), InMemorySession("bob")
    await EncryptedSession(alice, key=key).add_items(ITEMS)
    assert await EncryptedSession(alice, key=key).get_items() == ITEMS  # now cached
    bob.rows.extend(alice.rows)  # the same envelopes, in another session, same key
    with pytest.raises(DecryptionError, match="another session"):
        await EncryptedSession(bob, key=key).get_items()


async def test_two_keys_in_one_process_never_answer_for_each_other() -> None:
    first, second = generate_key(), generate_key()
    store = InMemorySession("s1")
    # One key id, two key materials (two tenants' providers that name keys alike).
    one, other = Provider({"k": first}, "k"), Provider({"k": second}, "k")
    await EncryptedSession(store, keyring=one).add_items(ITEMS)
    assert await EncryptedSession(store, keyring=one).get_items() == ITEMS
    with pytest.raises(DecryptionError, match="cannot authenticate"):
        await EncryptedSession(store, keyring=other).get_items()
    # And with ids from the keys themselves: the other key has no id for these envelopes.
    with pytest.raises(DecryptionError, match="does not hold"):
        await EncryptedSession(store, key=second).get_items()


async def test_a_key_dropped_from_its_provider_stops_a_live_stack_at_once() -> None:
    old, new = generate_key(), generate_key()
    provider = Provider({key_id(old): old, key_id(new): new}, key_id(new))
    store = InMemorySession("s1")
    await EncryptedSession(store, keyring=Keyring.of(old)).add_items(ITEMS)
    live = EncryptedSession(store, keyring=provider)
    assert await live.get_items() == ITEMS  # read, and cached
    del provider.keys[key_id(old)]  # revoked
    with pytest.raises(DecryptionError, match="does not hold") as caught:
        await live.get_items()
    assert caught.value.key_id == key_id(old)
    with pytest.raises(DecryptionError):
        await EncryptedSession(store, keyring=provider).get_items()  # and for any stack


async def test_a_provider_that_raises_key_error_is_a_decryption_error() -> None:
    old, new = generate_key(), generate_key()
    store = InMemorySession("s1")
    await EncryptedSession(store, key=old).add_items(ITEMS)
    strict = Provider({key_id(new): new}, key_id(new), raises=True)
    with pytest.raises(DecryptionError, match="does not hold"):
        await EncryptedSession(store, keyring=strict).get_items()


async def test_a_failure_is_never_cached_and_plaintext_never_enters_the_cache() -> None:
    key = generate_key()
    store = InMemorySession("s1")
    session = EncryptedSession(store, key=key, allow_plaintext=True)
    await session.add_items(ITEMS[:1])
    good = store.rows[0]
    store.rows[0] = good.replace('"ct": "', '"ct": "AAAA', 1)
    for _ in range(2):  # raises each time: nothing about it was kept
        with pytest.raises(DecryptionError):
            await session.get_items()
    store.rows[0] = good
    assert await session.get_items() == ITEMS[:1]

    def entries() -> int:  # items kept one by one, and reads kept whole
        kinds = cache.stats()
        return sum(kinds[kind].entries for kind in ("envelopes", "opened") if kind in kinds)

    kept = entries()
    await store.add_items([{"role": "user", "content": "plain"}])
    view = await session.get_items()
    assert view == [*ITEMS[:1], {"role": "user", "content": "plain"}]
    assert entries() == kept  # admitted, not cached
    view[-1]["content"] = "changed by the caller"
    assert (await session.get_items())[-1] == {"role": "user", "content": "plain"}
