"""The process's SQLAlchemy engines: one pool per URL and options, per running event loop.

    >>> from memstack.backends.engines import LoopEngine, in_memory_sqlite
    >>> LoopEngine("postgresql+asyncpg://app:secret@db/chat", {})
    LoopEngine('postgresql+asyncpg://app:***@db/chat')
    >>> in_memory_sqlite("sqlite+aiosqlite://"), in_memory_sqlite("sqlite+aiosqlite:///a.db")
    (True, False)

``memstack.resources`` keeps one ``LoopEngine`` per URL and engine options; the SDK's
``SQLAlchemySession`` and ``MemoryStore`` hold it as any ``AsyncEngine``, and each
connection they ask for comes from the pool of the loop they run on (``memstack.loops``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from memstack.errors import ConfigurationError
from memstack.loops import PerLoop

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

__all__ = [
    "DEFAULT_DRIVERS",
    "LoopEngine",
    "configure_engine",
    "dialect_name",
    "in_memory_sqlite",
    "load_driver",
    "missing_driver",
]


class LoopEngine(AsyncEngine):
    """An ``AsyncEngine`` that is a separate engine, with its own pool, on each running loop.

    Sessions and stores hold it as they would hold any engine; every connection they ask
    for comes from the pool of the loop they run on.
    """

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        # AsyncEngine.__init__ would fix one sync engine; ours is looked up per loop.
        self._url = url
        self._options = dict(options)
        parsed = make_url(url)
        self.shown = parsed.render_as_string(hide_password=True)
        self.dialect_name = parsed.get_backend_name()
        self._setups: list[Callable[[AsyncEngine], None]] = []
        self._setup_lock = threading.Lock()
        self.engines: PerLoop[AsyncEngine] = PerLoop(self._new_engine, _dispose_engine)

    @property
    def sync_engine(self) -> Engine:
        return self.engines.get().sync_engine

    @sync_engine.setter
    def sync_engine(self, value: Engine) -> None:
        raise AttributeError("a LoopEngine's sync_engine is its running loop's")

    def configure(self, setup: Callable[[AsyncEngine], None]) -> None:
        """Run ``setup`` on each engine of this pool, those to come included (once each)."""
        with self._setup_lock:
            if setup in self._setups:
                return
            self._setups.append(setup)
            engines = self.engines.values()
        for each in engines:
            setup(each)

    def _new_engine(self) -> AsyncEngine:
        made = create_async_engine(self._url, **self._options)
        with self._setup_lock:
            setups = list(self._setups)
        for setup in setups:
            setup(made)
        return made

    async def dispose(self, close: bool = True) -> None:
        """Close the idle connections of this loop's pool (others' loops close theirs).

        The engine stays usable, as any disposed engine does: other sessions share it.
        """
        await self.engines.get().dispose(close)

    def __repr__(self) -> str:
        return f"LoopEngine({self.shown!r})"


async def _dispose_engine(engine: AsyncEngine) -> None:
    await engine.dispose()


def dialect_name(engine: AsyncEngine) -> str:
    """``engine.dialect.name``, without making a shared engine's pool for the running loop
    (or for no loop: a store is often built before any loop runs, e.g. to check a recipe)."""
    if isinstance(engine, LoopEngine):
        return engine.dialect_name
    return engine.dialect.name


def configure_engine(engine: AsyncEngine, setup: Callable[[AsyncEngine], None]) -> None:
    """Run ``setup`` on ``engine``, or on each per-loop engine of a shared one."""
    if isinstance(engine, LoopEngine):
        engine.configure(setup)
    else:
        setup(engine)


#: The async driver memstack picks for a URL that names only its dialect: the one its
#: extras install (``memstack[postgres]``, ``memstack[mysql]``).
DEFAULT_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "mysql": "mysql+aiomysql",
    "mariadb": "mariadb+aiomysql",
}


@functools.lru_cache(maxsize=256)  # once per URL, not per store a request opens
def load_driver(url: str, *, layer: str | None = None) -> None:
    """Import ``url``'s dialect and driver now, refusing one that is not async
    (``sqlite+pysqlite://``): the process's engines are made on first use, where either
    would be a raw error from the first query, naming neither the URL nor the fix.
    ``ImportError`` when the driver is not installed (``missing_driver`` says what to do)."""
    parsed = make_url(url)
    dialect = parsed.get_dialect()
    if not dialect.get_async_dialect_cls(parsed).is_async:
        known = DEFAULT_DRIVERS.get(dialect.name)
        fix = (  # without a default of ours, the plain scheme would name this driver again
            f"use {dialect.name}:// (memstack picks an async driver) or name one (e.g. {known})"
            if known
            else f"name an async driver for {dialect.name} ({dialect.name}+driver://)"
        )
        raise ConfigurationError(f"the {dialect.driver} driver is not async; {fix}", layer=layer)
    dialect.import_dbapi()


def missing_driver(scheme: str, exc: ImportError) -> str:
    """What to install for a URL written as ``scheme://``: memstack's extras hold only the
    drivers it picks, not one the URL names (``postgresql+psycopg``)."""
    dialect, plus, driver = scheme.partition("+")
    if plus and dialect.lower() in DEFAULT_DRIVERS:
        return (
            f"cannot open {scheme}:// URLs: {exc} (install the {driver} driver, or write "
            f"{dialect}:// for the one memstack[postgres] or memstack[mysql] installs)"
        )
    if plus:
        return f"cannot open {scheme}:// URLs: {exc} (install the {driver} driver)"
    extras = "memstack[postgres] or memstack[mysql]"
    return f"cannot open {scheme}:// URLs: {exc} (pip install {extras})"


@functools.lru_cache(maxsize=256)  # asked per store opened: a stack is built per request
def in_memory_sqlite(url: str) -> bool:
    """Whether ``url`` names an in-memory SQLite database.

    Such an engine is never shared: its one connection *is* the database, and each
    ``sqlite://:memory:`` opened is a database of its own.
    """
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite"):
        return False
    return parsed.database in (None, "", ":memory:") or parsed.query.get("mode") == "memory"
