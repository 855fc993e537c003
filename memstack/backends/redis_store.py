"""Capabilities for the SDK's RedisSession (one Redis list per session).

Every rewrite is a WATCH/MULTI/EXEC transaction on the session's list: it applies
whole, or is retried when another client changed the list meanwhile.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from agents.extensions.memory import RedisSession
from redis.exceptions import WatchError

from memstack.backends.capabilities import (
    Item,
    Predicate,
    StorageCapabilities,
    check_replacement,
)
from memstack.backends.translate import store_errors
from memstack.errors import CapabilityError

T = TypeVar("T")


def _decode(raw: bytes | str) -> Item | None:
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


class RedisCapabilities(StorageCapabilities):
    """Adapter for ``agents.extensions.memory.RedisSession``."""

    session: RedisSession

    async def _transaction(self, body: Callable[[Any], Awaitable[T]]) -> T:
        """Run ``body(pipe)`` under WATCH on the list, retrying on conflict."""
        store = self.session
        key = store._messages_key
        with store_errors(store):
            async with store._lock, store._redis.pipeline(transaction=True) as pipe:
                while True:
                    try:
                        await pipe.watch(key)
                        return await body(pipe)
                    except WatchError:
                        continue

    async def count(self) -> int:
        with store_errors(self.session):
            return int(await self.session._redis.llen(self.session._messages_key))

    async def delete_oldest(self, n: int) -> int:
        key = self.session._messages_key

        async def body(pipe: Any) -> int:
            doomed = min(max(n, 0), int(await pipe.llen(key)))
            pipe.multi()
            pipe.ltrim(key, doomed, -1)
            await pipe.execute()
            return doomed

        return await self._transaction(body)

    async def replace_oldest(
        self, n: int, items: Sequence[Item], *, expect: Sequence[Item] | None = None
    ) -> bool:
        check_replacement(n, items)
        key = self.session._messages_key
        payloads = [json.dumps(item, separators=(",", ":")) for item in items]

        async def body(pipe: Any) -> bool:
            if n == 0:
                return True
            current = await pipe.lrange(key, 0, n - 1)
            if len(current) < n or (
                expect is not None and [_decode(raw) for raw in current] != list(expect)
            ):
                await pipe.unwatch()
                return False
            pipe.multi()
            pipe.ltrim(key, n, -1)
            if payloads:
                pipe.lpush(key, *reversed(payloads))
            await pipe.execute()
            return True

        return await self._transaction(body)

    async def delete_where(
        self, predicate: Predicate, *, batch_size: int = 500, prefix_only: bool = False
    ) -> int:
        key = self.session._messages_key
        tombstone = f"__memstack_deleted_{uuid.uuid4().hex}__"
        total, offset = 0, 0
        while True:

            async def body(pipe: Any, start: int = offset) -> tuple[int, bool]:
                raw = await pipe.lrange(key, start, start + batch_size - 1)
                doomed: list[int] = []
                stop = len(raw) < batch_size
                for index, value in enumerate(raw):
                    item = _decode(value)
                    if item is not None and predicate(item):
                        doomed.append(start + index)
                    elif prefix_only:
                        stop = True
                        break
                if not doomed:
                    await pipe.unwatch()
                    return 0, stop
                pipe.multi()
                for index in doomed:
                    pipe.lset(key, index, tombstone)
                pipe.lrem(key, 0, tombstone)
                await pipe.execute()
                return len(doomed), stop

            deleted, stop = await self._transaction(body)
            total += deleted
            offset += batch_size - deleted
            if stop:
                return total

    async def delete_written_before(self, older_than: float, *, batch_size: int = 500) -> int:
        raise CapabilityError(
            "RedisSession keeps no per-item write time (one list per session); expire "
            "whole idle sessions with RedisSession(ttl=…), or stamp items with a TTL "
            "layer below any encryption"
        )


ADAPTERS: dict[type, type[StorageCapabilities]] = {RedisSession: RedisCapabilities}
