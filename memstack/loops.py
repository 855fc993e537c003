"""One value per running event loop: what a driver binds to the loop that made it.

    >>> import asyncio
    >>> from memstack.loops import PerLoop
    >>> closed = []
    >>> async def close(value: object) -> None:
    ...     closed.append(value)
    >>> per_loop = PerLoop(object, close)
    >>> async def twice() -> tuple[bool, int]:
    ...     return per_loop.get() is per_loop.get(), len(per_loop)
    >>> asyncio.run(twice()), len(per_loop), len(closed)
    ((True, 1), 0, 1)

asyncpg, aiomysql and httpx connections can be used, and closed, only on the loop that
opened them, while a stack may be used from several threads each running its own loop
(``Runner.run_sync`` in workers, ``asyncio.run`` per job). So a shared pool or client is
really one per loop: made there on first use, and closed there when the loop shuts down
(``asyncio.run`` and uvicorn finalise async generators before closing their loop; a
parked one of ours closes the value then). A loop closed without that step only has its
value forgotten, and the value's sockets close as it is collected.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable
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


class _Entry(Generic[T]):
    """One loop's value, the loop by weak reference, and the generator that closes it."""

    __slots__ = ("loop", "started", "value", "watch")

    def __init__(self, loop: asyncio.AbstractEventLoop | None, value: T) -> None:
        self.loop = weakref.ref(loop) if loop is not None else None
        self.value = value
        self.watch: AsyncGenerator[None, None] | None = None
        self.started: asyncio.Future[None] | None = None

    def serves(self, loop: asyncio.AbstractEventLoop | None) -> bool:
        return (self.loop() if self.loop is not None else None) is loop

    def dead(self) -> bool:
        if self.loop is None:
            return False
        loop = self.loop()
        return loop is None or loop.is_closed()


class PerLoop(Generic[T]):
    """One ``T`` per running event loop, made there on first use, closed as the loop ends.

    Outside any loop (building a stack in synchronous code) there is one more, made for
    no loop: it serves what needs no connection (a dialect, a URL).
    """

    def __init__(self, make: Callable[[], T], close: Callable[[T], Awaitable[None]]) -> None:
        self._make = make
        self._close = close
        self._by_loop: dict[int, _Entry[T]] = {}  # id(loop), 0 for none
        self._lock = threading.Lock()

    def get(self) -> T:
        """The ``T`` of the running loop."""
        loop = _running_loop()
        slot = id(loop) if loop is not None else 0
        found = self._by_loop.get(slot)  # one dict lookup: no lock on the hot path
        if found is not None and found.serves(loop):
            return found.value
        with self._lock:
            found = self._by_loop.get(slot)
            if found is not None and found.serves(loop):
                return found.value
            self._sweep()
            entry = self._by_loop[slot] = _Entry(loop, self._make())
        if loop is not None:
            entry.watch = self._watch(slot, entry)
            # Started here, in the loop's thread, so the loop registers it for shutdown.
            entry.started = asyncio.ensure_future(entry.watch.asend(None))
        return entry.value

    async def _watch(self, slot: int, entry: _Entry[T]) -> AsyncGenerator[None, None]:
        """Parked until the loop finalises its async generators; then closes the value."""
        try:
            yield
        finally:
            if self._take(slot, entry):
                await self._close(entry.value)

    def _take(self, slot: int, entry: _Entry[T]) -> bool:
        with self._lock:
            if self._by_loop.get(slot) is not entry:
                return False  # closed already (aclose), or another value took its place
            del self._by_loop[slot]
            return True

    def values(self) -> list[T]:
        with self._lock:
            self._sweep()
            return [entry.value for entry in self._by_loop.values()]

    def __len__(self) -> int:
        return len(self.values())

    def _sweep(self) -> None:
        """Forget the values of loops closed without finalising: nothing runs there now."""
        for slot, entry in list(self._by_loop.items()):
            if entry.dead():
                del self._by_loop[slot]

    async def aclose(self) -> None:
        """Close each ``T`` on its own loop; forget those whose loop no longer runs."""
        with self._lock:
            entries = list(self._by_loop.values())
            self._by_loop.clear()
        here = _running_loop()
        waits: list[Awaitable[None]] = []
        for entry in entries:
            loop = entry.loop() if entry.loop is not None else None
            if loop is not None and loop is here:
                waits.append(self._close(entry.value))
            elif loop is not None and loop.is_running():
                future = asyncio.run_coroutine_threadsafe(_awaited(self._close(entry.value)), loop)
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
