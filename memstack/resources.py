"""What the whole process shares: database pools and model clients, disposed of in one call.

    >>> import asyncio, memstack
    >>> from memstack import resources
    >>> engine = resources.engine("sqlite+aiosqlite:///shared.db")
    >>> engine is resources.engine("sqlite+aiosqlite:///shared.db")
    True
    >>> asyncio.run(memstack.dispose())
    >>> resources.stats().engines
    0

A server builds a stack per request, so nothing a stack borrows from outside may belong to
the stack: ``open_backend`` and ``MemoryStore.from_url`` take their engine from here (one
per URL and engine options; a Redis store its client, one per URL and client options),
summarisers their HTTP client (one per endpoint: base URL, API key, retries). The
drivers bind connections to the event loop that opened them (asyncpg, aiomysql,
aiosqlite, redis-py, httpx), and a stack may be used from several threads each
running its own loop, so each shared resource is really one per running loop, made there
on first use and dropped with its loop. ``await memstack.dispose()`` closes them all at
shutdown (an ASGI lifespan's, the end of a script), and empties the process cache
(``memstack.cache``); anything used afterwards is made again.

In-memory SQLite is never shared: its one connection *is* the database, and each
``sqlite://:memory:`` opened is a database of its own.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from memstack.cache import clear as clear_cache
from memstack.loops import PerLoop

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from sqlalchemy.ext.asyncio import AsyncEngine

    from memstack.backends.engines import LoopEngine
    from memstack.backends.redis_clients import LoopRedis

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

__all__ = [
    "PROCESS",
    "Endpoint",
    "Resources",
    "Stats",
    "dispose",
    "engine",
    "model_client",
    "options_key",
    "redis_client",
    "stats",
]


async def _close_client(client: AsyncOpenAI) -> None:
    await client.close()


@dataclass(frozen=True)
class Endpoint:
    """Where model calls go: base URL, API key (never shown) and retries."""

    base_url: str | None
    api_key: str | None
    max_retries: int = 2

    def __repr__(self) -> str:
        return f"Endpoint(base_url={self.base_url!r}, key={self.fingerprint()})"

    def fingerprint(self) -> str:
        """A digest naming this configuration, the key included, that reveals nothing of it."""
        text = "\0".join((self.base_url or "", self.api_key or "", str(self.max_retries)))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Stats:
    """How many engines (pools), model clients and Redis clients are open, across loops."""

    engines: int
    model_clients: int
    redis_clients: int = 0


def options_key(value: Any) -> Hashable:
    """``value`` as a dict key: mappings and lists by content, anything else by itself."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), options_key(v)) for k, v in value.items()))
    if isinstance(value, list | tuple | set | frozenset):
        return tuple(options_key(v) for v in value)
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))  # an unhashable option object: shared only with itself
    return value  # type: ignore[no-any-return]


class Resources:
    """The process's engines and Redis clients by URL and options, its model clients by
    endpoint."""

    def __init__(self) -> None:
        self._engines: dict[Hashable, LoopEngine] = {}
        self._redis: dict[Hashable, LoopRedis] = {}
        # By the endpoint itself (its key in memory only, as the clients hold it anyway).
        self._clients: dict[Endpoint, PerLoop[AsyncOpenAI]] = {}
        self._lock = threading.Lock()

    def _shared(self, registry: dict[K, V], key: K, make: Callable[[], V]) -> V:
        """``registry[key]``, made once by ``make`` (one dict lookup when it exists)."""
        found = registry.get(key)
        if found is None:
            with self._lock:
                found = registry.get(key)
                if found is None:
                    found = registry[key] = make()
        return found

    def engine(self, url: str, options: Mapping[str, Any] | None = None) -> LoopEngine:
        """The shared engine for ``url`` (an async SQLAlchemy URL) and these options."""
        from memstack.backends.engines import LoopEngine

        key = (url, options_key(options or {}))
        return self._shared(self._engines, key, lambda: LoopEngine(url, options or {}))

    def redis(self, url: str, options: Mapping[str, Any] | None = None) -> LoopRedis:
        """The shared Redis client for ``url`` and these ``redis.asyncio.from_url`` options."""
        from memstack.backends.redis_clients import LoopRedis

        key = (url, options_key(options or {}))
        return self._shared(self._redis, key, lambda: LoopRedis(url, options or {}))

    def model_client(self, endpoint: Endpoint) -> PerLoop[AsyncOpenAI]:
        """The shared clients (one per loop) for ``endpoint``."""
        return self._shared(
            self._clients, endpoint, lambda: PerLoop(lambda: _new_client(endpoint), _close_client)
        )

    def stats(self) -> Stats:
        engines = sum(len(e.engines) for e in list(self._engines.values()))
        clients = sum(len(c) for c in list(self._clients.values()))
        redis = sum(len(r.clients) for r in list(self._redis.values()))
        return Stats(engines=engines, model_clients=clients, redis_clients=redis)

    async def dispose(self) -> None:
        """Close every engine and client, each on its own loop. They reopen on next use."""
        # Stacks built before keep their LoopEngine and endpoint: both stay registered, so
        # what they open again is counted, and closed by the next dispose().
        pools: list[PerLoop[Any]] = [e.engines for e in list(self._engines.values())]
        pools += list(self._clients.values())
        pools += [r.clients for r in list(self._redis.values())]
        for pool in pools:
            await pool.aclose()

    def __repr__(self) -> str:
        shown = [e.shown for e in list(self._engines.values())]
        urls = sorted({*shown, *(r.shown for r in list(self._redis.values()))})
        return f"Resources(engines={urls}, endpoints={sorted(map(repr, self._clients))})"


def _new_client(endpoint: Endpoint) -> AsyncOpenAI:
    from openai import AsyncOpenAI

    return AsyncOpenAI(
        base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=endpoint.max_retries
    )


#: The process's resources.
PROCESS = Resources()


def engine(url: str, **options: Any) -> AsyncEngine:
    """The process's engine for ``url`` (``dialect+driver://…``) and engine ``options``."""
    return PROCESS.engine(url, options)


def redis_client(url: str, **options: Any) -> LoopRedis:
    """The process's Redis client for ``url``: use it as a ``redis.asyncio.Redis``."""
    return PROCESS.redis(url, options)


def model_client(endpoint: Endpoint) -> Callable[[], AsyncOpenAI]:
    """``() -> AsyncOpenAI``: the process's client for ``endpoint`` on the running loop."""
    return PROCESS.model_client(endpoint).get


def stats() -> Stats:
    """Engines (one pool each) and model clients open in this process, across loops."""
    return PROCESS.stats()


async def dispose() -> None:
    """Close every shared engine, Redis client and model client; empty the process cache.

    Call it once at shutdown, never per request. Safe to call more than once; a stack
    built or used afterwards opens what it needs again.
    """
    await PROCESS.dispose()
    clear_cache()
