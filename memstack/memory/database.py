"""Opening the memory database: URL to engine, and the schema-version check on first use.

    >>> from memstack.memory.database import engine_url
    >>> engine_url("sqlite://:memory:"), engine_url("postgresql://db/app")
    ('sqlite+aiosqlite://', 'postgresql+asyncpg://db/app')
    >>> engine_url("foo://x")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    memstack.errors.ConfigurationError: MemoryStore: unknown URL scheme foo://; long-term ...

Long-term memory needs SQL (SQLite, PostgreSQL or MariaDB); users write the plain URL
scheme and this module picks the async driver, so a wrong scheme fails with a message
naming the right ones rather than a SQLAlchemy dialect error.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any

from sqlalchemy import Connection, Index, MetaData, event, insert, select, text
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    IntegrityError,
    NoSuchModuleError,
    ProgrammingError,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

import memstack.resources as resources
from memstack.backends.engines import (
    DEFAULT_DRIVERS,
    configure_engine,
    dialect_name,
    in_memory_sqlite,
    missing_driver,
)
from memstack.backends.engines import load_driver as load_engine_driver
from memstack.backends.translate import store_errors, without_password
from memstack.errors import ConfigurationError, DecryptionError, MissingDriverError
from memstack.memory.cipher import PLAIN_KID, MemoryCipher
from memstack.memory.schema import SCHEMA_VERSION, Tables, ranked_index

__all__ = [
    "check_keys",
    "check_scope_keys",
    "engine_url",
    "load_driver",
    "open_engine",
    "prepare",
    "sqlite_settings",
]

_LAYER = "MemoryStore"
# Bytes of a SQLite file each connection reads through a memory map: recall's statements
# read index and row pages at random, and through the map each page is a memory read
# instead of a read() into SQLite's own cache (benchmarks/README.md, "Recall's
# statements through a memory map"). Address space only; the pages are the OS's cache.
MMAP_BYTES = 1 << 30
# Creation attempts when another process creates the same tables at the same moment.
_ATTEMPTS = 10


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
    if "+" in scheme:  # a driver named by the caller (postgresql+psycopg): theirs to pick
        return f"{scheme}://{rest}"
    if scheme not in DEFAULT_DRIVERS:
        raise ConfigurationError(
            f"unknown URL scheme {scheme}://; long-term memory needs sqlite://, "
            "postgresql://, mysql:// or mariadb://",
            layer=_LAYER,
        )
    return f"{DEFAULT_DRIVERS[scheme]}://{rest}"


def open_engine(url: str, engine_kwargs: Mapping[str, Any] | None = None) -> AsyncEngine:
    """The process's engine for ``url`` (``memstack.resources``); ``:memory:`` gets its own.

    An in-memory SQLite database is shared by all connections of its engine.
    """
    target = engine_url(url)
    kwargs = dict(engine_kwargs or {})
    load_driver(url)
    with store_errors(None, layer=_LAYER, doing="opening the memory store"):
        try:
            if in_memory_sqlite(target):  # a database of its own, as each :memory: is
                kwargs.setdefault("poolclass", StaticPool)
                return create_async_engine(target, **kwargs)
            # The process's pool for this URL: the session store's too when they match.
            return resources.engine(target, **kwargs)
        except ArgumentError as exc:  # a malformed engine option
            raise ConfigurationError(
                f"cannot open {without_password(url)!r}: {exc}", layer=_LAYER
            ) from exc


def load_driver(url: str) -> None:
    """Import ``url``'s dialect and driver now, as opening the store does.

    ``MissingDriverError`` when this machine lacks one (another may have it);
    ``ConfigurationError`` for a URL no machine could open.
    """
    target = engine_url(url)
    with store_errors(None, layer=_LAYER, doing="opening the memory store"):
        try:
            load_engine_driver(target, layer=_LAYER)
        except NoSuchModuleError as exc:  # a dialect or driver plugin not installed here
            raise MissingDriverError(
                f"cannot open {without_password(url)!r}: {exc}", layer=_LAYER
            ) from exc
        except ArgumentError as exc:  # a malformed URL
            raise ConfigurationError(
                f"cannot open {without_password(url)!r}: {exc}", layer=_LAYER
            ) from exc
        except ImportError as exc:
            raise MissingDriverError(
                missing_driver(url.partition("://")[0], exc), layer=_LAYER
            ) from exc


def sqlite_settings(engine: AsyncEngine) -> None:
    """On SQLite, deleted memories are overwritten with zeros, not left in free pages, and
    the file is read through a memory map (``MMAP_BYTES``)."""
    if dialect_name(engine) == "sqlite":
        configure_engine(engine, _listen_sqlite_settings)


def _listen_sqlite_settings(engine: AsyncEngine) -> None:
    if not event.contains(engine.sync_engine, "connect", _sqlite_settings):
        event.listen(engine.sync_engine, "connect", _sqlite_settings)


async def prepare(engine: AsyncEngine, tables: Tables, *, create_tables: bool) -> None:
    """Create the tables (if asked) and check, or record, the schema version.

    Safe when several processes open a new database at once: on PostgreSQL and MariaDB
    the creation runs under a database lock named after the tables; SQLite has no such
    lock, so a creation that lost a race to another process (a table or the version row
    that appeared meanwhile) is tried again, and then finds everything in place.
    """
    with store_errors(None, layer=_LAYER, doing="preparing the memory tables"):
        for attempt in range(_ATTEMPTS):
            try:
                async with engine.begin() as conn, _creation_lock(conn, tables):
                    if create_tables:
                        await conn.run_sync(tables.metadata.create_all)
                        await conn.run_sync(_index_terms, tables)
                    await _check_version(conn, tables)
                return
            except DBAPIError as exc:
                if attempt == _ATTEMPTS - 1 or not _lost_race(exc):
                    raise
                await asyncio.sleep(random.uniform(0.01, 0.05) * (attempt + 1))


def _index_terms(conn: Connection, tables: Tables) -> None:
    """Give terms tables made before ``ranked_index`` that index, and drop the one it
    replaces (a prefix of it). Runs under the creation lock like the tables; on SQLite a
    second process finds the index made, or the file locked, and looks again."""
    ranked = ranked_index(tables)
    ranked.create(conn, checkfirst=True)
    # Named on a copy of the table: an index made on ``tables.terms`` would join it.
    terms = tables.terms.to_metadata(MetaData())
    replaced = str(ranked.name).removesuffix("_ranked") + "_impact"
    Index(replaced, terms.c.scope, terms.c.term, terms.c.impact).drop(conn, checkfirst=True)


def _lost_race(exc: DBAPIError) -> bool:
    """Whether another process created a table, or the version row, first, dropped the
    index an older memstack made first, or held the file: worth another look. A
    database that cannot be reached is not."""
    if isinstance(exc, IntegrityError | ProgrammingError):  # duplicate row, type or table
        return True
    message = str(exc.orig).lower()
    return any(sign in message for sign in ("already exists", "locked", "no such index"))


async def _check_version(conn: AsyncConnection, tables: Tables) -> None:
    meta = tables.meta
    found = (
        await conn.execute(select(meta.c.value).where(meta.c.name == "schema_version"))
    ).scalar()
    if found is None:
        await conn.execute(insert(meta).values(name="schema_version", value=str(SCHEMA_VERSION)))
    elif found != str(SCHEMA_VERSION):
        raise ConfigurationError(
            f"memory tables have schema version {found}; this memstack reads {SCHEMA_VERSION}",
            layer=_LAYER,
        )


@asynccontextmanager
async def _creation_lock(conn: AsyncConnection, tables: Tables) -> AsyncIterator[None]:
    """Serialise table creation across processes where the database has a named lock."""
    name = f"memstack:{tables.meta.name}"
    dialect = conn.dialect.name
    if dialect == "postgresql":  # released with the transaction
        digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
        await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": digest})
    elif dialect in ("mysql", "mariadb"):  # a session lock: released below
        await conn.execute(text("SELECT GET_LOCK(:name, 60)"), {"name": name[:64]})
    try:
        yield
    finally:
        if dialect in ("mysql", "mariadb"):
            with suppress(DBAPIError):  # a broken connection has released it already
                await conn.execute(text("SELECT RELEASE_LOCK(:name)"), {"name": name[:64]})


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


def _sqlite_settings(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA secure_delete = ON")
    cursor.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
    cursor.close()
