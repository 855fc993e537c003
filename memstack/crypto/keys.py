"""Master keys: parsing, key ids, a keyring, and a password helper.

    >>> from memstack.crypto import Keyring, generate_key, key_id
    >>> old, new = generate_key(), generate_key()
    >>> ring = Keyring.of(new, old)  # the first key is the active one
    >>> ring.active_kid == key_id(new) and ring.key(key_id(old)) is not None
    True

A master key is 32 random bytes, given raw or as base64 (urlsafe or standard, padded or
not). Anything else is refused: a password run through HKDF is still only as hard to
guess as the password. Users who only have a password derive a key with
``key_from_password`` (scrypt, deliberately slow) and keep its salt next to the config.

Key ids name keys in stored envelopes, so a reader knows which key to use and rotation
knows what is stale. By default a key's id is a fingerprint (8 hex digits of a SHA-256
over the key); it identifies the key without revealing anything usable about it.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import os
import re
import string
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from memstack.errors import ConfigurationError

__all__ = [
    "KeyProvider",
    "Keyring",
    "generate_key",
    "key_from_password",
    "key_id",
    "keyring_from_env",
    "parse_key",
]

KEY_BYTES = 32
_KID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_PRINTABLE = frozenset(string.printable.encode("ascii"))
# Below these, 32 "random" bytes (or their base64 text) are almost surely typed by hand.
_MIN_DISTINCT_BYTES = 16
_MIN_DISTINCT_CHARS = 16


@runtime_checkable
class KeyProvider(Protocol):
    """Where master keys come from: a ``Keyring``, or a secret manager behind this shape.

    ``key(kid)`` returns the raw or base64 key for a key id, or None when unknown. A key
    id must always name the same key; the session caches what it derives from it.
    """

    @property
    def active_kid(self) -> str: ...

    def key(self, kid: str) -> bytes | str | None: ...


def generate_key() -> str:
    """A fresh random master key as unpadded urlsafe base64 (43 characters)."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).rstrip(b"=").decode("ascii")


def _decode_text(text: str) -> bytes | None:
    text = text.strip()
    try:
        padded = (text + "=" * (-len(text) % 4)).encode("ascii")
        altchars = b"-_" if ("-" in text or "_" in text) else None
        raw = base64.b64decode(padded, altchars=altchars, validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError):
        return None
    if len(raw) != KEY_BYTES:
        return None
    # Base64 of a random key mixes letter cases and digits; a hand-typed word does not.
    classes = [
        any(c.islower() for c in text),
        any(c.isupper() for c in text),
        any(c.isdigit() for c in text),
    ]
    if sum(classes) < 2 or len(set(text)) < _MIN_DISTINCT_CHARS:
        return None
    return raw


def _weak(raw: bytes) -> bool:
    return len(set(raw)) < _MIN_DISTINCT_BYTES or all(b in _PRINTABLE for b in raw)


def parse_key(value: bytes | str, *, field: str = "key") -> bytes:
    """The 32 raw bytes of a master key; ``ConfigurationError`` naming ``field`` otherwise."""
    raw: bytes | None
    if isinstance(value, bytes | bytearray) and len(value) == KEY_BYTES:
        raw = bytes(value)
    elif isinstance(value, bytes | bytearray):
        try:
            raw = _decode_text(bytes(value).decode("ascii"))
        except UnicodeDecodeError:
            raw = None
    elif isinstance(value, str):
        raw = _decode_text(value)
    else:
        raise ConfigurationError(f"{field} must be bytes or str, not {type(value).__name__}")
    if raw is None or _weak(raw):
        raise ConfigurationError(
            f"{field} must be 32 random bytes, raw or base64 (for example "
            "memstack.crypto.generate_key()); this value looks like a password or "
            "passphrase. For a password, use memstack.crypto.key_from_password(password, "
            "salt=...) and keep the salt"
        )
    return raw


