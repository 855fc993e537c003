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

Every item is sealed whole into a format-1 envelope (``memstack.crypto.envelope``
documents it): AES-256-GCM under a key derived per session from the master key, bound
to the session id. The layers below see only ``{"menc": 1, "kid": …, "ct": …}``, one per
item, in the original order; so item count, order, approximate sizes, the key id and the
store's own timestamps remain visible to them, and nothing else.

Anything that cannot be authenticated raises ``DecryptionError`` naming the session and
the key id: a wrong or dropped key, a tampered, truncated or relabelled envelope, an
unknown format version, an SDK ``EncryptedSession`` envelope without ``legacy_sdk_key``,
and a plaintext item unless ``allow_plaintext=True``. With ``unreadable="skip"`` reads
leave such items out (and log a warning) instead; nothing is ever deleted for them.

``rotate()`` re-encrypts stored history under the active key in one ``replace_oldest``
transaction, retried when the history changed meanwhile; afterwards older keys can be
dropped. ``migrate()`` is the same operation, for bringing SDK envelopes (with
``legacy_sdk_key``) or plaintext (with ``allow_plaintext=True``) into this format;
``adopt()`` seals plaintext history written before the layer, without that option.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from agents.memory import Session

from memstack.backends.adapters import capabilities_of
from memstack.backends.capabilities import (
    Item,
    PassingCapabilities,
    Predicate,
    StorageCapabilities,
    Tail,
    check_replacement,
)
from memstack.backends.translate import store_errors
from memstack.base import SessionLayer, limit_arg
from memstack.crypto.envelope import SessionCipher, is_envelope
from memstack.crypto.keys import KeyProvider, Keyring
from memstack.crypto.legacy import SdkEnvelopeReader, is_sdk_envelope
from memstack.errors import BackendError, CapabilityError, ConfigurationError, DecryptionError

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.run_context import RunContextWrapper

__all__ = ["EncryptedCapabilities", "EncryptedSession"]

logger = logging.getLogger("memstack.encrypted")

Unreadable = Literal["raise", "skip"]

