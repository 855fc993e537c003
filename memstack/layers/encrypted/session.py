"""Authenticated encryption of every item, with key rotation and loud failures.

    >>> import asyncio
    >>> from memstack.crypto import generate_key
    >>> from memstack.layers import EncryptedSession
    >>> from memstack.testing import InMemorySession
    >>> store = InMemorySession("user-42")
    >>> session = EncryptedSession(store, key=generate_key())
    >>> asyncio.run(session.add_items([{"role": "user", "content": "card 4111…"}]))
    >>> asyncio.run(session.get_items())
    [{'role': 'user', 'content': 'card 4111…'}]
    >>> "4111" in str(store.rows)
    False

Every item is sealed whole into a format-1 envelope (``memstack.crypto.envelope``):
AES-256-GCM under a key derived per session from the master key and bound to the session
id, so the layers below (and whoever reads the store) see one opaque envelope per item
and nothing of its content. Anything that cannot be authenticated raises
``DecryptionError``: a wrong key must never look like an empty history.

This file only wires the parts: options (``EncryptedOptions``), the cipher
(``memstack.crypto.envelope``), the SDK's envelopes (``memstack.crypto.legacy``),
rotation, migration and adoption (``memstack.crypto.reseal``) and the capability adapter
(``capabilities``). The README's encryption section lists what the layers
below still see, and what each option changes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from agents.memory import Session
from pydantic import Field, PrivateAttr, field_validator, model_validator

from memstack.backends.adapters import capabilities_of
from memstack.backends.capabilities import Item, StorageCapabilities, Tail
from memstack.base import SessionLayer
from memstack.content_keys import derived_keys
from memstack.crypto.envelope import SessionCipher, is_envelope
from memstack.crypto.keys import KeyProvider, Keyring
from memstack.crypto.legacy import SDK_KID, SdkEnvelopeReader, is_sdk_envelope
from memstack.crypto.reseal import read_stored, reseal
from memstack.errors import ConfigurationError, DecryptionError, ForeignRecordError
from memstack.formats import ENCRYPTION_FORMATS, refuse_foreign
from memstack.layers.encrypted.capabilities import EncryptedCapabilities
from memstack.options import Flag, Options, Size
from memstack.pipeline import Need
from memstack.tokens import remember_sealed, sealed_parts
from memstack.vocab import OFFLINE_ENCODINGS

if TYPE_CHECKING:
    from agents.run_context import RunContextWrapper

__all__ = ["EncryptedCapabilities", "EncryptedSession"]

logger = logging.getLogger("memstack.encrypted")

Unreadable = Literal["raise", "skip"]

# Keys stay out of every message and repr: typed Any, they never fail as a field (which
# would echo the value); the rules below name a wrong keyring by its type.
Secret = Annotated[Any, Field(repr=False)]


class EncryptedOptions(Options, layer="EncryptedSession"):
    key: Secret = None
    keyring: Secret = None
    compress: Flag = True
    compress_min_bytes: Size = 64
    legacy_sdk_key: Secret = None
    allow_plaintext: Flag = False
    unreadable: Annotated[Unreadable, Field(description="'raise' or 'skip'")] = "raise"
    token_counts: Annotated[
        str | None, Field(description=f"None or one of {', '.join(OFFLINE_ENCODINGS)}")
    ] = None
    _keys: KeyProvider = PrivateAttr()

    @field_validator("token_counts")
    @classmethod
    def _known_encoding(cls, value: str | None) -> str | None:
        if value is not None and value not in OFFLINE_ENCODINGS:
            raise ValueError(f"must be None or one of {', '.join(OFFLINE_ENCODINGS)}")
        return value

    @model_validator(mode="after")
    def _one_key_source(self) -> Self:
        if (self.key is None) == (self.keyring is None):
            raise ValueError("pass exactly one of key= or keyring=")
        if self.keyring is not None and not isinstance(self.keyring, KeyProvider):
            raise ValueError(
                "keyring must be a memstack.crypto.Keyring or provide active_kid and "
                f"key(kid), not {type(self.keyring).__name__}"
            )
        try:
            self._keys = self.keyring if self.keyring is not None else Keyring.of(self.key)
        except ConfigurationError as exc:
            raise ValueError(exc.reason) from exc
        return self

    @property
    def keys(self) -> KeyProvider:
        """The key provider: ``keyring``, or a ``Keyring`` of ``key`` alone."""
        return self._keys


class EncryptedSession(SessionLayer):
    """Stores every item as an authenticated, encrypted envelope."""

    layer_name = "encrypted"
    transforms_items = True

    def __init__(
        self,
        inner: Session,
        *,
        key: bytes | str | None = None,
        keyring: KeyProvider | None = None,
        compress: bool = True,
        compress_min_bytes: int = 64,
        legacy_sdk_key: str | None = None,
        allow_plaintext: bool = False,
        unreadable: Unreadable = "raise",
        token_counts: str | None = None,
    ) -> None:
        super().__init__(inner)
        options = EncryptedOptions.check(
            key=key,
            keyring=keyring,
            compress=compress,
            compress_min_bytes=compress_min_bytes,
            legacy_sdk_key=legacy_sdk_key,
            allow_plaintext=allow_plaintext,
            unreadable=unreadable,
            token_counts=token_counts,
        )
        name = type(self).__name__
        self.keys: KeyProvider = options.keys
        self.compress = options.compress
        self.allow_plaintext = options.allow_plaintext
        self.unreadable: Unreadable = options.unreadable
        # Each item's token count parts sealed with it (format-2 envelopes), so a new
        # process's first read tokenises none of them; None writes format 1 (readable by
        # memstack before 2026-11-28).
        self.token_counts = options.token_counts
        self._cipher = SessionCipher(
            self.session_id,
            self.keys,
            compress=options.compress,
            compress_min_bytes=options.compress_min_bytes,
            facts=None if options.token_counts is None else sealed_parts(options.token_counts),
            layer=name,
        )
        self._cipher.check_active_key()
        self._legacy = (
            None
            if options.legacy_sdk_key is None
            else SdkEnvelopeReader(self.session_id, options.legacy_sdk_key, layer=name)
        )

    # -- items in and out -------------------------------------------------------------------
    def seal(self, items: Sequence[object]) -> list[dict[str, Any]]:
        return self._cipher.seal_all(items)

    def open(self, stored: object) -> dict[str, Any]:
        """The item behind one stored value; ``DecryptionError`` if it cannot be trusted."""
        return self._opened([stored])[0]

    def open_all(self, stored: Sequence[object]) -> list[dict[str, Any]]:
        """The items behind stored values (read-only: they may be the process cache's).

        A subclass with an ``open`` of its own has each value opened by it.
        """
        if type(self).open is not EncryptedSession.open:
            return [self.open(value) for value in stored]
        return self._opened(stored)

    def _opened(self, stored: Sequence[object]) -> list[dict[str, Any]]:
        if all(is_envelope(value) for value in stored):  # the hot path: one batch
            return self._cipher.open_all(stored)
        refuse_foreign(stored, session_id=self.session_id, own=ENCRYPTION_FORMATS)
        return [self._open_other(value) for value in stored]

    def _open_other(self, stored: object) -> dict[str, Any]:
        if is_envelope(stored):
            return self._cipher.open(stored)
        if is_sdk_envelope(stored):
            if self._legacy is None:
                raise self._cipher.error(
                    "found an SDK EncryptedSession envelope; pass legacy_sdk_key= to read "
                    "it, and migrate() to re-encrypt it",
                    SDK_KID,
                )
            return self._legacy.open(stored)
        if self.allow_plaintext and isinstance(stored, dict):
            return stored  # read-only like every value read: never cached as opened
        raise self._cipher.error(
            "found a plaintext item where an encrypted envelope belongs (history written "
            "before encryption? seal it with adopt() or `memstack adopt`; or pass "
            "allow_plaintext=True to read such items)"
        )

    def readable(self, tail: Tail) -> Tail:
        """``tail`` opened; with ``unreadable="skip"`` the items that cannot be are left out
        (logged), so a limit counts readable items and a read goes further back for each."""
        if self.unreadable == "raise" and type(self).open is EncryptedSession.open:
            found = self._cipher.open_keyed(tail.items, tail.keys, b"opened envelope")
            if found is not None:
                items, keys, facts = found
                if not tail.complete:  # a longer read finds these opened, without their facts
                    remember_sealed(items, keys, facts)
                    return Tail(items, tail.written_at, keys, tail.complete, tail.reach)
                sealed = facts if any(facts) else ()  # a warm read opens few afresh, or none
                return Tail(items, tail.written_at, keys, True, tail.reach, sealed)
        keys = derived_keys(tail.keys, b"opened envelope")
        if self.unreadable == "raise":
            return Tail(self.open_all(tail.items), tail.written_at, keys, tail.complete, tail.reach)
        kept, items = [], []
        for index, value in enumerate(tail.items):
            try:
                items.append(self.open(value))
            except DecryptionError as exc:
                logger.warning("skipping an unreadable item (unreadable='skip'): %s", exc)
                continue
            kept.append(index)
        times = [tail.written_at[i] for i in kept]
        return Tail(items, times, [keys[i] for i in kept], tail.complete, tail.reach)

    # -- the layer protocol -----------------------------------------------------------------
    async def shape(self, below: Tail, wrapper: RunContextWrapper[Any] | None) -> Tail | Need:
        return self.readable(below)

    async def write(self, items: Sequence[Any], wrapper: RunContextWrapper[Any] | None) -> None:
        await self.write_below(self.seal(items), wrapper)

    async def pop(self, wrapper: RunContextWrapper[Any] | None) -> Any:
        # Popping must not destroy what cannot be read: look at the newest item first, so
        # an unreadable one stays where it is, with its write time, and the pop fails.
        newest = await self.newest_below(1, wrapper)
        self.open_all(newest.items[-1:])  # raises if it cannot be read
        stored = await self.pop_below(wrapper)
        if stored is None:
            return None
        try:
            return self.open(stored)
        except (DecryptionError, ForeignRecordError):
            # Another writer put it there since the look: put it back, then fail.
            await self.write_below([stored], wrapper)
            raise

    # -- capabilities and maintenance --------------------------------------------------------
    def storage_capabilities(self) -> StorageCapabilities:
        return EncryptedCapabilities(self)

    async def stored(self, caps: StorageCapabilities | None = None) -> list[Item]:
        """Every envelope as the layer below holds it, oldest first (no session limit)."""
        return await read_stored(self.inner, caps or capabilities_of(self.inner))

    async def adopt(self, *, allow_non_atomic: bool = False, max_attempts: int = 5) -> int:
        """Seal the plaintext history written before this layer existed; return how many.

        Reads never accept plaintext unless ``allow_plaintext=True``: adopting is the
        explicit step, one atomic rewrite like ``rotate`` (which it also does).
        """
        return await self._reseal(allow_non_atomic, max_attempts, plaintext=True)

    async def rotate(self, *, allow_non_atomic: bool = False, max_attempts: int = 5) -> int:
        """Re-encrypt every stored item not yet under the active key; return how many.

        One ``replace_oldest`` transaction guarded by what was read, read again when the
        history changed meanwhile (``max_attempts`` times in all). A store without atomic
        rewrites is refused unless ``allow_non_atomic=True`` (clear and refill; see
        ``memstack.crypto.reseal``).
        """
        return await self._reseal(allow_non_atomic, max_attempts, plaintext=False)

    async def migrate(self, *, allow_non_atomic: bool = False, max_attempts: int = 5) -> int:
        """Re-encrypt SDK envelopes and admitted plaintext in this format; same as ``rotate``."""
        return await self.rotate(allow_non_atomic=allow_non_atomic, max_attempts=max_attempts)

    async def _reseal(self, allow_non_atomic: bool, max_attempts: int, *, plaintext: bool) -> int:
        return await reseal(
            self.inner,
            self._cipher,
            self.open,
            plaintext=plaintext,
            layer=type(self).__name__,
            allow_non_atomic=allow_non_atomic,
            max_attempts=max_attempts,
            read=self.stored,
        )

    def repr_options(self) -> dict[str, object]:
        options: dict[str, object] = {"kid": self._cipher.active_kid}
        kids = getattr(self.keys, "kids", None)
        if kids is not None and len(kids) > 1:
            options["kids"] = list(kids)
        options["compress"] = self.compress
        if self._legacy is not None:
            options["legacy_sdk_key"] = "***"
        if self.allow_plaintext:
            options["allow_plaintext"] = True
        if self.unreadable != "raise":
            options["unreadable"] = self.unreadable
        if self.token_counts is not None:
            options["token_counts"] = self.token_counts
        return options
