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

Write times travel through the same interface, in arguments and return values: a layer
that derives data (a compaction summary) reads ``read_tail(n)``, whose ``written_at``
a retention layer (TTL) fills in and layers that map items one to one pass along, and
writes the summary with ``add_derived(items, derived_from=t)`` so that it expires with
its oldest source. Everywhere else the times are None and ``add_derived`` is a plain
``add_items``.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from memstack.errors import BackendError, CapabilityError
from memstack.history import stored_history, stored_items

if TYPE_CHECKING:
    from agents.memory import Session
    from agents.run_context import RunContextWrapper

__all__ = [
    "READ_ALL",
    "GenericCapabilities",
    "PassingCapabilities",
    "Predicate",
    "StorageCapabilities",
    "Tail",
    "ViewCapabilities",
    "accepts_wrapper",
    "forward_wrapper",
    "newest_of",
]

Item = dict[str, Any]
T = TypeVar("T")
Predicate = Callable[[Item], bool]

# An explicit limit larger than any history: ``get_items(None)`` would apply the
# session's own ``session_settings.limit`` and silently return only part of it.
READ_ALL = 2**31 - 1

_SESSION_METHODS = ("get_items", "add_items", "pop_item", "clear_session")


def accepts_wrapper(session: object) -> bool:
    """True when all four methods declare ``wrapper`` (the SDK's own opt-in rule)."""
    for name in _SESSION_METHODS:
        try:
            params = inspect.signature(getattr(session, name)).parameters
        except (AttributeError, TypeError, ValueError):
            return False
        param = params.get("wrapper")
        if param is None or param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            return False
    return True


@cache
def _takes_limit(kind: type) -> bool:
    """False for a session whose ``get_items`` takes no ``limit`` (written before the SDK
    had it): it is read whole, as the Runner reads it."""
    try:
        params = inspect.signature(kind.get_items).parameters  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return True
    return "limit" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


async def newest_of(session: Session, n: int, wrapper: RunContextWrapper[Any] | None) -> Tail:
    """The newest ``n`` items ``session.get_items`` returns (all, from a session without
    ``limit``: then more than ``n``, and complete)."""
    forward = forward_wrapper(session, wrapper)
    if not _takes_limit(type(session)):
        return Tail.undated(list(await session.get_items(**forward)), complete=True)
    items = await session.get_items(limit=n, **forward)
    return Tail.undated(list(items), complete=len(items) < n)


@cache
def _type_accepts_wrapper(kind: type) -> bool:
    # Per type: inspecting four signatures on every read costs ~0.1 ms.
    return accepts_wrapper(kind)


def forward_wrapper(session: object, wrapper: RunContextWrapper[Any] | None) -> dict[str, Any]:
    """Keyword arguments that pass ``wrapper`` on only to a session that declares it."""
    if wrapper is None or not _type_accepts_wrapper(type(session)):  # type: ignore[arg-type]
        return {}
    return {"wrapper": wrapper}


@dataclass(frozen=True, slots=True)
class Tail:
    """The newest items of a history, oldest first, as one level of a stack shows them.

    ``written_at``: when each item's expiry counts from, where a retention layer knows it.
    ``keys``: content keys (``memstack.content_keys``) where known: equal keys mean equal
    content in this process, so a count or a placeholder is looked up, not recomputed.
    ``complete``: these are all the items; else older ones may precede them. ``reach``:
    how many of the newest stored rows they were made from (-1: as many as there are
    items), which sizes the next read. ``sealed``: what an envelope sealed with each item
    and the read just authenticated (``memstack.tokens``: its token parts), None where
    nothing; empty when no layer below knows. A layer that changes an item drops its
    entry. The items may be shared with the process cache (``memstack.cache``): read
    them, never change them (build new ones).
    """

    items: Sequence[Item]
    written_at: Sequence[float | None]
    keys: Sequence[bytes | None] = ()
    complete: bool = False
    reach: int = -1
    sealed: Sequence[Mapping[str, Any] | None] = ()

    def __post_init__(self) -> None:
        if len(self.keys) != len(self.items):
            object.__setattr__(self, "keys", [None] * len(self.items))
        if self.sealed and len(self.sealed) != len(self.items):
            object.__setattr__(self, "sealed", ())
        if self.reach < 0:
            object.__setattr__(self, "reach", len(self.items))

    @classmethod
    def undated(cls, items: Sequence[Any], *, complete: bool = False) -> Tail:
        return cls(list(items), [None] * len(items), complete=complete)

    def __len__(self) -> int:
        return len(self.items)

    def reach_from(self, index: int) -> int:
        """How many stored rows a result made from ``items[index:]`` depends on."""
        return max(0, self.reach - index)

    def picked(self, indices: Sequence[int], *, complete: bool, reach: int = -1) -> Tail:
        """The entries at ``indices``, in that order."""
        return Tail(
            [self.items[i] for i in indices],
            [self.written_at[i] for i in indices],
            [self.keys[i] for i in indices],
            complete,
            self.reach if reach < 0 else reach,
            [self.sealed[i] for i in indices] if self.sealed else (),
        )

    def newest(self, n: int) -> Tail:
        """The newest ``n`` entries (all of them when there are fewer)."""
        if n >= len(self.items):
            return self
        start = len(self.items) - max(n, 0)
        return Tail(
            self.items[start:],
            self.written_at[start:],
            self.keys[start:],
            complete=False,
            reach=self.reach_from(start),
            sealed=self.sealed[start:],
        )