# "All items" for stores read without a capability adapter: get_items(None) would apply
# session_settings.limit. Small enough for any driver's integer parameters.
_EVERYTHING = 2**31 - 1


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
    ) -> None:
        super().__init__(inner)
        name = type(self).__name__
        if (key is None) == (keyring is None):
            raise ConfigurationError("pass exactly one of key= or keyring=", layer=name)
        if keyring is not None and not isinstance(keyring, KeyProvider):
            raise ConfigurationError(
                "keyring must be a memstack.crypto.Keyring or provide active_kid and "
                f"key(kid), not {type(keyring).__name__}",
                layer=name,
            )
        for field, value in (("compress", compress), ("allow_plaintext", allow_plaintext)):
            if not isinstance(value, bool):
                raise ConfigurationError(
                    f"{field} must be True or False, got {value!r}", layer=name
                )
        if isinstance(compress_min_bytes, bool) or not isinstance(compress_min_bytes, int):
            raise ConfigurationError(
                f"compress_min_bytes must be an int >= 0, got {compress_min_bytes!r}", layer=name
            )
        if unreadable not in ("raise", "skip"):
            raise ConfigurationError(
                f"unreadable must be 'raise' or 'skip', got {unreadable!r}", layer=name
            )
        try:
            provider = keyring if keyring is not None else Keyring.of(cast(bytes | str, key))
        except ConfigurationError as exc:
            raise ConfigurationError(exc.reason, layer=name) from exc
        self.keys: KeyProvider = provider
        self.compress = compress
        self.allow_plaintext = allow_plaintext
        self.unreadable: Unreadable = unreadable
        self._cipher = SessionCipher(
            self.session_id,
            provider,
            compress=compress,
            compress_min_bytes=compress_min_bytes,
            layer=name,
        )
        self._cipher.check_active_key()
        self._legacy = (
            None
            if legacy_sdk_key is None
            else SdkEnvelopeReader(self.session_id, legacy_sdk_key, layer=name)
        )

    # -- items in and out -------------------------------------------------------------------
    def seal(self, items: Sequence[object]) -> list[dict[str, Any]]:
        return [self._cipher.seal(item, index=index) for index, item in enumerate(items)]

    def open(self, stored: object) -> dict[str, Any]:
        """The item behind one stored value; ``DecryptionError`` if it cannot be trusted."""
        if is_envelope(stored):
            return self._cipher.open(stored)
        if is_sdk_envelope(stored):
            if self._legacy is None:
                raise self._cipher.error(
                    "found an SDK EncryptedSession envelope; pass legacy_sdk_key= to read "
                    "it, and migrate() to re-encrypt it",
                    "hkdf-v1",
                )
            return self._legacy.open(stored)
        if self.allow_plaintext and isinstance(stored, dict):
            return stored
        raise self._cipher.error(
            "found a plaintext item where an encrypted envelope belongs (history written "
            "before encryption? seal it with adopt() or `memstack adopt`; or pass "
            "allow_plaintext=True to read such items)"
        )

    def readable(self, stored: Sequence[object]) -> list[tuple[int, dict[str, Any]]]:
        """Each stored value's index and item; with ``unreadable="skip"``, the readable ones."""
        if self.unreadable == "raise":
            return [(index, self.open(value)) for index, value in enumerate(stored)]
        opened = []
        for index, value in enumerate(stored):
            try:
                opened.append((index, self.open(value)))
            except DecryptionError as exc:
                logger.warning("skipping an unreadable item (unreadable='skip'): %s", exc)
        return opened

    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        stored = await self.inner.get_items(**limit_arg(limit), **self.forward(wrapper))
        return cast("list[TResponseInputItem]", [item for _, item in self.readable(stored)])

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
        for value in (await capabilities_of(self.inner).read_tail(1, wrapper=wrapper)).items:
            self.open(value)
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
        caps = caps or capabilities_of(self.inner)
        count = await caps.count()
        return [dict(value) for value in await self.inner.get_items(limit=count)]

    async def adopt(self, *, allow_non_atomic: bool = False, max_attempts: int = 5) -> int:
        """Seal the plaintext history written before this layer existed; return how many.

        Reads never accept plaintext unless ``allow_plaintext=True``: adopting is the
        explicit step, one atomic rewrite like ``rotate`` (which it also does).
        """
        return await self._reseal(allow_non_atomic, max_attempts, plaintext=True)

    async def rotate(self, *, allow_non_atomic: bool = False, max_attempts: int = 5) -> int:
        """Re-encrypt every stored item not yet under the active key; return how many.

        One ``replace_oldest`` transaction covers the oldest item through the last stale
        one, guarded by ``expect=`` the envelopes read; if the history changed meanwhile,
        it reads again (``max_attempts`` times in all). Items appended during rotation are
        already under the active key. A store without atomic rewrites is refused unless
        ``allow_non_atomic=True``: then it is cleared and refilled, and if the refill
        fails the ``BackendError`` carries the re-encrypted envelopes as ``.unsaved_items``.
        """
        return await self._reseal(allow_non_atomic, max_attempts, plaintext=False)

    async def _reseal(self, allow_non_atomic: bool, max_attempts: int, *, plaintext: bool) -> int:
        """Rewrite stale items under the active key; plaintext too when ``plaintext``."""
        if max_attempts < 1:
            raise ConfigurationError(
                f"max_attempts must be >= 1, got {max_attempts}",
                layer=type(self).__name__,
                session_id=self.session_id,
            )
        with store_errors(self.inner, layer=type(self).__name__):
            caps = capabilities_of(self.inner)
            if not caps.atomic:
                if not allow_non_atomic:
                    raise CapabilityError(
                        f"{caps!r} cannot rewrite history atomically; old keys keep "
                        "decrypting meanwhile, so nothing is lost by not rotating. Pass "
                        "allow_non_atomic=True to clear and refill the session instead",
                        layer=type(self).__name__,
                        session_id=self.session_id,
                    )
                return await self._rotate_by_refill(plaintext)
            for _ in range(max_attempts):
                stored = await self.stored(caps)
                stale = [i for i, value in enumerate(stored) if not self._cipher.is_current(value)]
                if not stale:
                    return 0
                n = stale[-1] + 1
                fresh = self._resealed(stored[:n], plaintext)
                if await caps.replace_oldest(n, fresh, expect=stored[:n]):
                    logger.info(
                        "re-encrypted %d items of session %r under key %r",
                        len(stale),
                        self.session_id,
                        self._cipher.active_kid,
                    )
                    return len(stale)
        raise CapabilityError(
            f"history changed during each of {max_attempts} rotation attempts; retry later",
            layer=type(self).__name__,
            session_id=self.session_id,
        )

    def _resealed(self, stored: Sequence[Any], plaintext: bool) -> list[dict[str, Any]]:
        def fresh(value: Any) -> dict[str, Any]:
            if self._cipher.is_current(value):
                return dict(value)
            sealed = is_envelope(value) or is_sdk_envelope(value)
            if plaintext and isinstance(value, dict) and not sealed:
                return self._cipher.seal(value)
            return self._cipher.seal(self.open(value))

        return [fresh(value) for value in stored]

    async def _rotate_by_refill(self, plaintext: bool) -> int:
        """Rotation on a store without atomic rewrites: re-encrypt in memory, clear, refill."""
        # An explicit limit, so a session limit in session_settings cannot cut the read.
        stored = [dict(value) for value in await self.inner.get_items(limit=_EVERYTHING)]
        stale = sum(not self._cipher.is_current(value) for value in stored)
        if not stale:
            return 0
        fresh = self._resealed(stored, plaintext)
        await self.inner.clear_session()
        try:
            await self.inner.add_items(cast("list[TResponseInputItem]", fresh))
        except Exception as exc:
            error = BackendError(
                f"re-adding {len(fresh)} re-encrypted items after clearing the session "
                "failed; add back .unsaved_items (they are envelopes, safe to store)",
                layer=type(self).__name__,
                session_id=self.session_id,
            )
            error.unsaved_items = fresh  # type: ignore[attr-defined]
            raise error from exc
        return stale

    async def migrate(self, *, allow_non_atomic: bool = False, max_attempts: int = 5) -> int:
        """Re-encrypt SDK envelopes and admitted plaintext in this format; same as ``rotate``."""
        return await self.rotate(allow_non_atomic=allow_non_atomic, max_attempts=max_attempts)

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


