"""The audit trail: who erased, purged, rotated or redacted what, when — never the content.

    >>> import asyncio
    >>> from memstack.audit import AuditTrail
    >>> from memstack.backends import open_backend
    >>> from memstack.backends.whole_store import whole_store
    >>> from memstack.crypto import generate_key
    >>> trail = AuditTrail(whole_store(open_backend("sqlite://:memory:", "x")),
    ...                    key=generate_key(), actor="retention-job")
    >>> record = asyncio.run(trail.record("purge", scope="*", counts={"items": 3}))
    >>> [(r.action, r.actor, r.counts) for r in asyncio.run(trail.read())]
    [('purge', 'retention-job', {'items': 3})]

Records are appended to the store the sessions live in (``agent_sessions_audit`` on SQL,
``<prefix>::memstack:audit`` on Redis) and never updated or deleted by memstack. A
record holds the action, actor, time, counts, a *scope* and a *digest*. Session ids
and user ids are personal data, so the scope is a pseudonym — an HMAC under the audit
key, ``p:`` + 16 hex — that someone holding the key can recompute for a given id to
find its records; without an audit key the scope is not recorded (``-``). The digest
is an HMAC of the affected values (what a redaction replaced), so the key holder can
confirm "was this card ever redacted?" and nobody else learns anything. Forgetting a
user therefore leaves the fact of the erasure, and nothing of the user.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from memstack.backends.whole_store import WholeStore
from memstack.crypto.keys import parse_key
from memstack.errors import ConfigurationError

__all__ = ["ACTIONS", "AuditRecord", "AuditTrail", "default_actor"]

ACTIONS = ("redact", "purge", "rotate", "erase", "memory")
STORE_SCOPE = "*"
UNRECORDED = "-"


@dataclass(frozen=True)
class AuditRecord:
    """One audit entry as stored."""

    record_id: str
    at: float
    action: str
    actor: str
    scope: str
    counts: Mapping[str, int]
    digest: str | None


def default_actor() -> str:
    """``user@host`` of the process, for records written without an explicit actor."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


class AuditTrail:
    """Appends and reads audit records of one store."""

    def __init__(
        self,
        store: WholeStore,
        *,
        key: bytes | str | None = None,
        actor: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self._key = None if key is None else parse_key(key, field="audit_key")
        self.actor = actor or default_actor()
        if len(self.actor) > 255:
            raise ConfigurationError("actor must be at most 255 characters")
        self.clock = clock

    @property
    def keyed(self) -> bool:
        return self._key is not None

    def _mac(self, purpose: bytes, data: bytes) -> str | None:
        if self._key is None:
            return None
        return hmac.new(self._key, purpose + b"\x00" + data, hashlib.sha256).hexdigest()

    def pseudonym(self, scope: str) -> str:
        """What is recorded for a session or user id: ``p:`` + an HMAC, or ``-`` without key."""
        if scope == STORE_SCOPE:
            return scope
        mac = self._mac(b"scope", scope.encode("utf-8"))
        return UNRECORDED if mac is None else f"p:{mac[:16]}"

    def digest(self, values: Iterable[str]) -> str | None:
        """A keyed hash of ``values`` (order-independent); None without key or values."""
        joined = "\x00".join(sorted(values)).encode("utf-8")
        return self._mac(b"content", joined) if joined else None

    async def record(
        self,
        action: str,
        *,
        scope: str,
        counts: Mapping[str, int],
        content: Iterable[str] = (),
    ) -> AuditRecord:
        """Append one record; ``scope`` is pseudonymised and ``content`` only digested."""
        if action not in ACTIONS:
            raise ConfigurationError(f"audit action must be one of {', '.join(ACTIONS)}")
        record = AuditRecord(
            record_id=uuid.uuid4().hex,
            at=self.clock(),
            action=action,
            actor=self.actor,
            scope=self.pseudonym(scope),
            counts={name: int(n) for name, n in counts.items()},
            digest=self.digest(content),
        )
        await self.store.audit_append(asdict(record))
        return record

    async def read(self, limit: int = 100, *, scope: str | None = None) -> list[AuditRecord]:
        """The last ``limit`` records, oldest first; only ``scope``'s with ``scope=``."""
        if scope is not None and not self.keyed:
            raise ConfigurationError(
                "records are found by session or user only with the audit key "
                "(without it, scopes were not recorded)"
            )
        rows = await self.store.audit_read(limit if scope is None else max(limit, 10_000))
        records = [_record(row) for row in rows]
        if scope is not None:
            wanted = self.pseudonym(scope)
            records = [r for r in records if r.scope == wanted][-limit:]
        return records


def _record(row: Mapping[str, Any]) -> AuditRecord:
    return AuditRecord(
        record_id=str(row["record_id"]),
        at=float(row["at"]),
        action=str(row["action"]),
        actor=str(row["actor"]),
        scope=str(row["scope"]),
        counts=dict(row.get("counts") or {}),
        digest=row.get("digest"),
    )
