"""Crypto-shredding: per-user keys that one deleted row makes unrecoverable.

    >>> import asyncio
    >>> from memstack.backends import open_backend
    >>> from memstack.backends.whole_store import whole_store
    >>> from memstack.crypto import Keyring, generate_key
    >>> from memstack.governance.shred import UserKeys
    >>> store = whole_store(open_backend("sqlite://:memory:", "ann:t1"))
    >>> keys = UserKeys(store, Keyring.of(generate_key()))
    >>> ann = asyncio.run(keys.keyring("ann"))
    >>> ann.key(ann.active_kid) == asyncio.run(keys.keyring("ann")).key(ann.active_kid)
    True

A user's key = HKDF-SHA256(master key, salt = the user's random 32-byte salt, info =
``memstack/user-key`` + NUL + user id). The salt lives in the store's user-keys side
table (``agent_sessions_user_keys``, or ``<prefix>::memstack:user_keys`` on Redis), under
a SHA-256 of the user id. Encrypt a user's sessions with
``EncryptedSession(store, keyring=await keys.keyring(user))``; forgetting the user deletes
the salt first (``UserKeyEraser``), after which nothing encrypted under that key — a
backup, a replica, a row a job missed — can be decrypted, even with the master key.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from memstack.backends.whole_store import WholeStore
from memstack.crypto.keys import KeyProvider, Keyring, parse_key
from memstack.governance.erasers import ErasureRequest

__all__ = ["UserKeyEraser", "UserKeys", "user_ref"]

_INFO = b"memstack/user-key\x00"


def user_ref(user: str) -> str:
    """The name a user's salt is stored under: a SHA-256 of the user id."""
    return hashlib.sha256(_INFO + user.encode("utf-8")).hexdigest()


def _derive(master: bytes, salt: bytes, user: str) -> bytes:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=_INFO + user.encode())
    return hkdf.derive(master)


class UserKeys:
    """Per-user keyrings derived from a master keyring and each user's stored salt."""

    def __init__(self, store: WholeStore, master: KeyProvider) -> None:
        self.store = store
        self.master = master

    async def keyring(self, user: str) -> Keyring:
        """The user's keyring (same key ids as the master's), creating their salt if new."""
        salt = bytes.fromhex(await self.store.user_salt(user_ref(user), os.urandom(32).hex()))
        kids = list(getattr(self.master, "kids", None) or [self.master.active_kid])
        keys = {}
        for kid in kids:
            master = self.master.key(kid)
            if master is not None:
                keys[kid] = _derive(parse_key(master), salt, user)
        return Keyring(keys, active=self.master.active_kid)

    async def destroy(self, user: str) -> int:
        """Delete the user's salt: their key can never be derived again. Returns 0 or 1."""
        return await self.store.user_salt_delete([user_ref(user)])


class UserKeyEraser:
    """Forgetting shreds first: the user's key goes before their rows do."""

    name = "user_keys"

    async def erase(self, request: ErasureRequest) -> Mapping[str, int]:
        assert request.store is not None
        return {"user_keys": await request.store.user_salt_delete([user_ref(request.user)])}
