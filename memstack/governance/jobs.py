"""Whole-store jobs over a recipe's store: list, purge, rotate, forget, read the audit trail.

    >>> import asyncio
    >>> from memstack.governance import StoreJobs
    >>> recipe = {"backend": {"url": "sqlite://:memory:"}, "layers": [{"layer": "redact"}]}
    >>> async def demo():
    ...     async with StoreJobs(recipe) as jobs:
    ...         return [info.session_id for info in await jobs.sessions()]
    >>> asyncio.run(demo())
    []

A job opens one handle on the store for store-wide work and, where a layer must act
(``purge_expired`` of TTL, ``rotate`` of encryption), the recipe's stack for each
session in turn, sharing one SQLAlchemy engine. Each job appends one audit record.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.memory import Session

from memstack.audit import STORE_SCOPE, AuditRecord, AuditTrail
from memstack.backends.open import open_backend
from memstack.backends.whole_store import SessionInfo, WholeStore, whole_store
from memstack.base import SessionLayer, find, iter_chain
from memstack.errors import ConfigurationError, RecipeError
from memstack.governance.erasers import Eraser, memory_eraser
from memstack.governance.forget import ForgetReport, default_erasers, forget
from memstack.governance.users import UserSessions
from memstack.layers.encrypted import EncryptedSession
from memstack.layers.redact import RedactSession
from memstack.recipes import Recipe, load_recipe

__all__ = ["JobReport", "StoreJobs", "forget_user"]

# The id of the handle a job opens for store-wide work; it never writes a row.
ADMIN_SESSION = "memstack-admin"


@dataclass(frozen=True)
class JobReport:
    """What a whole-store job did: per-session counts, totals, and its audit record."""

    action: str
    per_session: dict[str, int]
    extra: dict[str, int]
    audit: AuditRecord | None

    @property
    def total(self) -> int:
        return sum(self.per_session.values())


def _layer_method(stack: Session, name: str) -> Callable[[], Awaitable[int]]:
    for session in iter_chain(stack):
        method = getattr(session, name, None)
        if isinstance(session, SessionLayer) and callable(method):
            return method  # type: ignore[no-any-return]
    raise ConfigurationError(f"no layer in this recipe has {name}()")


async def _close(session: Session) -> None:
    close = getattr(session, "close", None)
    if callable(close):
        result = close()
        if hasattr(result, "__await__"):
            await result


class StoreJobs:
    """Store-wide jobs for one recipe; use as ``async with StoreJobs(recipe) as jobs``."""

    def __init__(
        self,
        recipe: Recipe | str | Path | Mapping[str, Any],
        *,
        actor: str | None = None,
        erasers: list[Eraser] | None = None,
    ) -> None:
        self.recipe = recipe if isinstance(recipe, Recipe) else load_recipe(recipe)
        options = self.recipe.governance_options()
        try:
            self.users = UserSessions(options.get("user_sessions", "{user}:{thread}"))
        except ConfigurationError as exc:
            raise RecipeError(f"{self.recipe.source}: [governance]: {exc}") from exc
        self.audit_key = options.get("audit_key")
        self.actor = actor or options.get("actor")
        if erasers is None:
            erasers = default_erasers()
            hooked = memory_eraser(self.recipe)
            if hooked is not None:
                erasers.append(hooked)
        self.erasers = erasers
        self._admin: Session | None = None
        self._store: WholeStore | None = None
        self._trail: AuditTrail | None = None

    async def __aenter__(self) -> StoreJobs:
        self._admin = self.recipe.open_store(ADMIN_SESSION)
        self._store = whole_store(self._admin)
        try:
            self._trail = AuditTrail(self._store, key=self.audit_key, actor=self.actor)
        except ConfigurationError as exc:
            await self.aclose()
            raise RecipeError(f"{self.recipe.source}: [governance]: {exc}") from exc
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._admin is not None:
            await _close(self._admin)
            engine = getattr(self._admin, "engine", None)
            if engine is not None:
                await engine.dispose()
            self._admin = None

    @property
    def store(self) -> WholeStore:
        if self._store is None:
            raise RuntimeError("use StoreJobs inside 'async with'")
        return self._store

    @property
    def trail(self) -> AuditTrail:
        assert self._trail is not None, "use StoreJobs inside 'async with'"
        return self._trail

    # -- sessions ----------------------------------------------------------------------
    async def sessions(self, user: str | None = None) -> list[SessionInfo]:
        """The store's sessions, or only ``user``'s."""
        infos = await self.store.list_sessions()
        if user is None:
            return infos
        return [info for info in infos if self.users.owns(user, info.session_id)]

    def open_store(self, session_id: str) -> Session:
        """The store for ``session_id``, on the job's SQLAlchemy engine when there is one."""
        engine = getattr(self._admin, "engine", None)
        if engine is None:
            return self.recipe.open_store(session_id)
        options = {k: v for k, v in self.recipe.backend_options.items() if k != "engine_kwargs"}
        return open_backend(self.recipe.url, session_id, **options, engine=engine)

    async def each_session(
        self, operation: Callable[[Session], Awaitable[int]], *, layers: bool = True
    ) -> dict[str, int]:
        """Run ``operation`` on each session's stack (or bare store); counts by session id."""
        counts: dict[str, int] = {}
        for info in await self.store.list_sessions():
            store = self.open_store(info.session_id)
            try:
                stack = self.recipe.stack_over(store) if layers else store
                counts[info.session_id] = int(await operation(stack))
            finally:
                await _close(store)
        return counts

    # -- jobs --------------------------------------------------------------------------
    async def purge_all(self, *, older_than: float | None = None) -> JobReport:
        """Every session's expired items (TTL layer), or rows older than ``older_than`` s.

        Vault entries of sessions left with no rows go too.
        """
        if older_than is None:
            counts = await self.each_session(lambda s: _layer_method(s, "purge_expired")())
        else:
            from memstack.layers.ttl import purge_written_before

            counts = await self.each_session(
                lambda s: purge_written_before(s, older_than=older_than), layers=False
            )
        alive = {info.session_id for info in await self.store.list_sessions() if info.items}
        orphans = [sid for sid in await self.store.vault_sessions() if sid not in alive]
        extra = {"vault_entries": await self.store.vault_delete(orphans)}
        record = await self.trail.record(
            "purge",
            scope=STORE_SCOPE,
            counts={"sessions": len(counts), "items": sum(counts.values()), **extra},
        )
        return JobReport("purge", counts, extra, record)

    async def rotate_all(self) -> JobReport:
        """Re-encrypt every session under the active key (encryption layer), and re-seal
        vault entries under the redaction layer's active key when it has a vault."""
        resealed: list[int] = []

        async def rotate(stack: Session) -> int:
            redact = find(stack, RedactSession)
            if redact is not None and redact.vaults:
                resealed.append(await redact.rotate_vault())
                if find(stack, EncryptedSession) is None:
                    return 0
            return await _layer_method(stack, "rotate")()

        counts = await self.each_session(rotate)
        extra = {"vault_entries": sum(resealed)}
        record = await self.trail.record(
            "rotate",
            scope=STORE_SCOPE,
            counts={"sessions": len(counts), "items": sum(counts.values()), **extra},
        )
        return JobReport("rotate", counts, extra, record)

    async def forget_user(self, user: str, *, missing_ok: bool = False) -> ForgetReport:
        """Erase ``user``'s sessions, vault entries (and memories, once hooked)."""
        return await forget(
            self.store,
            user,
            sessions=self.users,
            erasers=self.erasers,
            audit=self.trail,
            missing_ok=missing_ok,
        )

    async def audit(
        self, limit: int = 50, *, session: str | None = None, user: str | None = None
    ) -> list[AuditRecord]:
        """The last ``limit`` audit records, or those of one session or user (needs the key)."""
        scope = session if session is not None else None if user is None else f"user:{user}"
        return await self.trail.read(limit, scope=scope)


async def forget_user(
    recipe: Recipe | str | Path | Mapping[str, Any],
    user: str,
    *,
    actor: str | None = None,
    erasers: list[Eraser] | None = None,
    missing_ok: bool = False,
) -> ForgetReport:
    """Forget ``user`` in a recipe's store: every session, vault entry and memory."""
    async with StoreJobs(recipe, actor=actor, erasers=erasers) as jobs:
        return await jobs.forget_user(user, missing_ok=missing_ok)