def key_id(key: bytes | str) -> str:
    """The default id of a key: a short fingerprint, stable across processes."""
    digest = hashlib.sha256(b"memstack key id\x00" + parse_key(key)).hexdigest()
    return digest[:8]


def key_from_password(
    password: str, *, salt: bytes, n: int = 2**17, r: int = 8, p: int = 1
) -> bytes:
    """A master key from a password with scrypt; the same password and salt give the same key.

    ``salt`` is not secret but must be random (16+ bytes, e.g. ``os.urandom(16)``) and kept:
    without it the key cannot be derived again. The defaults cost about 128 MiB and a
    fraction of a second, which is the point.
    """
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    if not isinstance(password, str) or not password:
        raise ConfigurationError("password must be a non-empty string")
    if not isinstance(salt, bytes) or len(salt) < 16:
        raise ConfigurationError("salt must be at least 16 random bytes, e.g. os.urandom(16)")
    if n < 2**14 or n & (n - 1):
        raise ConfigurationError(f"n must be a power of two >= 2**14, got {n}")
    if r < 1 or p < 1:
        raise ConfigurationError(f"r and p must be >= 1, got r={r}, p={p}")
    return Scrypt(salt=salt, length=KEY_BYTES, n=n, r=r, p=p).derive(password.encode("utf-8"))


def check_kid(kid: object, *, field: str = "key id") -> str:
    if not isinstance(kid, str) or not _KID.fullmatch(kid):
        raise ConfigurationError(
            f"{field} must be 1-64 characters of letters, digits and . _ : -, got {kid!r}"
        )
    return kid


class Keyring:
    """Master keys by id: new items use the active one, reads accept any of them."""

    def __init__(self, keys: Mapping[str, bytes | str], *, active: str) -> None:
        if not keys:
            raise ConfigurationError("keyring needs at least one key")
        self._keys = {
            check_kid(kid): parse_key(key, field=f"keyring[{kid!r}]") for kid, key in keys.items()
        }
        if active not in self._keys:
            raise ConfigurationError(
                f"active must be one of the keyring's ids ({', '.join(self._keys)}), got {active!r}"
            )
        self._active = active

    @classmethod
    def of(cls, active: bytes | str, *older: bytes | str) -> Keyring:
        """A keyring whose ids are the keys' fingerprints; the first key is active."""
        keys: dict[str, bytes | str] = {}
        for key in (active, *older):
            kid = key_id(key)
            if kid in keys:
                raise ConfigurationError(f"the same key was given twice (key id {kid})")
            keys[kid] = key
        return cls(keys, active=key_id(active))

    @property
    def active_kid(self) -> str:
        return self._active

    @property
    def kids(self) -> Sequence[str]:
        return tuple(self._keys)

    def key(self, kid: str) -> bytes | None:
        return self._keys.get(kid)

    def __repr__(self) -> str:
        return f"Keyring(active={self._active!r}, kids={list(self._keys)!r})"


def keyring_from_env(active: str, older: Sequence[str] = ()) -> Keyring:
    """A ``Keyring.of`` the keys in the named environment variables; the first is active.

    For recipes: ``keyring = { provider = "memstack.crypto:keyring_from_env",
    active = "CHAT_KEY_2025", older = ["CHAT_KEY_2024"] }``.
    """
    values: list[str] = []
    for name in (active, *older):
        value = os.environ.get(name)
        if not value:
            raise ConfigurationError(f"environment variable {name!r} holding a key is not set")
        values.append(value)
    try:
        return _keyring_of(tuple(values))
    except ConfigurationError as exc:
        raise ConfigurationError(f"{exc.reason} (keys from {', '.join((active, *older))})") from exc


@functools.lru_cache(maxsize=16)
def _keyring_of(values: tuple[str, ...]) -> Keyring:
    # A recipe resolves its keyring for every stack it builds: the same variables' values
    # give one shared (immutable) Keyring, changed values a new one.
    return Keyring.of(*values)
