"""CompactionSession over TTL reads a bounded tail: TTL's count() reads everything, so
the compaction layer must not ask it on every read (found by benchmarks/bench_scale.py)."""

from __future__ import annotations

from typing import Any

import pytest

from memstack import capabilities_of
from memstack.compaction import ExtractiveSummarizer, Items, Summarize
from memstack.crypto import generate_key
from memstack.layers import CompactionSession, EncryptedSession, PassthroughSession, TTLSession
from memstack.testing import InMemorySession, sample_items


class Counting(PassthroughSession):
    """Counts the rows the store hands up."""

    rows = 0

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> Any:
        items = await self.inner.get_items(limit)
        self.rows += len(items)
        return items


def compacting(below: Any) -> CompactionSession:
    """Summaries past 12 items, down to 4: a trigger that fires on most writes."""
    return CompactionSession(
        below,
        strategy=Summarize(ExtractiveSummarizer(), max_tokens=300),
        trigger=Items(12, target=4),
        keep_last_turns=1,
    )


def test_ttl_and_encrypted_capabilities_report_that_counting_reads_everything() -> None:
    store = InMemorySession("s1")
    assert capabilities_of(store).counts_cheaply
    ttl = TTLSession(store, ttl=3600)
    assert not capabilities_of(ttl).counts_cheaply
    assert not capabilities_of(EncryptedSession(ttl, key=generate_key())).counts_cheaply
    assert capabilities_of(EncryptedSession(store, key=generate_key())).counts_cheaply


async def test_a_read_over_ttl_does_not_read_the_whole_history() -> None:
    counting = Counting(InMemorySession("s1"))
    session = compacting(EncryptedSession(TTLSession(counting, ttl=3600), key=generate_key()))
    items = sample_items(2000)
    for start in range(0, len(items), 8):
        await session.add_items(items[start : start + 8])
    await session.get_items()  # learns where to read from
    counting.rows = 0
    view = await session.get_items()
    assert view and len(view) < 40
    assert counting.rows < 200  # was every stored row (> 2000) before the fix


@pytest.mark.parametrize("over", ["store", "ttl and encryption"])
async def test_writes_that_compact_read_a_bounded_tail(over: str) -> None:
    """A write whose trigger fires reads back to the last record's anchor, not to the
    first item that record covers (it read the whole history: quadratic in its length)."""
    counting = Counting(InMemorySession("s1"))
    below: Any = counting
    if over != "store":
        below = EncryptedSession(TTLSession(counting, ttl=3600), key=generate_key())
    session = compacting(below)
    items = sample_items(1600)
    for start in range(0, 1200, 8):
        await session.add_items(items[start : start + 8])
    counting.rows = 0
    for start in range(1200, 1600, 8):
        await session.add_items(items[start : start + 8])
    writes = 400 // 8
    # Two reads a write (plan, then re-read to append), each of at least 128 rows (a read's
    # floor); before the fix each read reached the first item ever covered (> 1,200 rows).
    assert counting.rows < 2 * 300 * writes
    view = await session.get_items()
    assert view and view[0]["role"] == "developer"  # the summary still applies
