"""One value per running event loop: what a driver binds to the loop that made it.

    >>> import asyncio
    >>> from memstack.loops import PerLoop
    >>> async def closed(value: object) -> None: ...
    >>> per_loop = PerLoop(object, closed)
    >>> async def twice() -> bool:
    ...     return per_loop.get() is per_loop.get()
    >>> asyncio.run(twice()), len(per_loop)
    (True, 1)

asyncpg, aiomysql, aiosqlite and httpx connections can be used, and closed, only on the
loop that opened them, while a stack may be used from several threads each running its
own loop (``Runner.run_sync`` in workers, ``asyncio.run`` per job). So a shared pool or
client is really one per loop: made there on first use, forgotten when the loop is
collected (a thread ended, ``asyncio.run`` returned), closed each on its own loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["PerLoop"]

T = TypeVar("T")
# How long aclose() waits for another thread's loop to close what it opened.
_OTHER_LOOP_TIMEOUT = 10.0


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class PerLoop(Generic[T]):
    """One ``T`` per running event loop, made there on first use, forgotten with its loop.

    Outside any loop (building a stack in synchronous code) there is one more, made for
    no loop: it serves what needs no connection (a dialect, a URL).
    """

    def __init__(self, make: Callable[[], T], close: Callable[[T], Awaitable[None]]) -> None:
        self._make = make
        self._close = close
        # id(loop) (0 for none) -> (a weak reference to that loop, its T)
        self._by_loop: dict[int, tuple[weakref.ref[asyncio.AbstractEventLoop] | None, T]] = {}
        self._lock = threading.Lock()

    def get(self) -> T:
        """The ``T`` of the running loop."""
        loop = _running_loop()
        slot = id(loop) if loop is not None else 0
        found = self._by_loop.get(slot)  # one dict lookup: no lock on the hot path
        if found is not None and (found[0] is None or found[0]() is loop):
            return found[1]
        with self._lock:
            found = self._by_loop.get(slot)
            if found is not None and (found[0] is None or found[0]() is loop):
                return found[1]
            self._sweep()
            value = self._make()
            ref = weakref.ref(loop) if loop is not None else None
            self._by_loop[slot] = (ref, value)
            if loop is not None:
                # A loop gone (its thread ended, asyncio.run returned) takes its T along:
                # its connections cannot be used, or closed, from any other loop.
                weakref.finalize(loop, self._forget, slot, ref)
            return value

    def values(self) -> list[T]:
        with self._lock:
            self._sweep()
            return [value for _, value in self._by_loop.values()]

    def __len__(self) -> int:
        return len(self.values())

    def _sweep(self) -> None:
        """Forget the values of closed loops: nothing can run on them any more.

        Needed beside the finalizer: a value often refers to its loop (a connection
        does), so while we hold the value the loop is never collected. Dropped, its
        sockets close as it is collected.
        """
        for slot, (ref, _) in list(self._by_loop.items()):
            loop = ref() if ref is not None else None
            if ref is not None and (loop is None or loop.is_closed()):
                del self._by_loop[slot]

    def _forget(self, slot: int, ref: object) -> None:
        with self._lock:
            found = self._by_loop.get(slot)
            if found is not None and found[0] is ref:
                del self._by_loop[slot]

    async def aclose(self) -> None:
        """Close each ``T`` on its own loop; forget those whose loop no longer runs."""
        with self._lock:
            entries = list(self._by_loop.values())
            self._by_loop.clear()
        here = _running_loop()
        waits: list[Awaitable[None]] = []
        for ref, value in entries:
            loop = ref() if ref is not None else None
            if loop is here and loop is not None:
                waits.append(self._close(value))
            elif loop is not None and loop.is_running():
                future = asyncio.run_coroutine_threadsafe(_awaited(self._close(value)), loop)
                waits.append(_waited(future))
            # No loop, or one stopped: nothing was opened there that could still be closed.
        for wait in waits:
            await wait


async def _awaited(awaitable: Awaitable[None]) -> None:
    await awaitable


async def _waited(future: concurrent.futures.Future[None]) -> None:
    try:
        await asyncio.wait_for(asyncio.wrap_future(future), _OTHER_LOOP_TIMEOUT)
    except TimeoutError:
        future.cancel()