class EncryptedCapabilities(PassingCapabilities):
    """The store's capabilities through encryption: seals what goes down, opens what it tests.

    ``count`` and ``delete_oldest`` pass through. ``replace_oldest`` seals the new items;
    with ``expect`` it decrypts the stored oldest items to compare them, then hands the
    envelopes it read to the store as its own ``expect``, so a change in between is caught
    by the store's transaction. ``delete_where`` decrypts each envelope for the predicate.
    """

    session: EncryptedSession

    def __init__(self, session: EncryptedSession) -> None:
        super().__init__(session, capabilities_of(session.inner))

    async def replace_oldest(
        self, n: int, items: Sequence[Item], *, expect: Sequence[Item] | None = None
    ) -> bool:
        check_replacement(n, items)
        sealed = self.session.seal(items)
        if expect is None:
            return await self.below.replace_oldest(n, sealed)
        stored = (await self.session.stored(self.below))[:n]
        if len(stored) < n or [self.session.open(value) for value in stored] != list(expect):
            return False
        return await self.below.replace_oldest(n, sealed, expect=stored)

    async def read_tail(self, n: int, *, wrapper: RunContextWrapper[Any] | None = None) -> Tail:
        # One item per envelope: the write times from below stay aligned with the items.
        tail = await self.below.read_tail(n, wrapper=wrapper)
        opened = self.session.readable(tail.items)
        return Tail([item for _, item in opened], [tail.written_at[i] for i, _ in opened])

    async def add_derived(
        self,
        items: Sequence[Item],
        *,
        derived_from: float | None,
        wrapper: RunContextWrapper[Any] | None = None,
    ) -> None:
        await self.below.add_derived(
            self.session.seal(items), derived_from=derived_from, wrapper=wrapper
        )

    async def write_ages(self, n: int) -> list[float] | None:
        return await self.below.write_ages(n)

    async def delete_written_before(self, older_than: float, *, batch_size: int = 500) -> int:
        # The store's own write times: no item is opened, so no key is needed.
        return await self.below.delete_written_before(older_than, batch_size=batch_size)

    async def delete_where(
        self, predicate: Predicate, *, batch_size: int = 500, prefix_only: bool = False
    ) -> int:
        session = self.session
        return await self.below.delete_where(
            lambda stored: predicate(session.open(stored)),
            batch_size=batch_size,
            prefix_only=prefix_only,
        )
