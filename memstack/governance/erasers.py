"""Erasers: each removes one kind of a user's data and says how much it removed.

    >>> import asyncio
    >>> from memstack.governance.erasers import ErasureRequest, LongTermMemoryEraser
    >>> from memstack.governance.users import UserSessions
    >>> async def forget(scope):  # stands for MemoryStore.erase
    ...     return 3 if scope == "ann" else 0  # a user's memories live under their id
    >>> eraser = LongTermMemoryEraser(forget)
    >>> asyncio.run(eraser.erase(ErasureRequest("ann", UserSessions(), None)))
    {'memories': 3}

``forget_user`` runs a list of erasers in order: the vault, then the sessions, then
whatever else holds user data. Each is idempotent, so a run that failed half-way is
finished by running it again. The long-term memory eraser adapts any
``async forget(scope)``; ``memory_eraser`` is the hook where a recipe's ``[memory]``
store plugs in (see its docstring).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sized
from dataclasses import dataclass
from typing import Any, Protocol

from memstack.backends.whole_store import WholeStore
from memstack.governance.users import UserSessions

__all__ = [
    "Eraser",
    "ErasureRequest",
    "LongTermMemoryEraser",
    "SessionEraser",
    "VaultEraser",
    "memory_eraser",
]


@dataclass(frozen=True)
class ErasureRequest:
    """Whose data to erase, how to recognise their sessions, and the store."""

    user: str
    sessions: UserSessions
    store: WholeStore | None

    def owned(self, session_ids: Any) -> list[str]:
        return sorted(sid for sid in session_ids if self.sessions.owns(self.user, sid))


class Eraser(Protocol):
    """Removes one kind of a user's data; returns counts by what was removed."""

    name: str

    async def erase(self, request: ErasureRequest) -> Mapping[str, int]: ...


class SessionEraser:
    """Every session of the user: their rows in the store, in one transaction."""

    name = "sessions"

    async def erase(self, request: ErasureRequest) -> Mapping[str, int]:
        assert request.store is not None
        ids = request.owned(info.session_id for info in await request.store.list_sessions())
        items = await request.store.delete_sessions(ids)
        return {"sessions": len(ids), "items": items}


class VaultEraser:
    """The sealed originals of the user's sessions, including sessions already gone."""

    name = "vault"

    async def erase(self, request: ErasureRequest) -> Mapping[str, int]:
        assert request.store is not None
        ids = request.owned(await request.store.vault_sessions())
        return {"vault_entries": await request.store.vault_delete(ids)}


class LongTermMemoryEraser:
    """Adapts a long-term memory store's ``async forget(scope)`` to an eraser."""

    name = "memory"

    def __init__(
        self, forget: Callable[[str], Awaitable[object]], *, scope: str = "{user}"
    ) -> None:
        self.forget = forget
        self.scope = scope

    async def erase(self, request: ErasureRequest) -> Mapping[str, int]:
        result = await self.forget(self.scope.format(user=request.user))
        if isinstance(result, bool) or result is None:
            count = int(bool(result))
        elif isinstance(result, int):
            count = result
        elif isinstance(result, Sized):
            count = len(result)
        else:
            count = 0
        return {"memories": count}


def memory_eraser(recipe: Any) -> Eraser | None:
    """The eraser of a recipe's ``[memory]`` store, or None when it has none.

    A user's long-term memories live under the scope named by their user id (the scope
    the ``memory`` layer and ``memory_tools`` are given); ``MemoryStore.erase`` deletes
    them with their audit events. The store is opened for the erasure, without its key
    (a whole scope is found by plain columns, so the job needs no secret), and closed after.
    """
    if not getattr(recipe, "memory", None):
        return None

    async def erase(scope: str) -> int:
        store = recipe.open_memory(keys=False)
        try:
            return int(await store.erase(scope))
        finally:
            await store.close()

    return LongTermMemoryEraser(erase, scope="{user}")
