"""open_backend: URLs to the SDK's own session classes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from agents.extensions.memory import AsyncSQLiteSession, RedisSession, SQLAlchemySession
from agents.memory import SQLiteSession

from memstack import ConfigurationError, open_backend
from memstack.backends.open import check_url

from ..conftest import MYSQL_URL, require_service


def test_sqlite_urls(tmp_path: Path):
    assert open_backend("sqlite://:memory:", "s").db_path == ":memory:"
    assert open_backend("sqlite://", "s").db_path == ":memory:"
    file = open_backend(f"sqlite:///{tmp_path}/a.db", "s")
    assert isinstance(file, SQLiteSession) and file.db_path == f"{tmp_path}/a.db"
    assert isinstance(open_backend(f"aiosqlite:///{tmp_path}/b.db", "s"), AsyncSQLiteSession)


async def test_sqlalchemy_and_redis_urls(tmp_path: Path):
    sa = open_backend(f"sqlite+aiosqlite:///{tmp_path}/c.db", "s")
    assert isinstance(sa, SQLAlchemySession)
    pg = open_backend("postgresql://u@127.0.0.1/db", "s")
    assert isinstance(pg, SQLAlchemySession) and pg.engine.dialect.driver == "asyncpg"
    my = open_backend("mysql://u@127.0.0.1/db", "s")
    assert my.engine.dialect.driver == "aiomysql"
    assert isinstance(open_backend("redis://127.0.0.1:6379/0", "s"), RedisSession)
    for session in (sa, pg, my):
        await session.engine.dispose()


async def test_mariadb_tables_are_created_with_lengths():
    require_service("MariaDB", MYSQL_URL)
    session = open_backend(
        MYSQL_URL,
        "mysql-tables",
        messages_table="memstack_probe_messages",
        sessions_table="memstack_probe_sessions",
    )
    big = {"role": "user", "content": "y" * 200_000}  # over MySQL TEXT's 64 KiB
    await session.add_items([big])
    assert await session.get_items() == [big]
    await session.clear_session()
    await session.engine.dispose()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("no-scheme", "is not a URL"),
        ("sqlite:relative.db", "is not a URL"),
        ("sqlite://relative.db", "write sqlite:///relative.db"),
        ("nosuchdb+nodriver://x", "no backend loads nosuchdb\\+nodriver:// URLs"),
        ("foo://x", r"no backend loads foo:// URLs \(known: sqlite, aiosqlite, redis, "),
        ("postgresql+nodriver://x", "no backend loads postgresql\\+nodriver:// URLs"),
        ("sqlite+pysqlite:///x.db", r"pysqlite driver is not async; use sqlite://"),
        ("postgresql+psycopg2://db/x", r"psycopg2 driver is not async; use postgresql://"),
        # No async default memstack knows: no circular "use mssql://", no "e.g. its".
        ("mssql://db/x", r"pyodbc driver is not async; name an async driver for mssql \("),
        ("oracle+cx_oracle://db/x", r"cx_oracle driver is not async; name an async driver for"),
    ],
)
def test_bad_urls(url: str, message: str):
    with pytest.raises(ConfigurationError, match=message):
        check_url(url)
    with pytest.raises(ConfigurationError, match=message):
        open_backend(url, "s")


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://:memory:",
        "sqlite:///never.db",
        "aiosqlite:///never.db",
        "postgresql://u@127.0.0.1:1/db",
        "mysql+aiomysql://u@127.0.0.1:1/db",
        "sqlite+aiosqlite:///never.db",
        "redis://127.0.0.1:1/0",
    ],
)
def test_check_url_opens_nothing(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    check_url(url)
    assert list(tmp_path.iterdir()) == []


def test_session_id_required():
    with pytest.raises(ConfigurationError, match="session_id must be a non-empty string"):
        open_backend("sqlite://:memory:", "")


def test_a_store_that_cannot_be_opened_raises_backend_error(tmp_path: Path):
    from memstack import BackendError

    with pytest.raises(BackendError, match=r"^opening sqlite:///.*/missing/x.db: OperationalError"):
        open_backend(f"sqlite:///{tmp_path}/missing/x.db", "s")


def test_passwords_never_appear_in_open_errors():
    from memstack.backends.translate import without_password

    assert without_password("postgresql://app:hunter2@db/x") == "postgresql://app:***@db/x"


def test_a_driver_not_installed_is_named_when_the_store_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The process's engine is made on first use: without a check at open, a missing driver
    was a raw ImportError at the first read, and ``validate --resolve`` said "ok"."""
    monkeypatch.setitem(sys.modules, "asyncpg", None)  # as without the [postgres] extra
    url = "postgresql://app@db/driverless-backend"  # a URL no test loaded
    with pytest.raises(ConfigurationError, match=r"asyncpg.*pip install memstack\[postgres\]"):
        check_url(url)
    with pytest.raises(ConfigurationError, match=r"asyncpg.*pip install memstack\[postgres\]"):
        open_backend(url, "s")
