"""Reading compaction history back: the newest tail of the store, grown until it resolves.

    >>> import asyncio
    >>> from memstack.layers.compaction.reader import TailReader
    >>> from memstack.testing import InMemorySession, sample_items
    >>> store = InMemorySession("s1")
    >>> asyncio.run(store.add_items(sample_items(4)))
    >>> res, written_at = asyncio.run(TailReader(store).read(None))
    >>> len(res.view), res.record, written_at
    (4, None, [None, None, None, None])

Why a reader: the view is the newest record whose anchors are all present plus the items
after it, so a read must not cost the whole history, yet only reading tells how far back
the record's anchors are. Reads start from what the last one needed and grow by a factor
of four. What a tail means is ``memstack.compaction.view``'s (pure); this module only reads,
through the capability adapter (``read_tail``), which also reports each entry's write time
where a retention layer below keeps one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memstack.backends.adapters import capabilities_of
from memstack.compaction.view import Need, Resolution, resolve
from memstack.history import stored_items

if TYPE_CHECKING:
    from agents.memory import Session
    from agents.run_context import RunContextWrapper

__all__ = ["TailReader"]

_FIRST_READ = 32  # stored entries a read asks for at least
_GROWTH = 4  # a tail that does not resolve is read again this many times longer


class TailReader:
    """Reads one session's newest stored entries from ``store``, as far back as needed."""

    def __init__(self, store: Session, *, layer: str = "CompactionSession") -> None:
        self.store, self.layer = store, layer
        # How many stored entries the last read needed; only sizes the next first read.
        self.hint = _FIRST_READ

    async def read(
        self, wrapper: RunContextWrapper[Any] | None, *, complete: bool = False
    ) -> tuple[Resolution, list[float | None]]:
        """Resolve the newest stored entries, reading further back until it is decided.

        ``complete`` reads everything. Returns the write time of each entry of the window
        (None where no retention layer below knows it).
        """
        size = max(_FIRST_READ, self.hint + self.hint // 4)
        caps = capabilities_of(self.store)
        native = caps.counts_cheaply
        while True:
            tail = await caps.read_tail(size, wrapper=wrapper)
            window = stored_items(tail.items, layer=self.layer, session_id=self.store.session_id)
            done = len(window) < size
            # The generic adapter, and a TTL layer's (it counts live items), count by
            # reading everything, which would make every read read the whole history. The
            # generic one's store cannot drop its oldest items atomically, and a retention
            # layer dates the record to expire with them (``add_derived``), so there the
            # first covered item is checked only when the read reaches it.
            res = resolve(window, complete=done, trust_first=not native)
            if res is Need.SIZE:
                stored = await caps.count()
                res = resolve(window, complete=done, store_size=stored)
            if isinstance(res, Resolution) and (done or not complete):
                break
            size *= _GROWTH
        self.hint = max(_FIRST_READ, res.depth)
        return res, tail.written_at
