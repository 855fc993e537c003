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

import memstack.resources as resources
from memstack.backends.engines import configure_engine, in_memory_sqlite
from memstack.backends.translate import store_errors
from memstack.errors import ConfigurationError, DecryptionError
from memstack.memory.cipher import PLAIN_KID, MemoryCipher
from memstack.memory.schema import SCHEMA_VERSION, Tables

__all__ = [
    "check_keys",
    "check_scope_keys",
    "engine_url",
    "open_engine",
    "prepare",
    "secure_delete",
]

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
    """The process's engine for ``url`` (``memstack.resources``); ``:memory:`` gets its own.

    An in-memory SQLite database is shared by all connections of its engine.
    """
    target = engine_url(url)
    kwargs = dict(engine_kwargs or {})
    with store_errors(None, layer=_LAYER, doing="opening the memory store"):
        try:
            if in_memory_sqlite(target):  # a database of its own, as each :memory: is
                kwargs.setdefault("poolclass", StaticPool)
                return create_async_engine(target, **kwargs)
            # The process's pool for this URL: the session store's too when they match.
            return resources.engine(target, **kwargs)
        except ImportError as exc:
            raise ConfigurationError(
                f"cannot open {url.partition('://')[0]}:// URLs: {exc} (pip install "
                "memstack[postgres] or memstack[mysql])",
                layer=_LAYER,
            ) from exc


def secure_delete(engine: AsyncEngine) -> None:
    """On SQLite, deleted memories are overwritten with zeros, not left in free pages."""
    if engine.dialect.name == "sqlite":
        configure_engine(engine, _listen_secure_delete)


def _listen_secure_delete(engine: AsyncEngine) -> None:
    if not event.contains(engine.sync_engine, "connect", _sqlite_secure_delete):
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


async def check_scope_keys(
    engine: AsyncEngine, tables: Tables, cipher: MemoryCipher, scope: str
) -> None:
    """Refuse a key that cannot read ``scope``'s memories (``check_keys``)."""
    m = tables.memories
    with store_errors(None, layer=_LAYER, doing="checking the memory keys"):
        async with engine.connect() as conn:
            query = select(m.c.kid).where(m.c.scope == scope).distinct()
            stored = set((await conn.execute(query)).scalars())
    check_keys(stored, cipher)


def check_keys(stored: set[str], cipher: MemoryCipher) -> None:
    """Refuse a key that cannot read what is stored, before anything is written or missed.

    Searches match HMAC digests under the key, so with a wrong key (or none) a recall
    would find nothing and a write would add rows no right key reads: both silent.
    """
    held = set(cipher.kids())
    if not cipher.encrypted and stored - {PLAIN_KID}:
        kid = sorted(stored - {PLAIN_KID})[0]
        raise DecryptionError(
            f"memories are encrypted under key id {kid!r} but the store was opened without "
            "a key; open it with that key (key= or keyring=)",
            layer=_LAYER,
            key_id=kid,
        )
    if cipher.encrypted and PLAIN_KID in stored:
        raise DecryptionError(
            "memories are stored in plaintext but the store has a key (rows written "
            "without a key); open it without one, or export and re-import them",
            layer=_LAYER,
        )
    unknown = sorted(stored - held - {PLAIN_KID})
    if unknown:
        raise DecryptionError(
            f"memories are encrypted under key id {unknown[0]!r}, which the key provider "
            "does not hold (a wrong key, or one dropped before rotate())",
            layer=_LAYER,
            key_id=unknown[0],
        )


def _sqlite_secure_delete(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA secure_delete = ON")
    cursor.close()
