"""The memory store's own SQLite connections: deleted pages zeroed, the file read through a map."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from memstack.memory import MemoryStore
from memstack.memory.database import MMAP_BYTES


async def test_sqlite_connections_zero_deleted_pages_and_map_the_file(tmp_path: Path) -> None:
    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'm.db'}", embedder=None)
    await store.remember("ana", "Keeps bees")
    async with store.engine.connect() as conn:
        secure = (await conn.execute(text("PRAGMA secure_delete"))).scalar()
        mapped = (await conn.execute(text("PRAGMA mmap_size"))).scalar()
    await store.close()
    assert secure == 1
    # Recall's statements read index pages at random: through a map, not a read() each
    # (benchmarks/README.md, "Recall's statements through a memory map").
    assert mapped == MMAP_BYTES == 1 << 30
