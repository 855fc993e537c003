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

Any other scheme raises ``ConfigurationError`` naming these; ``check_url`` says so without
opening anything (``memstack validate --resolve``).
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agents.memory import Session, SQLiteSession

import memstack.resources as resources
from memstack.backends.translate import store_errors, without_password
from memstack.durations import parse_duration, seconds_of
from memstack.errors import ConfigurationError

if TYPE_CHECKING:
    from agents.extensions.memory import RedisSession

__all__ = ["check_url", "open_backend"]

# Plain dialects get the async driver memstack's extras install.
_DEFAULT_DRIVERS = {
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "mysql": "mysql+aiomysql",
    "mariadb": "mariadb+aiomysql",
    "sqlite+async": "sqlite+aiosqlite",
}
_MYSQL_DIALECTS = ("mysql", "mariadb")
_REDIS_SCHEMES = ("redis", "rediss", "unix")
_KNOWN = (
    "sqlite, aiosqlite, redis, rediss, unix, postgresql, postgres, mysql, mariadb, "
    "or an installed SQLAlchemy dialect as dialect+driver, e.g. sqlite+aiosqlite"
)


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

    SQLAlchemy URLs create their tables unless ``create_tables=False``. Their engine is the
    process's for the URL and ``engine_kwargs`` (``memstack.resources``: one pool per
    event loop, closed by ``memstack.dispose()``), or the ``engine=`` you pass.
    ``redis://`` accepts ``key_prefix=`` and ``ttl=``; its client is the process's for the
    URL and ``redis_kwargs`` (one per event loop), or the ``redis_client=`` you pass. A
    store that cannot be opened (a SQLite file in a missing folder) raises ``BackendError``.
    """
    with store_errors(None, doing=f"opening {without_password(url)}"):
        return _open(url, session_id, options)


def check_url(url: str) -> None:
    """Check ``url`` as ``open_backend`` reads it, opening nothing: its form and its scheme."""
    scheme = _scheme(url)
    if scheme in ("sqlite", "aiosqlite"):
        _sqlite_path(url, scheme)
    elif scheme in _REDIS_SCHEMES:
        _redis_session_class(url)
    else:
        _sqlalchemy_url(url, scheme)


def _scheme(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise ConfigurationError(f"{url!r} is not a URL (expected scheme://…)")
    return scheme.lower()


def _open(url: str, session_id: str, options: dict[str, Any]) -> Session:
    if not isinstance(session_id, str) or not session_id:
        raise ConfigurationError("session_id must be a non-empty string")
    scheme = _scheme(url)
    if scheme == "sqlite":
        return SQLiteSession(session_id, db_path=_sqlite_path(url, scheme), **options)
    if scheme == "aiosqlite":
        from agents.extensions.memory import AsyncSQLiteSession

        return AsyncSQLiteSession(session_id, db_path=_sqlite_path(url, scheme), **options)
    if scheme in _REDIS_SCHEMES:
        return _open_redis(url, session_id, options)
    return _open_sqlalchemy(url, scheme, session_id, options)


def _redis_session_class(url: str) -> type[RedisSession]:
    try:
        from agents.extensions.memory import RedisSession
    except ImportError as exc:
        raise ConfigurationError(
            f"{url!r} needs the redis extra: pip install memstack[redis]"
        ) from exc
    return RedisSession


def _open_redis(url: str, session_id: str, options: dict[str, Any]) -> Session:
    redis_session = _redis_session_class(url)
    ttl = options.get("ttl")
    if isinstance(ttl, str | timedelta):
        # The SDK's key expiry is typed int (whole seconds); recipes write it as a duration.
        options["ttl"] = round(seconds_of(parse_duration(ttl) if isinstance(ttl, str) else ttl))
    # The process's client for the URL, as SQL stores share their engine: the SDK's
    # from_url would open a client, a pool and a connection per stack.
    client = options.pop("redis_client", None)
    if client is None:
        client = resources.PROCESS.redis(url, options.pop("redis_kwargs", None))
    return redis_session(session_id, redis_client=client, **options)


@functools.lru_cache(maxsize=256)  # parsed and its dialect loaded once per URL, not per request
def _sqlalchemy_url(url: str, scheme: str) -> str:
    """``url`` with the default async driver of a plain dialect; its dialect must load."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    from memstack.backends.engines import load_driver, missing_driver

    url = _DEFAULT_DRIVERS.get(scheme, scheme) + url[len(scheme) :]
    try:
        make_url(url).get_dialect()  # the dialect's module only: no driver, no connection
    except NoSuchModuleError as exc:
        raise ConfigurationError(f"no backend loads {scheme}:// URLs (known: {_KNOWN})") from exc
    except (ArgumentError, ValueError) as exc:  # unparsable, a port that is not a number
        raise ConfigurationError(f"{without_password(url)!r}: {exc}") from exc
    try:
        load_driver(url)
    except ImportError as exc:  # the process's engine is made on first use: say it now
        raise ConfigurationError(missing_driver(scheme, exc)) from exc
    return url


def _open_sqlalchemy(url: str, scheme: str, session_id: str, options: dict[str, Any]) -> Session:
    from agents.extensions.memory import SQLAlchemySession
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError
    from sqlalchemy.ext.asyncio import create_async_engine

    from memstack.backends.engines import LoopEngine, configure_engine, in_memory_sqlite
    from memstack.backends.prototypes import sdk_session

    url = _sqlalchemy_url(url, scheme)
    scheme = _DEFAULT_DRIVERS.get(scheme, scheme)
    engine = options.pop("engine", None)
    create_tables = options.pop("create_tables", True)
    if engine is None:
        engine_kwargs = options.pop("engine_kwargs", {})
        try:
            if in_memory_sqlite(url):  # its one connection is the database: never shared
                engine = create_async_engine(url, **engine_kwargs)
            else:  # the process's pool for this URL and these options (memstack.resources)
                engine = resources.engine(url, **engine_kwargs)
                if engine.dialect.name == "sqlite":
                    # The SDK sets SQLite's busy timeout and WAL on the engine it is given;
                    # a shared engine is one per loop, and each of them needs it.
                    configure_engine(engine, SQLAlchemySession._configure_sqlite_engine)
        except (ArgumentError, NoSuchModuleError, ImportError) as exc:
            raise ConfigurationError(
                f"cannot open {scheme}:// URLs: {exc} (is the driver installed? "
                "pip install memstack[postgres] or memstack[mysql])"
            ) from exc
    # A store per request: over the process's engine, copy the first one built (its
    # tables and session factory are the same for every session id).
    make: Any = sdk_session if isinstance(engine, LoopEngine) else _construct
    if engine.dialect.name in _MYSQL_DIALECTS and create_tables:
        # The SDK's schema uses VARCHAR without a length, which MySQL/MariaDB refuse;
        # memstack creates the same tables with lengths on first use instead.
        from memstack.backends.sqlalchemy_store import MySQLSQLAlchemySession

        session: Session = make(MySQLSQLAlchemySession, session_id, engine=engine, **options)
        return session
    session = make(
        SQLAlchemySession, session_id, engine=engine, create_tables=create_tables, **options
    )
    return session


def _construct(cls: type[Session], session_id: str, **options: Any) -> Session:
    return cls(session_id, **options)  # type: ignore[call-arg]
