"""What the memory modules share: the database, its tables, the indexes, the cipher, the clock.

    >>> from memstack.memory import MemoryStore
    >>> parts = MemoryStore.from_url("sqlite://:memory:", clock=lambda: 7, embedder=None).parts
    >>> parts.now(), parts.semantic is None, parts.tables.memories.name
    (7.0, True, 'memstack_memories')

``MemoryStore`` builds one ``StoreParts`` and hands it to every function of ``writing``,
``reading``, ``forgetting`` and ``maintenance`` as their first argument, so those take
only what varies per call; a frozen value, not the store, keeps them from reaching into
the facade. Every transaction goes through ``transact`` and every read through
``connect``, which turn database failures into ``BackendError`` naming what was being
done; ``transact`` reruns a transaction the database rolled back (``retry``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memstack.backends.retry import DEFAULT_RETRY, Retry
from memstack.backends.translate import store_errors
from memstack.memory.cipher import MemoryCipher
from memstack.memory.events import log_event
from memstack.memory.fulltext import FullTextIndex
from memstack.memory.models import Memory
from memstack.memory.schema import Tables
from memstack.memory.semantic import SemanticIndex

__all__ = ["LAYER", "StoreParts"]

T = TypeVar("T")

# The layer named in errors: the modules work on behalf of the store.
LAYER = "MemoryStore"


@dataclass(frozen=True, slots=True)
class StoreParts:
    """The collaborators of a ``MemoryStore``, handed to its modules as one value."""

    engine: AsyncEngine
    tables: Tables
    cipher: MemoryCipher
    index: FullTextIndex
    semantic: SemanticIndex | None
    clock: Callable[[], float]
    retry: Retry = DEFAULT_RETRY

    def now(self) -> float:
        return float(self.clock())

    async def transact(self, doing: str, body: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """``body`` in one transaction; rerun whole, on a new transaction, when the database
        rolled it back (a deadlock); failures become ``BackendError`` naming ``doing``.

        So ``body`` may run more than once: it changes nothing outside the transaction
        (caches are dropped after it, counts are its return value).
        """

        async def attempt() -> T:
            async with self.engine.begin() as conn:
                return await body(conn)

        with store_errors(None, layer=LAYER, doing=doing):
            return await self.retry.call(attempt, store=doing)

    @asynccontextmanager
    async def connect(self, doing: str) -> AsyncIterator[AsyncConnection]:
        """A connection for reading; failures as in ``transact``.

        On PostgreSQL outside any transaction, as the session store reads there
        (``memstack.backends.sqlalchemy_store``): at READ COMMITTED each statement reads a
        snapshot of its own either way, and the driver then sends no BEGIN and ROLLBACK,
        two of a recall's seven round trips. (SQLite's driver begins none for reads.)
        """
        with store_errors(None, layer=LAYER, doing=doing):
            async with self.engine.connect() as conn:
                if conn.dialect.name == "postgresql":
                    await conn.execution_options(isolation_level="AUTOCOMMIT")
                yield conn

    async def log(
        self,
        conn: AsyncConnection,
        memories: Iterable[Memory] | Iterable[tuple[str, str]],
        action: str,
        *,
        actor: str,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Audit events for ``memories`` (see ``log_event``), stamped with the clock now."""
        at = self.now()
        await log_event(conn, self.tables, memories, action, actor=actor, at=at, detail=detail)
