"""Re-sealing a session's stored history under the active key: rotation, migration, adoption.

    >>> import asyncio
    >>> from memstack.crypto import Keyring, generate_key
    >>> from memstack.crypto.envelope import SessionCipher
    >>> from memstack.crypto.reseal import reseal
    >>> from memstack.testing import InMemorySession
    >>> old, new = generate_key(), generate_key()
    >>> store = InMemorySession("user-42")
    >>> before = SessionCipher("user-42", Keyring.of(old))
    >>> asyncio.run(store.add_items([before.seal({"role": "user", "content": "hi"})]))
    >>> after = SessionCipher("user-42", Keyring.of(new, old))
    >>> asyncio.run(reseal(store, after, after.open, plaintext=False, layer="demo"))
    1
    >>> [envelope] = asyncio.run(store.get_items())
    >>> after.is_current(envelope), after.open(envelope)["content"]
    (True, 'hi')

Old keys keep decrypting, so rotating is never urgent, and it must never lose an item: the
history is rewritten in one ``replace_oldest`` transaction guarded by ``expect=`` what was
read, and read again when another writer changed it meanwhile. Only the oldest item
through the last stale one is rewritten; items appended during rotation are already under
the active key. A store without atomic rewrites is cleared and refilled only when asked
(``allow_non_atomic``); if the refill fails, the ``BackendError`` carries the re-sealed
envelopes (safe to store) as ``.unsaved_items``.

What counts as stale is anything ``SessionCipher.is_current`` refuses: envelopes under
other keys, SDK envelopes, and plaintext. ``open_item`` decides what may be read (the
layer's own rules); ``plaintext=True`` (adoption) seals plaintext items as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from agents.memory import Session

from memstack.backends.adapters import capabilities_of
from memstack.backends.capabilities import Item, StorageCapabilities
from memstack.backends.translate import store_errors
from memstack.base import stored_values
from memstack.crypto.envelope import SessionCipher, is_envelope
from memstack.crypto.legacy import is_sdk_envelope
from memstack.errors import BackendError, CapabilityError, ConfigurationError
from memstack.formats import ENCRYPTION_FORMATS, refuse_foreign
from memstack.options import Count, Options

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

__all__ = ["read_stored", "reseal", "resealed"]

logger = logging.getLogger("memstack.encrypted")

Opener = Callable[[object], dict[str, Any]]
Reader = Callable[[StorageCapabilities], Awaitable[list[Item]]]


class _Attempts(Options):
    max_attempts: Count


async def read_stored(inner: Session, caps: StorageCapabilities) -> list[Item]:
    """Every value ``inner`` holds, oldest first, as the layer above reads it (no session
    limit, nothing repaired away), as copies."""
    return await stored_values(inner)


def resealed(
    stored: Sequence[Any], cipher: SessionCipher, open_item: Opener, *, plaintext: bool
) -> list[dict[str, Any]]:
    """``stored`` with every value not under the active key sealed again under it; another
    layer's record (a TTL record under a stack without TTL) is refused, never sealed."""
    refuse_foreign(stored, session_id=cipher.session_id, own=ENCRYPTION_FORMATS)

    def fresh(value: Any) -> dict[str, Any]:
        if cipher.is_current(value):
            return dict(value)
        sealed = is_envelope(value) or is_sdk_envelope(value)
        if plaintext and isinstance(value, dict) and not sealed:
            return cipher.seal(value)
        return cipher.seal(open_item(value))

    return [fresh(value) for value in stored]


async def reseal(
    inner: Session,
    cipher: SessionCipher,
    open_item: Opener,
    *,
    plaintext: bool,
    layer: str,
    allow_non_atomic: bool = False,
    max_attempts: int = 5,
    read: Reader | None = None,
) -> int:
    """Rewrite the stale values ``inner`` holds under the active key; return how many.

    ``read(caps)`` returns every stored value, oldest first (``read_stored`` by default).
    """
    session_id = inner.session_id
    try:
        _Attempts.check(max_attempts=max_attempts)
    except ConfigurationError as exc:
        raise ConfigurationError(exc.reason, layer=layer, session_id=session_id) from None
    with store_errors(inner, layer=layer):
        caps = capabilities_of(inner)
        if not caps.atomic:
            if not allow_non_atomic:
                raise CapabilityError(
                    f"{caps!r} cannot rewrite history atomically; old keys keep "
                    "decrypting meanwhile, so nothing is lost by not rotating. Pass "
                    "allow_non_atomic=True to clear and refill the session instead",
                    layer=layer,
                    session_id=session_id,
                )
            return await _refill(inner, cipher, open_item, plaintext=plaintext, layer=layer)
        for _ in range(max_attempts):
            stored = await (read(caps) if read is not None else read_stored(inner, caps))
            stale = [i for i, value in enumerate(stored) if not cipher.is_current(value)]
            if not stale:
                return 0
            n = stale[-1] + 1
            fresh = resealed(stored[:n], cipher, open_item, plaintext=plaintext)
            if await caps.replace_oldest(n, fresh, expect=stored[:n]):
                logger.info(
                    "re-encrypted %d items of session %r under key %r",
                    len(stale),
                    session_id,
                    cipher.active_kid,
                )
                return len(stale)
    raise CapabilityError(
        f"history changed during each of {max_attempts} rotation attempts; retry later",
        layer=layer,
        session_id=session_id,
    )


async def _refill(
    inner: Session, cipher: SessionCipher, open_item: Opener, *, plaintext: bool, layer: str
) -> int:
    """Rotation on a store without atomic rewrites: re-seal in memory, clear, refill."""
    stored = await stored_values(inner)
    stale = sum(not cipher.is_current(value) for value in stored)
    if not stale:
        return 0
    fresh = resealed(stored, cipher, open_item, plaintext=plaintext)
    await inner.clear_session()
    try:
        await inner.add_items(cast("list[TResponseInputItem]", fresh))
    except Exception as exc:
        error = BackendError(
            f"re-adding {len(fresh)} re-encrypted items after clearing the session "
            "failed; add back .unsaved_items (they are envelopes, safe to store)",
            layer=layer,
            session_id=inner.session_id,
        )
        error.unsaved_items = fresh  # type: ignore[attr-defined]
        raise error from exc
    return stale
