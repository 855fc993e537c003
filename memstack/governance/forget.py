"""Forget a user: run the erasers over a store, audit the fact, report the counts.

    >>> import asyncio
    >>> from memstack.backends import open_backend
    >>> from memstack.backends.whole_store import whole_store
    >>> from memstack.governance.forget import forget
    >>> ann = open_backend("sqlite://:memory:", "ann:t1")
    >>> asyncio.run(ann.add_items([{"role": "user", "content": "hi"}]))
    >>> report = asyncio.run(forget(whole_store(ann), "ann"))
    >>> report.removed
    {'user_keys': 0, 'vault_entries': 0, 'sessions': 1, 'items': 1}

Nothing found anywhere raises ``UnknownUserError`` (``missing_ok=True`` returns the
empty report instead), so a typo in a user id does not pass for a completed erasure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from memstack.audit import AuditRecord, AuditTrail
from memstack.backends.whole_store import WholeStore
from memstack.errors import UnknownUserError
from memstack.governance.erasers import Eraser, ErasureRequest, SessionEraser, VaultEraser
from memstack.governance.users import UserSessions

__all__ = ["ForgetReport", "default_erasers", "forget"]


# What one of each removed kind is called ("1 memory", not "1 memories").
_SINGULAR = {
    "memories": "memory",
    "sessions": "session",
    "items": "item",
    "vault_entries": "vault_entry",
    "user_keys": "user_key",
}


@dataclass(frozen=True)
class ForgetReport:
    """What forgetting one user removed, by kind, and the audit record of it."""

    user: str
    removed: dict[str, int] = field(default_factory=dict)
    audit: AuditRecord | None = None

    @property
    def total(self) -> int:
        return sum(n for kind, n in self.removed.items() if kind != "sessions")

    def __str__(self) -> str:
        counts = ", ".join(
            f"{n} {_SINGULAR.get(kind, kind) if n == 1 else kind}".replace("_", " ")
            for kind, n in self.removed.items()
            if n
        )
        return f"forgot user {self.user!r}: removed {counts or 'nothing'}"


def default_erasers() -> list[Eraser]:
    """The user's key first (crypto-shredding), the vault (found by session id), sessions."""
    from memstack.governance.shred import UserKeyEraser

    return [UserKeyEraser(), VaultEraser(), SessionEraser()]


async def forget(
    store: WholeStore,
    user: str,
    *,
    sessions: UserSessions | None = None,
    erasers: Sequence[Eraser] | None = None,
    audit: AuditTrail | None = None,
    missing_ok: bool = False,
) -> ForgetReport:
    """Erase ``user`` from ``store`` with ``erasers`` (default: vault, sessions)."""
    sessions = sessions or UserSessions()
    request = ErasureRequest(sessions.check_user(user), sessions, store)
    removed: dict[str, int] = {}
    for eraser in erasers if erasers is not None else default_erasers():
        for kind, count in (await eraser.erase(request)).items():
            removed[kind] = removed.get(kind, 0) + int(count)
    if not any(removed.values()):
        if missing_ok:
            return ForgetReport(user, removed)
        raise UnknownUserError(
            f"user {user!r} has no session ({sessions.pattern}), vault entry or memory in "
            f"{store.where}; nothing removed"
        )
    record = None
    if audit is not None:
        record = await audit.record("erase", scope=f"user:{user}", counts=removed)
    return ForgetReport(user, removed, record)
