"""The memory store's own SQLite connections: deleted pages zeroed, the file read through a map."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from memstack.errors import ConfigurationError
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


def test_an_unloadable_dialect_or_driver_is_refused_when_the_store_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The shared engine is made on first use, per loop: without a check at from_url, a
    # missing driver was a raw ImportError at the first query (exit 1 from the CLI).
    with pytest.raises(ConfigurationError, match="Can't load plugin") as refused:
        MemoryStore.from_url("postgresql+nosuchdriver://app:secret@db/app")
    assert "secret" not in str(refused.value)
    with pytest.raises(ConfigurationError, match="pysqlite driver is not async; use sqlite://"):
        MemoryStore.from_url("sqlite+pysqlite:///never.db")  # was a raw InvalidRequestError
    monkeypatch.setitem(sys.modules, "asyncpg", None)  # as without the [postgres] extra
    with pytest.raises(ConfigurationError, match=r"pip install memstack\[postgres\]"):
        MemoryStore.from_url("postgresql://app@db/driverless")  # a URL no test loaded


@pytest.mark.parametrize(
    ("driver", "url", "said", "not_said"),
    [
        # memstack[postgres] installs asyncpg: it would not give psycopg its driver.
        (
            "psycopg",
            "postgresql+psycopg://app@db/named",
            "install the psycopg driver, or write postgresql://",
            "pip install memstack[postgres]",
        ),
        # A dialect memory has no default driver for: no scheme to suggest.
        (
            "oracledb",
            "oracle+oracledb://app@db/named",
            "install the oracledb driver)",
            "write oracle://",
        ),
    ],
)
def test_a_missing_driver_named_in_the_url_is_not_blamed_on_the_extras(
    monkeypatch: pytest.MonkeyPatch, driver: str, url: str, said: str, not_said: str
) -> None:
    monkeypatch.setitem(sys.modules, driver, None)
    with pytest.raises(ConfigurationError) as refused:
        MemoryStore.from_url(url)
    assert said in str(refused.value) and not_said not in str(refused.value)
