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

import copy
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, cast

from agents.memory import Session
from pydantic import Field, PrivateAttr, model_validator

from memstack.backends.adapters import capabilities_of
from memstack.backends.capabilities import (
    Item,
    StorageCapabilities,
    Tail,
    read_shared_tail,
)
from memstack.backends.reuse import Reuse
from memstack.base import SessionLayer, limit_arg
from memstack.crypto.envelope import SessionCipher, is_envelope
from memstack.crypto.keys import KeyProvider, Keyring
from memstack.crypto.legacy import SDK_KID, SdkEnvelopeReader, is_sdk_envelope
from memstack.crypto.reseal import read_stored, reseal
from memstack.errors import ConfigurationError, DecryptionError
from memstack.layers.encrypted.capabilities import EncryptedCapabilities
from memstack.options import Flag, Options, Size

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
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
    _keys: KeyProvider = PrivateAttr()

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
    alters_what_it_reads = False
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
        )
        name = type(self).__name__
        self.keys: KeyProvider = options.keys
        self.compress = options.compress
        self.allow_plaintext = options.allow_plaintext
        self.unreadable: Unreadable = options.unreadable
        self._cipher = SessionCipher(
            self.session_id,
            self.keys,
            compress=options.compress,
            compress_min_bytes=options.compress_min_bytes,
            layer=name,
        )
        self._cipher.check_active_key()
        # Every item is opened anew from its envelope, so what is below may hand this layer
        # envelopes it shares between reads (a TTL layer's ``read_tail(shared=True)``, a
        # store's ``read_values(reuse=…)``), which are then recognised by identity. Not for
        # a subclass with an ``open`` of its own: it may pass a value through.
        self.opens_shared = type(self).open is EncryptedSession.open
        self._reuse = Reuse()  # the store's rows, when this layer sits on the store itself
        self._legacy = (
            None
            if options.legacy_sdk_key is None
            else SdkEnvelopeReader(self.session_id, options.legacy_sdk_key, layer=name)
        )

    # -- items in and out -------------------------------------------------------------------
    def seal(self, items: Sequence[object]) -> list[dict[str, Any]]:
        return [self._cipher.seal(item, index=index) for index, item in enumerate(items)]

    def open(self, stored: object) -> dict[str, Any]:
        """The item behind one stored value; ``DecryptionError`` if it cannot be trusted."""
        return self._open(stored, shared=False)

    def opener(self, tail: Tail) -> Callable[[object], dict[str, Any]]:
        """How to open ``tail``'s values: shared ones (``tail_below``) by identity when
        opened before; each call returns a fresh item."""
        return functools.partial(self._open, shared=True) if tail.shared else self.open

    def _open(self, stored: object, *, shared: bool) -> dict[str, Any]:
        if shared and (seen := self._cipher.reopen(stored)) is not None:
            return seen
        if is_envelope(stored):
            return self._cipher.open(stored, shared=shared)
        if is_sdk_envelope(stored):
            if self._legacy is None:
                raise self._cipher.error(
                    "found an SDK EncryptedSession envelope; pass legacy_sdk_key= to read "
                    "it, and migrate() to re-encrypt it",
                    SDK_KID,
                )
            return self._legacy.open(stored)
        if self.allow_plaintext and isinstance(stored, dict):
            return copy.deepcopy(stored)  # never the value below itself: it may be shared
        raise self._cipher.error(
            "found a plaintext item where an encrypted envelope belongs (history written "
            "before encryption? seal it with adopt() or `memstack adopt`; or pass "
            "allow_plaintext=True to read such items)"
        )

    async def newest_readable(
        self, n: int | None, fetch: Callable[[int | None], Awaitable[Tail]]
    ) -> Tail:
        """The newest ``n`` items (all with None) of what ``fetch(size)`` reads, opened.

        With ``unreadable="skip"`` a limit counts readable items, so a layer above that
        reads a tail of ``n`` and gets fewer never takes that for the start of the history:
        the read goes further back for each item skipped.
        """
        if self.unreadable == "raise":  # the hot path: one pass, nothing to skip
            tail = await fetch(n)
            return Tail(list(map(self.opener(tail), tail.items)), tail.written_at)
        size = n
        while True:
            tail = await fetch(size)
            opened = self._readable(tail.items, self.opener(tail))
            if size is None or size <= 0 or len(opened) >= size or len(tail.items) < size:
                break
            size *= 2
        if n is not None and n > 0:
            opened = opened[-n:]
        return Tail([item for _, item in opened], [tail.written_at[i] for i, _ in opened])

    async def tail_below(
        self, caps: StorageCapabilities, n: int, wrapper: RunContextWrapper[Any] | None
    ) -> Tail:
        """The newest ``n`` values below (through ``caps``): shared ones if ``opens_shared``."""
        if not self.opens_shared:
            return await caps.read_tail(n, wrapper=wrapper)
        if isinstance(self.inner, SessionLayer):
            return await read_shared_tail(caps, n, wrapper=wrapper)
        values = await caps.read_values(n, reuse=self._reuse, wrapper=wrapper)
        # Shared only if ``Reuse`` holds them all: an adapter that reads ``get_items``
        # returns what the store returns, which may be objects it holds and changes.
        return Tail.undated(values, shared=all(map(self._reuse.holds, values)))

    def _readable(
        self, stored: Sequence[object], open_one: Callable[[object], dict[str, Any]]
    ) -> list[tuple[int, dict[str, Any]]]:
        """Each readable stored value's index and item; the others are logged and left out."""
        opened = []
        for index, value in enumerate(stored):
            try:
                opened.append((index, open_one(value)))
            except DecryptionError as exc:
                logger.warning("skipping an unreadable item (unreadable='skip'): %s", exc)
        return opened

    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        caps = capabilities_of(self.inner) if self.opens_shared else None

        async def fetch(size: int | None) -> Tail:
            if caps is not None and size is not None and size > 0:
                return await self.tail_below(caps, size, wrapper)
            return Tail.undated(
                await self.inner.get_items(**limit_arg(size), **self.forward(wrapper))
            )

        tail = await self.newest_readable(limit, fetch)
        return cast("list[TResponseInputItem]", tail.items)

    async def add_items(
        self, items: list[TResponseInputItem], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        sealed = cast("list[TResponseInputItem]", self.seal(items))
        await self.inner.add_items(sealed, **self.forward(wrapper))

    async def pop_item(
        self, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> TResponseInputItem | None:
        # Popping must not destroy what cannot be read: look at the newest item first, so
        # an unreadable one stays where it is, with its write time, and the pop fails.
        newest = await self.tail_below(capabilities_of(self.inner), 1, wrapper)
        open_one = self.opener(newest)
        for value in newest.items:
            open_one(value)  # raises if it cannot be read
        stored = await self.inner.pop_item(**self.forward(wrapper))
        if stored is None:
            return None
        try:
            return cast("TResponseInputItem", self.open(stored))
        except DecryptionError:
            # Another writer put it there since the look: put it back, then fail.
            await self.inner.add_items([stored], **self.forward(wrapper))
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
        return options
