"""Opening the memory database: URL to engine, and the schema-version check on first use.

    >>> from memstack.memory.database import engine_url
    >>> engine_url("sqlite://:memory:"), engine_url("postgresql://db/app")
    ('sqlite+aiosqlite://', 'postgresql+asyncpg://db/app')

Long-term memory needs SQL (SQLite, PostgreSQL or MariaDB); users write the plain URL
scheme and this module picks the async driver, so a wrong scheme fails with a message
naming the right ones rather than a SQLAlchemy dialect error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import event, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from memstack.backends.translate import store_errors
from memstack.errors import ConfigurationError
from memstack.memory.schema import SCHEMA_VERSION, Tables

__all__ = ["engine_url", "open_engine", "prepare", "secure_delete"]

_LAYER = "MemoryStore"
_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "mysql": "mysql+aiomysql",
    "mariadb": "mariadb+aiomysql",
}


def engine_url(url: str) -> str:
    """The SQLAlchemy async URL for a memory store URL."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigurationError(f"{url!r} is not a URL (expected scheme://…)", layer=_LAYER)
    scheme = scheme.lower()
    if scheme in ("sqlite", "aiosqlite"):
        if rest in ("", ":memory:", "/:memory:"):
            return "sqlite+aiosqlite://"
        if not rest.startswith("/"):
            raise ConfigurationError(
                f"{url!r}: write sqlite:///relative.db, sqlite:////absolute.db or "
                "sqlite://:memory:",
                layer=_LAYER,
            )
        return f"sqlite+aiosqlite://{rest}"
    if scheme in ("redis", "rediss", "unix"):
        raise ConfigurationError(
            "long-term memory needs a SQL database (SQLite, PostgreSQL or MariaDB), "
            f"not {scheme}://",
            layer=_LAYER,
        )
    return _DRIVERS.get(scheme, scheme) + "://" + rest


def open_engine(url: str, engine_kwargs: Mapping[str, Any] | None = None) -> AsyncEngine:
    """An engine for ``url``; an in-memory SQLite database is shared by all connections."""
    target = engine_url(url)
    kwargs = dict(engine_kwargs or {})
    if target == "sqlite+aiosqlite://":
        kwargs.setdefault("poolclass", StaticPool)
    with store_errors(None, layer=_LAYER, doing="opening the memory store"):
        try:
            return create_async_engine(target, **kwargs)
        except ImportError as exc:
            raise ConfigurationError(
                f"cannot open {url.partition('://')[0]}:// URLs: {exc} (pip install "
                "memstack[postgres] or memstack[mysql])",
                layer=_LAYER,
            ) from exc


def secure_delete(engine: AsyncEngine) -> None:
    """On SQLite, deleted memories are overwritten with zeros, not left in free pages."""
    if engine.dialect.name == "sqlite":
        event.listen(engine.sync_engine, "connect", _sqlite_secure_delete)


async def prepare(engine: AsyncEngine, tables: Tables, *, create_tables: bool) -> None:
    """Create the tables (if asked) and check, or record, the schema version."""
    meta = tables.meta
    with store_errors(None, layer=_LAYER, doing="preparing the memory tables"):
        async with engine.begin() as conn:
            if create_tables:
                await conn.run_sync(tables.metadata.create_all)
            found = (
                await conn.execute(select(meta.c.value).where(meta.c.name == "schema_version"))
            ).scalar()
            if found is None:
                await conn.execute(
                    insert(meta).values(name="schema_version", value=str(SCHEMA_VERSION))
                )
            elif found != str(SCHEMA_VERSION):
                raise ConfigurationError(
                    f"memory tables have schema version {found}; this memstack reads "
                    f"{SCHEMA_VERSION}",
                    layer=_LAYER,
                )


def _sqlite_secure_delete(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA secure_delete = ON")
    cursor.close()
