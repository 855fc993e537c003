"""Reading TTL records back: the newest tail of the store, grown until the view is decided.

    >>> import asyncio
    >>> from memstack.layers.ttl.policy import Expiry
    >>> from memstack.layers.ttl.reader import TailReader
    >>> from memstack.layers.ttl.record import write_record
    >>> from memstack.testing import InMemorySession
    >>> store = InMemorySession("s1")
    >>> hi = {"role": "user", "content": "hi"}
    >>> asyncio.run(store.add_items([write_record(hi, written=0.0)]))
    >>> reader = TailReader(store, Expiry(ttl=60.0, idle_ttl=None))
    >>> [stamp.item for stamp in asyncio.run(reader.scan(None, {}, now=30.0)).view()]
    [{'role': 'user', 'content': 'hi'}]
    >>> asyncio.run(reader.scan(None, {}, now=60.0)).view()
    []

Why a reader: a view of the newest live items must not read the whole history, yet how
many stored records are dead is known only by reading them. Reads start from what the
last one needed and grow by a factor, so their total stays within 4/3 of the last one.
Unstamped items met on the way are dated first (``adoption``). The decisions are
``policy``'s; this module only reads.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agents.memory import Session

from memstack.backends.adapters import capabilities_of
from memstack.backends.capabilities import READ_ALL
from memstack.backends.reuse import Reuse
from memstack.errors import CapabilityError
from memstack.history import is_output
from memstack.layers.ttl.adoption import adopt_history, unstamped
from memstack.layers.ttl.policy import Expiry, Snapshot, shows_open_unit
from memstack.layers.ttl.record import Stamp, UnknownRecord, read_record

__all__ = ["TailReader"]

logger = logging.getLogger("memstack.ttl")

_FIRST_READ = 256  # records an unbounded read asks for before it knows the history
_GROWTH = 4  # tail reads grow by this factor; each re-reads the tail, so total <= 4/3 of last
_SLACK = 16  # records the next unbounded read adds, for what other writers appended
_CONTEXT = 4  # stored records a write reads first: the newest one, and any unit left open


class TailReader:
    """Reads one session's TTL records from ``store``, newest first, as much as needed."""

    def __init__(self, store: Session, expiry: Expiry, *, layer: str = "TTLSession") -> None:
        self.store, self.expiry, self.layer = store, expiry, layer
        self.hint = _FIRST_READ  # records the next unbounded read starts with
        self._counts_cheaply: bool | None = None  # the generic adapter counts by reading all
        self._adopting = True  # False once the store turned out unable to date items in place
        # Values the store hands back unchanged, and their stamps: used only for a layer
        # above that never alters or passes on what it reads (``shared=True``).
        self.reuse = Reuse()

    def read(self, value: object) -> Stamp:
        """One stored value's stamp; ``UnknownRecord`` naming the layer and session."""
        try:
            return read_record(value)
        except UnknownRecord as exc:
            raise UnknownRecord(
                exc.reason, layer=self.layer, session_id=self.store.session_id
            ) from exc

    def read_shared(self, value: object) -> Stamp:
        """``read`` for a value from ``reuse``: each row it holds is read once."""
        return self.reuse.derived(value, self.read)

    def wrote(self, count: int) -> None:
        """``count`` records were appended: the next unbounded read starts that much larger."""
        self.hint += count

    async def scan(
        self, want: int | None, forward: dict[str, Any], *, now: float, shared: bool = False
    ) -> Snapshot:
        """Read the tail, growing it, until the newest ``want`` shown records are known.

        With ``shared``, the records (and the items in them) may be objects earlier reads
        returned too: read-only.
        """
        size = want + 1 if want is not None else self.hint
        read = self.read_shared if shared else self.read
        while True:
            stored = await self._tail(size, forward, now, shared=shared)
            snapshot = self.expiry.resolve(stored, now, whole=len(stored) < size, read=read)
            if shared and all(map(self.reuse.holds, stored[snapshot.start :])):
                # Only values ``reuse`` holds are shared: a store's ``get_items`` (the
                # adapter's fallback) may return objects the store holds and changes.
                snapshot = replace(snapshot, shared=True)
            if snapshot.complete:
                if want is None:
                    self.hint = max(_FIRST_READ, len(stored) - snapshot.start + 1 + _SLACK)
                return snapshot
            # Enough live records, and the slice is final unless outputs heading the view
            # could reach into it.
            shown = snapshot.visible
            if (
                want is not None
                and len(shown) > want
                and not all(is_output(snapshot.stamp(i).item) for i in shown[:-want])
            ):
                return snapshot
            size = await self._next_size(size)

    async def snapshot(self, *, now: float) -> Snapshot:
        """The whole stored history, for rewrites that must name what they replace."""
        stored = await self._tail(READ_ALL, {}, now)
        return self.expiry.resolve(stored, now, whole=True, read=self.read)

    async def context(
        self, items: Sequence[Any], forward: dict[str, Any], *, now: float
    ) -> list[Stamp]:
        """The stored tail a new batch may continue: the newest record and any open unit."""
        size = _CONTEXT
        while True:  # what it reads stays here: shared values are safe
            stored = await self._tail(size, forward, now, shared=True)
            tail = [self.read_shared(value) for value in stored]
            if len(tail) < size or shows_open_unit([stamp.item for stamp in tail], items):
                return tail
            size *= _GROWTH

    async def _next_size(self, size: int) -> int:
        """How many records the next tail read asks for.

        ``_GROWTH`` times more; or, when the store counts cheaply and holds at most
        ``_GROWTH`` squared times ``size``, everything at once, saving a round of re-reading.
        """
        caps = capabilities_of(self.store)
        if self._counts_cheaply is None:
            self._counts_cheaply = caps.counts_cheaply
        if self._counts_cheaply and await caps.count() <= size * _GROWTH * _GROWTH:
            return size * _GROWTH * _GROWTH
        return size * _GROWTH

    async def _tail(
        self, size: int, forward: dict[str, Any], now: float, *, shared: bool = False
    ) -> list[Any]:
        """The newest ``size`` stored values, after dating any unstamped one among them."""
        stored = await self._values(size, forward, shared)
        if self._adopting and any(unstamped(value) for value in stored):
            await self._adopt_on_sight(now)
            stored = await self._values(size, forward, shared)
        return stored

    async def _values(self, size: int, forward: dict[str, Any], shared: bool) -> list[Any]:
        if not shared:
            return list(await self.store.get_items(limit=size, **forward))
        caps = capabilities_of(self.store)
        return await caps.read_values(size, reuse=self.reuse, **forward)

    async def _adopt_on_sight(self, now: float) -> None:
        try:
            await adopt_history(self.store, clock=lambda: now, layer=self.layer)
        except CapabilityError as exc:
            if not capabilities_of(self.store).atomic:
                self._adopting = False  # skip-only store: unstamped items stay, live
            logger.info("unstamped items stay undated for now: %s", exc)
