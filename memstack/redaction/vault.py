"""The vault: originals sealed under the session's key, restorable only with that key.

    >>> from memstack.crypto import Keyring, generate_key
    >>> from memstack.redaction.vault import VaultCipher, vault_tokens
    >>> cipher = VaultCipher("ann:t1", Keyring.of(generate_key()))
    >>> cipher.open(cipher.seal("email", "ann@example.com"))
    'ann@example.com'
    >>> vault_tokens("write to [EMAIL:vault:0123456789abcdef]")
    ['0123456789abcdef']

A vaulted value is replaced in the item by ``[LABEL:vault:<16 hex>]``; the side table
holds, per session and token, the original sealed in memstack's envelope format
(``memstack.crypto.envelope``) under a key derived from the master key and
``memstack/vault`` + the session id, so an entry neither opens in another session nor
passes for a stored item. ``reveal`` is the one way back, and it needs the key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from agents.memory import Session

from memstack.crypto.envelope import SessionCipher
from memstack.crypto.keys import KeyProvider, Keyring
from memstack.errors import DecryptionError
from memstack.redaction.rewrite import rewrite_item

__all__ = ["VaultCipher", "reveal", "vault_tokens"]

TOKEN = re.compile(r"\[[A-Z0-9_]+:vault:([0-9a-f]{16})\]")
_DOMAIN = "memstack/vault\x00"


def vault_tokens(text: str) -> list[str]:
    """The vault tokens in ``text``, in order."""
    return TOKEN.findall(text)


class VaultCipher:
    """Seals and opens one session's vault entries."""

    def __init__(self, session_id: str, keys: KeyProvider, *, layer: str | None = None) -> None:
        self._cipher = SessionCipher(_DOMAIN + session_id, keys, compress=False, layer=layer)
        self._cipher.check_active_key()

    def seal(self, detector: str, value: str) -> str:
        return json.dumps(self._cipher.seal({"v": 1, "detector": detector, "value": value}))

    def _envelope(self, sealed: str) -> Any:
        try:
            return json.loads(sealed)
        except ValueError as exc:
            raise self._cipher.error("vault entry is not JSON") from exc

    def is_current(self, sealed: str) -> bool:
        """True when the entry is sealed under the active key (rotation skips it)."""
        return self._cipher.is_current(self._envelope(sealed))

    def reseal(self, sealed: str) -> str:
        """The entry sealed again under the active key."""
        entry = self._cipher.open(self._envelope(sealed))
        return json.dumps(self._cipher.seal(entry))

    def open(self, sealed: str) -> str:
        entry = self._cipher.open(self._envelope(sealed))
        value = entry.get("value")
        if entry.get("v") != 1 or not isinstance(value, str):
            raise self._cipher.error("vault entry has an unknown layout")
        return value


async def reveal(
    session: Session,
    items: Sequence[dict[str, Any]],
    *,
    key: bytes | str | None = None,
    keyring: KeyProvider | None = None,
) -> list[dict[str, Any]]:
    """``items`` with vault tokens replaced by the originals, opened with ``key``.

    A token whose entry is gone (the user was forgotten, the session cleared) stays as
    it is. A wrong key raises ``DecryptionError``.
    """
    from memstack.backends.whole_store import whole_store

    if (key is None) == (keyring is None):
        raise DecryptionError("reveal needs exactly one of key= or keyring=", layer="vault")
    keys = keyring if keyring is not None else Keyring.of(key)  # type: ignore[arg-type]
    cipher = VaultCipher(session.session_id, keys, layer="vault")
    wanted = vault_tokens(json.dumps(list(items)))
    sealed = await whole_store(session).vault_get(session.session_id, wanted)
    originals = {token: cipher.open(value) for token, value in sealed.items()}

    def restore(text: str) -> str:
        return TOKEN.sub(lambda m: originals.get(m[1], m[0]), text)

    return [rewrite_item(item, restore) for item in items]