class StorageCapabilities(ABC):
    """Range and predicate operations on one session's stored items, oldest first."""

    #: True when every destructive operation is one transaction in the store.
    atomic: ClassVar[bool] = True
    #: True when ``count()`` asks the store; False when it reads every item to count.
    counts_cheaply: ClassVar[bool] = True
    #: True when ``read_newest`` takes ``whole_up_to`` (adapters of your own need not).
    reads_whole_up_to: ClassVar[bool] = False

    def __init__(self, session: Session) -> None:
        self.session = session

    def place(self) -> Hashable:
        """Where the store keeps its sessions, for what the process remembers of one
        (``memstack.cache``): stores with the same place hold the same sessions. By
        default the store object itself, shared with no other."""
        return ("object", id(self.session))

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

    async def read_tail(self, n: int, *, wrapper: RunContextWrapper[Any] | None = None) -> Tail:
        """The newest ``n`` items as the session shows them, with their write times.

        A memstack layer's view comes with the write times a retention layer in it knows
        (``memstack.pipeline``); any other session is read with ``get_items`` and knows none.
        The items are the caller's own.
        """
        if n <= 0:
            return Tail.undated([])
        session = self.session
        view_tail = getattr(session, "view_tail", None)  # a memstack layer's
        if view_tail is not None and not getattr(session, "reads_its_own_way", True):
            return await view_tail(n, wrapper)  # type: ignore[no-any-return]
        return (await newest_of(session, n, wrapper)).newest(n)

    async def read_newest(
        self, n: int, *, wrapper: RunContextWrapper[Any] | None = None, whole_up_to: int = 0
    ) -> Tail:
        """The newest ``n`` stored values, oldest first, as the store holds them.

        The source of every stack read. An adapter that reads raw rows parses each row
        once for the whole process (``memstack.cache``) and gives each value its content
        key: the values are then shared, read-only. This default reads ``get_items``.
        ``whole_up_to`` (passed where ``reads_whole_up_to``): every value instead when the
        store holds at most that many, told by the same statement (a read with nothing to
        go by: a new process's first read of a small session is then one statement).
        """
        if n <= 0:
            return Tail.undated([])
        return await newest_of(self.session, n, wrapper)

    async def add_derived(
        self,
        items: Sequence[Item],
        *,
        derived_from: float | None,
        wrapper: RunContextWrapper[Any] | None = None,
    ) -> None:
        """Append ``items`` derived from data written at ``derived_from`` (a summary).

        A retention layer stamps them to expire with that data; this default, knowing no
        write times, appends them with ``add_items``.
        """
        await self._add(items, wrapper)

    async def append_after(
        self,
        compose: Callable[[Tail], Sequence[Item] | None],
        *,
        first: int,
        wrapper: RunContextWrapper[Any] | None = None,
    ) -> None:
        """Append what ``compose`` makes of the newest stored values (at least ``first``).

        For a write that depends on what it follows (a retention layer's stamps).
        ``compose`` gets the newest values as ``read_newest`` gives them and returns the
        values to append, or None for a longer tail; it may run more than once. This
        default reads, then writes: two calls, and another writer may write in between.
        An adapter whose store allows it reads in the write's own transaction, under
        the lock the store's writes take: one round trip, and no writer in between.
        """

        def read(n: int) -> Awaitable[Tail]:
            return self.read_newest(n, wrapper=wrapper)

        values = await composed(read, compose, first=first, session_id=self.session.session_id)
        await self._add(values, wrapper)

    async def _add(self, items: Sequence[Item], wrapper: RunContextWrapper[Any] | None) -> None:
        session = self.session
        await self.transaction(
            lambda: session.add_items(list(items), **forward_wrapper(session, wrapper))  # type: ignore[arg-type]
        )

    async def transaction(self, call: Callable[[], Awaitable[T]]) -> T:
        """``await call()``: one Session method of this store (``add_items``, ``pop_item``…).

        This default runs it once. The adapter of a store whose every such method is one
        transaction reruns it when the database rolled it back (``memstack.backends.retry``);
        no other may, since a rerun after a partial write would store it twice.
        """
        return await call()

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


async def composed(
    read: Callable[[int], Awaitable[Tail]],
    compose: Callable[[Tail], Sequence[Item] | None],
    *,
    first: int,
    session_id: str,
) -> Sequence[Item]:
    """What ``compose`` makes of the newest values ``read(n)`` gives (``append_after``):
    at least ``first`` of them, four times as many each time it asks for more."""
    n = max(first, 1)
    while True:
        tail = await read(n)
        stored_items(tail.items, session_id=session_id)
        values = compose(tail)
        if values is not None:
            return values
        if tail.complete:
            raise AssertionError("compose asked for more than the whole history")
        n *= 4


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
    ``read_tail`` and ``add_derived`` go through the layer itself unless overridden to
    carry the write times of the adapter below across the layer's mapping.
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


class ViewCapabilities(PassingCapabilities):
    """A view layer's adapter (a window), or a plain layer's that reads or writes its own way.

    The store's, except that reads see what the layer returns.

    Everything that changes the store passes below; ``read_tail`` and ``add_derived``
    go through the view itself, as ``get_items`` and ``add_items`` would, so a layer above
    reads what the view shows (write times unknown).
    """

    async def replace_oldest(
        self, n: int, items: Sequence[Item], *, expect: Sequence[Item] | None = None
    ) -> bool:
        return await self.below.replace_oldest(n, items, expect=expect)

    async def delete_where(
        self, predicate: Predicate, *, batch_size: int = 500, prefix_only: bool = False
    ) -> int:
        return await self.below.delete_where(
            predicate, batch_size=batch_size, prefix_only=prefix_only
        )

    async def write_ages(self, n: int) -> list[float] | None:
        return await self.below.write_ages(n)

    async def delete_written_before(self, older_than: float, *, batch_size: int = 500) -> int:
        return await self.below.delete_written_before(older_than, batch_size=batch_size)

    def __repr__(self) -> str:
        return repr(self.below)  # a view changes no capability of the store's


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
