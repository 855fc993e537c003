"""A read that needs more rows always asks for more: writers that append after it counted
the store must not keep it asking for the same number forever (found in review: a TTL
reader on PostgreSQL asked for 155 rows ~1,200 times a second while writers had made 198).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents.memory import SQLiteSession

from memstack import pipeline
from memstack.backends.capabilities import Tail


def message(n: int) -> dict[str, Any]:
    return {"role": "user", "content": f"message {n}"}


async def test_a_read_grows_past_a_count_that_writers_made_stale(tmp_path: Path) -> None:
    store = SQLiteSession("s", db_path=str(tmp_path / "s.db"))
    await store.add_items([message(n) for n in range(300)])  # type: ignore[misc]
    sizes: list[int] = []

    async def newest(size: int) -> Tail:
        sizes.append(size)
        assert len(sizes) < 12, f"the read asked for {sizes}: it does not grow"
        if len(sizes) <= 3:  # other writers append 50 rows during each of the first reads
            start = 1000 + 50 * len(sizes)
            await store.add_items([message(n) for n in range(start, start + 50)])  # type: ignore[misc]
        items = await store.get_items(limit=size)
        return Tail.undated(items, complete=len(items) < size)

    async def everything(tail: Tail) -> list[Any] | None:
        return list(tail.items) if tail.complete else None  # a layer that needs it all

    try:
        found = await pipeline.read([], store, newest, everything, None, hinted=False)
        assert len(found) == 450 and found == await store.get_items()
        assert sizes == sorted(set(sizes)), sizes  # every read longer than the one before
    finally:
        store.close()
