"""``StorageCapabilities.place``: stores over one database share what the process keeps
about a session (a compaction's backoff); stores over other databases, or in memory, do not."""

from __future__ import annotations

from pathlib import Path

from agents import SQLiteSession
from agents.extensions.memory import SQLAlchemySession

from memstack import capabilities_of
from memstack.testing import InMemorySession


def place(session: object) -> object:
    return capabilities_of(session).place()  # type: ignore[arg-type]


def test_stores_over_one_file_share_a_place(tmp_path: Path) -> None:
    one, other = tmp_path / "one.db", tmp_path / "other.db"
    assert place(SQLiteSession("s", one)) == place(SQLiteSession("t", one))
    assert place(SQLiteSession("s", one)) != place(SQLiteSession("s", other))
    assert place(SQLiteSession("s")) != place(SQLiteSession("s"))  # each in memory its own


async def test_sqlalchemy_stores_share_a_place_by_url(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}"
    first = SQLAlchemySession.from_url("s", url=url)
    second = SQLAlchemySession.from_url("s", url=url)
    memory = SQLAlchemySession.from_url("s", url="sqlite+aiosqlite:///:memory:")
    again = SQLAlchemySession.from_url("s", url="sqlite+aiosqlite:///:memory:")
    try:
        assert place(first) == place(second)
        assert place(memory) != place(again)
    finally:
        for session in (first, second, memory, again):
            await session.engine.dispose()


def test_a_store_of_your_own_is_its_own_place() -> None:
    assert place(InMemorySession("s")) != place(InMemorySession("s"))
