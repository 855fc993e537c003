"""Build the SDK's own session classes from a URL.

    >>> from memstack.backends import open_backend
    >>> open_backend("sqlite://:memory:", "user-42")  # doctest: +ELLIPSIS
    <agents.memory.sqlite_session.SQLiteSession object at ...>

URL → SDK session:

- ``sqlite:///rel.db``, ``sqlite:////abs.db``, ``sqlite://:memory:`` → ``SQLiteSession``
- ``aiosqlite:///rel.db`` → ``AsyncSQLiteSession``
- ``postgresql://…``, ``mysql://…``, any ``dialect+driver://…`` → ``SQLAlchemySession``
  (plain ``postgresql``/``mysql`` get the asyncpg/aiomysql drivers)
- ``redis://…``, ``rediss://…`` → ``RedisSession``
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from agents.memory import Session, SQLiteSession

from memstack.backends.translate import store_errors
from memstack.durations import parse_duration, seconds_of
from memstack.errors import ConfigurationError

__all__ = ["open_backend"]

# Plain dialects get the async driver memstack's extras install.
_DEFAULT_DRIVERS = {
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "mysql": "mysql+aiomysql",
    "mariadb": "mariadb+aiomysql",
    "sqlite+async": "sqlite+aiosqlite",
}
_MYSQL_DIALECTS = ("mysql", "mariadb")


def _sqlite_path(url: str, scheme: str) -> str:
    rest = url[len(scheme) + len("://") :]
    if rest in ("", ":memory:", "/:memory:"):
        return ":memory:"
    if not rest.startswith("/"):
        raise ConfigurationError(
            f"{url!r}: write sqlite:///relative.db, sqlite:////absolute.db or sqlite://:memory:"
        )
    return rest[1:]


def open_backend(url: str, session_id: str, **options: Any) -> Session:
    """The SDK session for ``url``; ``options`` go to its constructor.

    SQLAlchemy URLs create their tables unless ``create_tables=False`` and accept a shared
    ``engine=`` (one pool for many sessions). ``redis://`` accepts ``key_prefix=``. A store
    that cannot be opened (a SQLite file in a missing folder) raises ``BackendError``.
    """
    with store_errors(None, doing=f"opening {_without_password(url)}"):
        return _open(url, session_id, options)


def _without_password(url: str) -> str:
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def _open(url: str, session_id: str, options: dict[str, Any]) -> Session:
    if not isinstance(session_id, str) or not session_id:
        raise ConfigurationError("session_id must be a non-empty string")
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise ConfigurationError(f"{url!r} is not a URL (expected scheme://…)")
    scheme = scheme.lower()
    if scheme == "sqlite":
        return SQLiteSession(session_id, db_path=_sqlite_path(url, scheme), **options)
    if scheme == "aiosqlite":
        from agents.extensions.memory import AsyncSQLiteSession

        return AsyncSQLiteSession(session_id, db_path=_sqlite_path(url, scheme), **options)
    if scheme in ("redis", "rediss", "unix"):
        return _open_redis(url, session_id, options)
    return _open_sqlalchemy(url, scheme, session_id, options)


def _open_redis(url: str, session_id: str, options: dict[str, Any]) -> Session:
    try:
        from agents.extensions.memory import RedisSession
    except ImportError as exc:
        raise ConfigurationError(
            f"{url!r} needs the redis extra: pip install memstack[redis]"
        ) from exc
    ttl = options.get("ttl")
    if isinstance(ttl, str | timedelta):
        # The SDK's key expiry is typed int (whole seconds); recipes write it as a duration.
        options["ttl"] = round(seconds_of(parse_duration(ttl) if isinstance(ttl, str) else ttl))
    return RedisSession.from_url(session_id, url=url, **options)


def _open_sqlalchemy(url: str, scheme: str, session_id: str, options: dict[str, Any]) -> Session:
    from agents.extensions.memory import SQLAlchemySession
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError
    from sqlalchemy.ext.asyncio import create_async_engine

    if scheme in _DEFAULT_DRIVERS:
        url = _DEFAULT_DRIVERS[scheme] + url[len(scheme) :]
        scheme = _DEFAULT_DRIVERS[scheme]
    engine = options.pop("engine", None)
    create_tables = options.pop("create_tables", True)
    if engine is None:
        try:
            engine = create_async_engine(url, **options.pop("engine_kwargs", {}))
        except (ArgumentError, NoSuchModuleError, ImportError) as exc:
            raise ConfigurationError(
                f"cannot open {scheme}:// URLs: {exc} (is the driver installed? "
                "pip install memstack[postgres] or memstack[mysql])"
            ) from exc
    if engine.dialect.name in _MYSQL_DIALECTS and create_tables:
        # The SDK's schema uses VARCHAR without a length, which MySQL/MariaDB refuse;
        # memstack creates the same tables with lengths on first use instead.
        from memstack.backends.sqlalchemy_store import MySQLSQLAlchemySession

        return MySQLSQLAlchemySession(session_id, engine=engine, **options)
    return SQLAlchemySession(session_id, engine=engine, create_tables=create_tables, **options)
