"""What a store can do beyond the Session protocol, behind one small interface.

    >>> from memstack.backends import capabilities_of
    >>> from memstack.testing import InMemorySession
    >>> caps = capabilities_of(InMemorySession("s1"))
    >>> caps.atomic
    True

Layers ask ``capabilities_of(session)`` (``memstack.backends.adapters``) instead of testing
which store sits below them. Each SDK backend has one adapter; any other session
gets ``GenericCapabilities``, which can count but refuses destructive work unless the
caller accepts that it is not atomic.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from memstack.errors import BackendError, CapabilityError
from memstack.history import stored_history

if TYPE_CHECKING:
    from agents.memory import Session

__all__ = [
    "READ_ALL",
    "GenericCapabilities",
    "PassingCapabilities",
    "Predicate",
    "StorageCapabilities",
]

Item = dict[str, Any]
T = TypeVar("T")
Predicate = Callable[[Item], bool]

# An explicit limit larger than any history: ``get_items(None)`` would apply the
# session's own ``session_settings.limit`` and silently return only part of it.
READ_ALL = 2**31 - 1


class StorageCapabilities(ABC):
    """Range and predicate operations on one session's stored items, oldest first."""

    #: True when every destructive operation is one transaction in the store.
    atomic: ClassVar[bool] = True
    #: True when ``count()`` asks the store; False when it reads every item to count.
    counts_cheaply: ClassVar[bool] = True

    def __init__(self, session: Session) -> None:
        self.session = session

    @abstractmethod
    async def count(self) -> int:
        """Number of stored items."""

    @abstractmethod
    async def delete_oldest(self, n: int) -> int:
        """Delete the ``n`` oldest items in one transaction; return how many went."""

    @abstractmethod
    async def replace_oldest(
        self, n: int, items: Sequence[Item], *, expect: Sequence[Item] | None = None
    ) -> bool:
        """Replace the ``n`` oldest items by ``items`` (at most ``n``) in one transaction.

        With ``expect``, nothing changes and False is returned unless the ``n`` oldest
        items are exactly ``expect``: a rewrite computed from a stale read is discarded.
        """

    @abstractmethod
    async def delete_where(
        self, predicate: Predicate, *, batch_size: int = 500, prefix_only: bool = False
    ) -> int:
        """Delete items matching ``predicate``, oldest first, one transaction per batch.

        With ``prefix_only`` the scan stops at the first item that does not match, which
        makes time-ordered expiry cost only what it deletes.
        """

    async def write_ages(self, n: int) -> list[float] | None:
        """How long ago the store itself wrote each of the ``n`` oldest items, in seconds.

        Measured by the store's own write-time column and clock, oldest first; None when
        the store keeps no per-item write time. Lets a layer date items written before it.
        """
        return None

    async def delete_written_before(self, older_than: float, *, batch_size: int = 500) -> int:
        """Delete items the store itself recorded as written over ``older_than`` seconds ago.

        Uses the store's own write-time column and clock, never item content, so it needs
        no key even when items are encrypted. Stores without per-item write times refuse.
        """
        raise CapabilityError(
            f"{type(self.session).__name__} keeps no per-item write time, so it cannot "
            "delete by age without reading items"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.session).__name__}, atomic={self.atomic})"


def check_replacement(n: int, items: Sequence[Item]) -> None:
    if n < 0 or len(items) > n:
        raise CapabilityError(
            f"replace_oldest takes 0 <= len(items) <= n (got n={n}, {len(items)} items): "
            "stores keep insertion order, so a range can shrink in place but not grow"
        )


def kept_after_delete(
    items: Sequence[T], matches: Callable[[T], bool], *, prefix_only: bool
) -> list[T]:
    """What ``delete_where`` leaves of an in-memory list of items."""
    kept: list[T] = []
    for index, item in enumerate(items):
        if matches(item):
            continue
        if prefix_only:
            return list(items[index:])
        kept.append(item)  # ``matches`` runs once per item: predicates may count or decode
    return kept


class PassingCapabilities(StorageCapabilities):
    """A layer's adapter that passes what it does not change to the store's adapter below.

    Layers that map items one to one (encryption, redaction) count and drop the oldest
    items exactly as the store does; they override only what must see item content.
    """

    def __init__(self, session: Session, below: StorageCapabilities) -> None:
        super().__init__(session)
        self.below = below

    @property
    def atomic(self) -> bool:  # type: ignore[override]  # the store's, known per instance
        return self.below.atomic

    @property
    def counts_cheaply(self) -> bool:  # type: ignore[override]  # likewise
        return self.below.counts_cheaply

    async def count(self) -> int:
        return await self.below.count()

    async def delete_oldest(self, n: int) -> int:
        return await self.below.delete_oldest(n)


class GenericCapabilities(StorageCapabilities):
    """Capabilities through the Session protocol alone: counting works, rewrites are not atomic.

    A rewrite can only be ``clear_session`` followed by ``add_items``; a crash between
    the two loses history. Destructive operations therefore raise ``CapabilityError``
    unless ``allow_non_atomic=True``; if the re-add then fails, the ``BackendError``
    carries the items that could not be written back as ``.unsaved_items``.
    """

    atomic = False
    counts_cheaply = False

    def __init__(self, session: Session, *, allow_non_atomic: bool = False) -> None:
        super().__init__(session)
        self.allow_non_atomic = allow_non_atomic

    async def count(self) -> int:
        with stored_history():
            return len(await self.session.get_items(limit=READ_ALL))

    async def delete_oldest(self, n: int) -> int:
        items = await self._all_for_rewrite("delete_oldest")
        n = max(0, min(n, len(items)))
        if n:
            await self._rewrite(items[n:])
        return n

    async def replace_oldest(
        self, n: int, items: Sequence[Item], *, expect: Sequence[Item] | None = None
    ) -> bool:
        check_replacement(n, items)
        current = await self._all_for_rewrite("replace_oldest")
        if len(current) < n or (expect is not None and list(expect) != current[:n]):
            return False
        await self._rewrite([*items, *current[n:]])
        return True

    async def delete_where(
        self, predicate: Predicate, *, batch_size: int = 500, prefix_only: bool = False
    ) -> int:
        items = await self._all_for_rewrite("delete_where")
        keep = kept_after_delete(items, predicate, prefix_only=prefix_only)
        deleted = len(items) - len(keep)
        if deleted:
            await self._rewrite(keep)
        return deleted

    async def _all_for_rewrite(self, operation: str) -> list[Item]:
        if not self.allow_non_atomic:
            raise CapabilityError(
                f"{type(self.session).__name__} has no atomic {operation}; only "
                "clear-and-re-add is possible, which can lose history if interrupted "
                "(pass allow_non_atomic=True to accept that)"
            )
        with stored_history():  # a rewrite must keep what a view would leave out
            return [dict(item) for item in await self.session.get_items(limit=READ_ALL)]

    async def _rewrite(self, items: list[Item]) -> None:
        await self.session.clear_session()
        try:
            await self.session.add_items(items)  # type: ignore[arg-type]
        except Exception as exc:
            error = BackendError(
                f"re-adding {len(items)} items after clear failed on "
                f"{type(self.session).__name__}; they are in .unsaved_items"
            )
            error.unsaved_items = items  # type: ignore[attr-defined]
            raise error from exc
