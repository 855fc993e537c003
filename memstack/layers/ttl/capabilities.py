"""The store's capabilities as seen through a TTL layer: live items up, stamped records down.

    >>> from memstack.layers import TTLSession
    >>> from memstack.testing import InMemorySession
    >>> TTLSession(InMemorySession("s1"), ttl=60).storage_capabilities()
    TTLCapabilities(TTLSession, atomic=True)

Layers above TTL (encryption, compaction, windows) see only live items, in view order, and
rewrite them without touching the stamps they cannot see. Rewrites read the whole stored
history and hand the store what they read as ``expect``: a concurrent change makes them
retry or fail, never lose an item. Replacements keep the stamps of what they replace:
one for one (re-encryption), each record keeps its own; otherwise an item that is one of
those replaced keeps its own, and anything new (a summary) takes the oldest stamp
replaced. ``read_tail`` returns live items with the time each one's expiry counts from
(the layer's view), and ``add_derived`` stamps new items with the oldest time they derive
from: derived data never outlives its sources.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from memstack.backends.adapters import capabilities_of
from memstack.backends.capabilities import (
    Item,
    Predicate,
    StorageCapabilities,
    check_replacement,
)
from memstack.errors import CapabilityError
from memstack.layers.ttl.policy import Snapshot
from memstack.layers.ttl.record import Stamp, UnknownRecord, read_record, write_record

if TYPE_CHECKING:
    from agents.memory import Session
    from agents.run_context import RunContextWrapper


class RetentionLayer(Protocol):
    """What this adapter needs of a ``TTLSession`` (named structurally: no import cycle)."""

    inner: Session
    session_id: str

    async def add_derived(
        self,
        items: Sequence[Any],
        *,
        derived_from: float | None,
        wrapper: RunContextWrapper[Any] | None = None,
    ) -> None: ...

    async def snapshot(self) -> Snapshot: ...

    async def expired_now(self) -> Predicate | None: ...


__all__ = ["TTLCapabilities"]

_ATTEMPTS = 5  # re-reads when other writers change the oldest records meanwhile


class TTLCapabilities(StorageCapabilities):
    """Capabilities of the store below a ``TTLSession``, over its live items."""

    session: RetentionLayer  # type: ignore[assignment]  # a Session, seen for what it adds
    # Live items are known only by reading back to the oldest one: count() reads them all.
    counts_cheaply = False

    def __init__(self, session: RetentionLayer) -> None:
        super().__init__(session)  # type: ignore[arg-type]
        self.below = capabilities_of(session.inner)

    @property
    def atomic(self) -> bool:  # type: ignore[override]  # the store's, known per instance
        return self.below.atomic

    async def count(self) -> int:
        return len((await self.session.snapshot()).visible)

    async def add_derived(
        self,
        items: Sequence[Item],
        *,
        derived_from: float | None,
        wrapper: RunContextWrapper[Any] | None = None,
    ) -> None:
        await self.session.add_derived(items, derived_from=derived_from, wrapper=wrapper)

    async def delete_oldest(self, n: int) -> int:
        for _ in range(_ATTEMPTS):
            snapshot = await self.session.snapshot()
            doomed = max(0, min(n, len(snapshot.visible)))
            if doomed == 0:
                return 0
            cut = snapshot.visible[doomed - 1] + 1  # dead records among them go too
            if await self.below.replace_oldest(cut, [], expect=snapshot.stored[:cut]):
                return doomed
        raise self._changed("delete_oldest")

    async def replace_oldest(
        self, n: int, items: Sequence[Item], *, expect: Sequence[Item] | None = None
    ) -> bool:
        check_replacement(n, items)
        if n == 0:
            return True
        for _ in range(_ATTEMPTS):
            snapshot = await self.session.snapshot()
            if len(snapshot.visible) < n:
                return False
            replaced = snapshot.view()[:n]
            if expect is not None and [stamp.item for stamp in replaced] != list(expect):
                return False
            cut = snapshot.visible[n - 1] + 1  # dead records among them go too
            records = _restamped(items, replaced, snapshot)
            if await self.below.replace_oldest(cut, records, expect=snapshot.stored[:cut]):
                return True
            if expect is not None:
                return False  # the caller's view is stale too: let it read again
        raise self._changed("replace_oldest")

    async def delete_where(
        self, predicate: Predicate, *, batch_size: int = 500, prefix_only: bool = False
    ) -> int:
        expired = await self.session.expired_now()
        if expired is None:
            return 0

        def matches(value: dict[str, Any]) -> bool:
            if expired(value):
                return True
            try:
                return predicate(read_record(value).item)
            except UnknownRecord:
                return False

        return await self.below.delete_where(
            matches, batch_size=batch_size, prefix_only=prefix_only
        )

    def _changed(self, operation: str) -> CapabilityError:
        return CapabilityError(
            f"the oldest records changed during each of {_ATTEMPTS} {operation} attempts; "
            "retry later",
            layer=type(self.session).__name__,
            session_id=self.session.session_id,
        )


def _restamped(
    items: Sequence[Item], replaced: Sequence[Stamp], snapshot: Snapshot
) -> list[dict[str, Any]]:
    """Records for ``items`` replacing ``replaced``: no item may outlive what it replaces."""
    if len(items) == len(replaced):
        return [_record(item, old) for item, old in zip(items, replaced, strict=True)]
    # An item that is one of those replaced (a pinned item a window keeps) keeps its own
    # stamp; anything new derives from all of them, so it takes the oldest.
    oldest = min(stamp.anchor for stamp in replaced)
    unused = list(replaced)
    records = []
    for item in items:
        same = next((old for old in unused if old.item == item), None)
        if same is not None:
            unused.remove(same)
            records.append(_record(item, same))
        else:
            records.append(
                write_record(
                    dict(item),
                    written=snapshot.now,
                    anchor=oldest,
                    generation=snapshot.generation,
                    derived=True,
                )
            )
    return records


def _record(item: Item, old: Stamp) -> dict[str, Any]:
    return write_record(
        dict(item),
        written=old.written,
        anchor=old.anchor,
        generation=old.generation,
        derived=old.derived,
    )
