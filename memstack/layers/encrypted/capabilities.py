"""The store's capabilities as seen through encryption: items up, envelopes down.

    >>> from memstack.crypto import generate_key
    >>> from memstack.layers import EncryptedSession
    >>> from memstack.testing import InMemorySession
    >>> caps = EncryptedSession(InMemorySession("s1"), key=generate_key()).storage_capabilities()
    >>> caps.atomic, type(caps).__name__
    (True, 'EncryptedCapabilities')

Encryption maps items one to one, so counting, dropping the oldest items and the store's
own write times pass through and need no key. What must see content does: a replacement
seals the new items, and with ``expect`` decrypts the stored oldest items to compare them,
then hands the store the envelopes it read as its own ``expect``, so a change in between
is caught by the store's transaction. ``delete_where`` opens each envelope for the
predicate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from memstack.backends.adapters import capabilities_of
from memstack.backends.capabilities import (
    Item,
    PassingCapabilities,
    Predicate,
    StorageCapabilities,
    check_replacement,
)

if TYPE_CHECKING:
    from agents.memory import Session
    from agents.run_context import RunContextWrapper

__all__ = ["EncryptedCapabilities"]


class SealingLayer(Protocol):
    """What this adapter needs of an ``EncryptedSession`` (named structurally: no import cycle)."""

    inner: Session
    session_id: str

    def seal(self, items: Sequence[object]) -> list[dict[str, Any]]: ...

    def open(self, stored: object) -> dict[str, Any]: ...

    async def stored(self, caps: StorageCapabilities | None = None) -> list[Item]: ...


class EncryptedCapabilities(PassingCapabilities):
    """The store's capabilities through encryption: seals what goes down, opens what it tests."""

    session: SealingLayer  # type: ignore[assignment]  # a Session, seen for what it adds

    def __init__(self, session: SealingLayer) -> None:
        super().__init__(session, capabilities_of(session.inner))  # type: ignore[arg-type]

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
