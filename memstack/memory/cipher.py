"""Memory text at rest: sealed payloads and a keyed token index that stays searchable.

    >>> from memstack.crypto import Keyring, generate_key
    >>> from memstack.memory.cipher import MemoryCipher
    >>> cipher = MemoryCipher(Keyring.of(generate_key()))
    >>> stored = cipher.seal("user-42", {"text": "allergic to peanuts"})
    >>> "peanut" in stored
    False
    >>> cipher.open("user-42", stored)
    {'text': 'allergic to peanuts'}
    >>> [mine] = cipher.term_digests("user-42", "peanut")
    >>> [theirs] = cipher.term_digests("user-7", "peanut")
    >>> mine == cipher.term_digests("user-42", "peanut")[0] != theirs
    True

With a key, a memory's text, key name, data and provenance are sealed in the
``EncryptedSession`` envelope (format 1, AES-256-GCM), with a per-scope key derived from
the same master keys, so the same keyrings and rotation apply. Search terms are stored as
64-bit HMAC-SHA256 digests under a per-scope, per-key index key: the database can match
equal terms but learns no words, and digests of one scope say nothing about another's.
A query hashes its terms under every key id still in the keyring, so rows not yet rotated
stay findable.

Without a key, payloads are JSON and terms are unkeyed BLAKE2b digests: one index format
for every backend and both modes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from memstack.crypto.envelope import SessionCipher
from memstack.crypto.keys import KeyProvider, Keyring, check_kid, parse_key
from memstack.errors import ConfigurationError, DecryptionError

__all__ = ["PLAIN_KID", "MemoryCipher", "keys_from"]

PLAIN_KID = ""
_LABEL = b"memstack/memory/1"
_LAYER = "MemoryStore"
_UNKEYED = b"memstack/memory/unkeyed/1"
_TERM_CACHE = 200_000


def keys_from(key: bytes | str | None, keyring: KeyProvider | None) -> KeyProvider | None:
    """One key provider from either ``key`` or ``keyring`` (never both)."""
    if key is not None and keyring is not None:
        raise ConfigurationError("give key or keyring, not both", layer=_LAYER)
    if key is not None:
        return Keyring.of(key)
    if keyring is not None and not isinstance(keyring, KeyProvider):
        raise ConfigurationError(
            f"keyring must be a KeyProvider (e.g. memstack.crypto.Keyring), not "
            f"{type(keyring).__name__}",
            layer=_LAYER,
        )
    return keyring


def _signed64(digest: bytes) -> int:
    return int.from_bytes(digest[:8], "big", signed=True)


class MemoryCipher:
    """Seals payloads and digests terms and keys for one store; ``keys=None`` is plaintext."""

    def __init__(self, keys: KeyProvider | None) -> None:
        self.keys = keys
        self._ciphers: dict[str, SessionCipher] = {}
        self._index_keys: dict[tuple[str, str], bytes] = {}
        self._terms: dict[tuple[str, str, str], int] = {}

    @property
    def encrypted(self) -> bool:
        return self.keys is not None

    @property
    def active_kid(self) -> str:
        if self.keys is None:
            return PLAIN_KID
        return check_kid(self.keys.active_kid, field="active key id")

    def kids(self) -> list[str]:
        """Key ids a query must try: the active one first, then any others the ring lists."""
        if self.keys is None:
            return [PLAIN_KID]
        listed = getattr(self.keys, "kids", ())
        return [self.active_kid, *(k for k in listed if k != self.active_kid)]

    def check(self) -> None:
        """Fail at open time, not at the first write, when the active key is unusable."""
        if self.keys is not None:
            self._cipher("check").check_active_key()

    # -- payloads --------------------------------------------------------------------------
    def _cipher(self, scope: str) -> SessionCipher:
        cipher = self._ciphers.get(scope)
        if cipher is None:
            assert self.keys is not None
            cipher = SessionCipher(f"memstack-memory:{scope}", self.keys, layer=_LAYER)
            self._ciphers[scope] = cipher
        return cipher

    def seal(self, scope: str, payload: Mapping[str, Any]) -> str:
        if self.keys is None:
            return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        return json.dumps(self._cipher(scope).seal(dict(payload)), separators=(",", ":"))

    def open(self, scope: str, stored: str) -> dict[str, Any]:
        try:
            value = json.loads(stored)
        except ValueError as exc:
            raise DecryptionError(f"memory payload is not JSON: {exc}", layer=_LAYER) from exc
        if not isinstance(value, dict):
            raise DecryptionError("memory payload is not an object", layer=_LAYER)
        if "menc" in value:
            if self.keys is None:
                raise DecryptionError(
                    "memory is encrypted but the store was opened without a key", layer=_LAYER
                )
            return self._cipher(scope).open(value)
        if self.keys is not None:
            raise DecryptionError(
                "memory is stored in plaintext but the store has a key (tampering, or rows "
                "written without a key)",
                layer=_LAYER,
            )
        return value

    def is_current(self, stored_kid: str) -> bool:
        return stored_kid == self.active_kid

    # -- digests ---------------------------------------------------------------------------
    def _index_key(self, kid: str, scope: str) -> bytes:
        cached = self._index_keys.get((kid, scope))
        if cached is None:
            if self.keys is None:
                cached = _UNKEYED
            else:
                master = self.keys.key(kid)
                if master is None:
                    raise DecryptionError(
                        f"no key for key id {kid!r} in the key provider", layer=_LAYER
                    )
                cached = HKDF(
                    algorithm=hashes.SHA256(),
                    length=32,
                    salt=_LABEL,
                    info=b"index-key\x00" + scope.encode("utf-8"),
                ).derive(parse_key(master, field=f"key {kid!r}"))
            self._index_keys[(kid, scope)] = cached
        return cached

    def term_digest(self, kid: str, scope: str, term: str) -> int:
        cache_key = (kid, scope, term)
        digest = self._terms.get(cache_key)
        if digest is None:
            if len(self._terms) > _TERM_CACHE:
                self._terms.clear()
            digest = self._terms[cache_key] = _digest(self._index_key(kid, scope), "t\x00" + term)
        return digest

    def term_digests(self, scope: str, term: str) -> list[int]:
        """The term's digest under every key a stored row may use."""
        return [self.term_digest(kid, scope, term) for kid in self.kids()]

    def key_digest(self, kid: str, scope: str, key: str) -> str:
        value = _digest(self._index_key(kid, scope), "k\x00" + key) & (2**64 - 1)
        return f"{value:016x}"

    def key_digests(self, scope: str, key: str) -> list[str]:
        return [self.key_digest(kid, scope, key) for kid in self.kids()]


def _digest(index_key: bytes, value: str) -> int:
    if index_key == _UNKEYED:
        return _signed64(
            hashlib.blake2b(value.encode("utf-8"), digest_size=8, key=_UNKEYED).digest()
        )
    return _signed64(hmac.digest(index_key, value.encode("utf-8"), "sha256"))
