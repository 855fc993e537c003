"""The process's Redis clients: one per URL and client options, per running event loop.

    >>> from memstack.backends.redis_clients import LoopRedis
    >>> LoopRedis("redis://:secret@cache:6379/0", {})
    LoopRedis('redis://:***@cache:6379/0')

``memstack.resources`` keeps one ``LoopRedis`` per URL and client options, and
``open_backend("redis://…")`` hands it to the SDK's ``RedisSession`` as its client, so a
stack built per request opens no connection of its own (each ``RedisSession.from_url``
made a client and a pool, and a TCP connection per request: 2–3× the cost of a turn).
redis-py's asyncio connections belong to the loop that opened them, so the client is
really one per running loop (``memstack.loops``), closed with its loop or by
``memstack.dispose()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memstack.backends.translate import without_password
from memstack.loops import PerLoop

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["LoopRedis"]


class LoopRedis:
    """A ``redis.asyncio.Redis`` that is a separate client, with its own pool, on each loop.

    Commands, ``pipeline()`` and ``scan_iter()`` go to the running loop's client: the
    forwarding is the whole point of this object (it stands in for one client).
    """

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        self._url = url
        self._options = dict(options)
        self.shown = without_password(url)
        self.clients: PerLoop[Redis] = PerLoop(self._new_client, _close_client)

    def _new_client(self) -> Redis:
        import redis.asyncio as redis

        return redis.from_url(self._url, **self._options)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_url", "_options", "shown", "clients"):
            raise AttributeError(name)  # not set yet (copying, unpickling): no recursion
        return getattr(self.clients.get(), name)

    async def aclose(self) -> None:
        """Close every loop's client (what ``memstack.dispose()`` does); shared: not per stack."""
        await self.clients.aclose()

    def __repr__(self) -> str:
        return f"LoopRedis({self.shown!r})"


async def _close_client(client: Redis) -> None:
    await client.aclose()
