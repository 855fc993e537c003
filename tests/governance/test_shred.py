"""Crypto-shredding on every store: a user's key cannot be derived once forgotten."""

from __future__ import annotations

import uuid

import pytest

from memstack import DecryptionError, EncryptedSession
from memstack.backends.whole_store import whole_store
from memstack.crypto import Keyring, generate_key
from memstack.governance import forget
from memstack.governance.shred import UserKeys

from ..conftest import SHARED_BACKENDS, Store


@pytest.mark.parametrize("store", SHARED_BACKENDS, indirect=True)
async def test_forgetting_shreds_the_users_key(store: Store) -> None:
    tag = uuid.uuid4().hex[:8]
    ann, bob = f"ann-{tag}", f"bob-{tag}"
    master = Keyring.of(generate_key(), generate_key())
    wide = whole_store(store.open(f"{bob}:admin"))
    keys = UserKeys(wide, master)
    ring = await keys.keyring(ann)
    assert (await keys.keyring(ann)).key(ring.active_kid) == ring.key(ring.active_kid)
    assert (await keys.keyring(bob)).key(ring.active_kid) != ring.key(ring.active_kid)
    assert set(ring.kids) == set(master.kids)

    raw = store.open(f"{ann}:t1")
    await EncryptedSession(raw, keyring=ring).add_items([{"role": "user", "content": "secret"}])
    backup = await raw.get_items()  # a copy memstack will never see again

    report = await forget(wide, ann)
    assert report.removed["user_keys"] == 1 and report.removed["sessions"] == 1

    restored = store.open(f"{ann}:t1")  # the backup put back where it came from
    await restored.add_items(backup)
    for attempt in (await keys.keyring(ann), master):  # a fresh salt; the master alone
        with pytest.raises(DecryptionError):
            await EncryptedSession(restored, keyring=attempt).get_items()
    # Only the shredded key itself would still open it: the test can tell the difference.
    assert await EncryptedSession(restored, keyring=ring).get_items() == [
        {"role": "user", "content": "secret"}
    ]
    await restored.clear_session()
    assert await keys.destroy(bob) == 1 and await keys.destroy(bob) == 0
