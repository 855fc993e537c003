"""CompactionSession over TTL reads a bounded tail: TTL's count() reads everything, so
the compaction layer must not ask it on every read (found by benchmarks/bench_scale.py)."""

from __future__ import annotations

from typing import Any

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


def test_ttl_and_encrypted_capabilities_report_that_counting_reads_everything() -> None:
    store = InMemorySession("s1")
    assert capabilities_of(store).counts_cheaply
    ttl = TTLSession(store, ttl=3600)
    assert not capabilities_of(ttl).counts_cheaply
    assert not capabilities_of(EncryptedSession(ttl, key=generate_key())).counts_cheaply
    assert capabilities_of(EncryptedSession(store, key=generate_key())).counts_cheaply


async def test_a_read_over_ttl_does_not_read_the_whole_history() -> None:
    counting = Counting(InMemorySession("s1"))
    below = EncryptedSession(TTLSession(counting, ttl=3600), key=generate_key())
    session = CompactionSession(
        below,
        strategy=Summarize(ExtractiveSummarizer(), max_tokens=300),
        trigger=Items(12, target=4),
        keep_last_turns=1,
    )
    items = sample_items(2000)
    for start in range(0, len(items), 8):
        await session.add_items(items[start : start + 8])
    await session.get_items()  # learns where to read from
    counting.rows = 0
    view = await session.get_items()
    assert view and len(view) < 40
    assert counting.rows < 200  # was every stored row (> 2000) before the fix
