"""Deleting what TTL hides: through the store's capability adapter, in bounded batches.

    >>> import asyncio
    >>> from memstack.layers.ttl.purge import PurgeSchedule, delete_records
    >>> from memstack.testing import InMemorySession
    >>> store = InMemorySession("s1")
    >>> asyncio.run(store.add_items([{"n": 1}, {"n": 2}, {"n": 3}]))
    >>> asyncio.run(delete_records(store, lambda item: item["n"] < 3, batch_size=10, limit=1))
    1
    >>> schedule = PurgeSchedule(every=60.0)
    >>> schedule.due(now=0.0), schedule.due(now=30.0), schedule.due(now=60.0)
    (True, False, True)

``TTLSession`` decides what is dead (``policy``); the store deletes it, oldest first,
one transaction per batch, through its adapter, so the same code serves every backend and
a store that cannot delete says so once (``CapabilityError``) instead of failing each
write. ``purge_written_before`` is the key-free job for TTL above encryption.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import timedelta

from agents.memory import Session

import memstack.cache as cache
from memstack.backends.adapters import capabilities_of
from memstack.backends.capabilities import Predicate
from memstack.errors import BackendError, CapabilityError
from memstack.layers.ttl.policy import at_most
from memstack.options import BatchSize, Duration, Options

__all__ = ["PurgeSchedule", "delete_records", "purge_head", "purge_written_before"]

logger = logging.getLogger("memstack.ttl")


class _PurgeOptions(Options):
    older_than: Duration
    batch_size: BatchSize = 500


@dataclass
class PurgeSchedule:
    """When a write may purge: every ``every`` seconds (None: never), while the store can.

    With ``place`` (the session's store and id), the time of the last purge is kept for
    the whole process (``memstack.cache``): stacks built per request purge no more often
    than one long-lived stack.
    """

    every: float | None
    last: float = -math.inf
    can_delete: bool = True  # False once the store turned out to be skip-only

    def due(self, now: float, *, place: tuple[str, ...] | None = None) -> bool:
        """Whether a purge runs now; if so, the next one waits ``every`` seconds."""
        if self.every is None or not self.can_delete:
            return False
        slot = None if place is None else ("purged", *place)
        last = self.last if slot is None else cache.get(slot)
        if last is not cache.MISSING and now - last < self.every:
            return False
        self.last = now
        if slot is not None:
            cache.put(slot, now, weight=64)
        return True


async def delete_records(
    store: Session,
    doomed: Predicate,
    *,
    batch_size: int,
    prefix: bool = True,
    limit: int | None = None,
    layer: str | None = None,
    session_id: str | None = None,
) -> int:
    """Delete stored records matching ``doomed``, ``limit`` at most; return how many went.

    With ``prefix`` the store stops at the first record that does not match, so a purge
    costs what it deletes.
    """
    predicate = doomed if limit is None else at_most(limit, doomed)
    caps = capabilities_of(store)
    try:
        return await caps.delete_where(predicate, batch_size=batch_size, prefix_only=prefix)
    except CapabilityError as exc:
        raise CapabilityError(
            f"{caps!r} cannot delete items; TTLSession can only skip expired items on "
            f"this store (they stay stored): {exc.reason}",
            layer=layer,
            session_id=session_id,
        ) from exc


async def purge_head(
    store: Session,
    expired: Predicate,
    schedule: PurgeSchedule,
    *,
    now: float,
    batch_size: int,
    layer: str | None = None,
    session_id: str | None = None,
    place: tuple[str, ...] | None = None,
) -> None:
    """After a write, on ``schedule``: the expired head of the history, ``batch_size`` at most.

    Best effort: the write already succeeded, so failures only log; a store that cannot
    delete turns the schedule off.
    """
    if not schedule.due(now, place=place):
        return
    try:
        await delete_records(
            store,
            expired,
            batch_size=batch_size,
            limit=batch_size,
            layer=layer,
            session_id=session_id,
        )
    except CapabilityError as exc:
        schedule.can_delete = False
        logger.info("%s; skipping expired items only", exc)
    except BackendError as exc:
        logger.warning("purge after write failed, retrying later: %s", exc)


async def purge_written_before(
    store: Session, *, older_than: float | int | timedelta, batch_size: int = 500
) -> int:
    """Delete a session's rows its store wrote over ``older_than`` ago; return how many.

    The retention job for TTL above encryption: it compares the store's own write-time
    column with the store's own clock and reads no item, so it needs no key. SQL stores
    only; the others keep no per-item write time and raise ``CapabilityError``.
    """
    options = _PurgeOptions.check(older_than=older_than, batch_size=batch_size)
    return await capabilities_of(store).delete_written_before(
        options.older_than, batch_size=options.batch_size
    )
