"""The store-wide adapter interface and its values; ``whole_store`` picks an adapter."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agents.memory import Session

__all__ = ["AuditRow", "SessionInfo", "WholeStore", "as_utc", "chunks"]

#: One audit record as stored: plain JSON-able values, never item content.
AuditRow = dict[str, Any]


@dataclass(frozen=True)
class SessionInfo:
    """One session of a store: its id, stored rows, and last write (UTC) when known."""

    session_id: str
    items: int
    last_activity: datetime | None


class WholeStore(ABC):
    """Store-wide operations; one adapter per backend."""

    def __init__(self, session: Session) -> None:
        self.session = session

    @abstractmethod
    async def list_sessions(self) -> list[SessionInfo]:
        """Every session with stored rows, ordered by id."""

    @abstractmethod
    async def delete_sessions(self, session_ids: Collection[str]) -> int:
        """Delete these sessions' rows in one transaction; return how many items went."""

    @abstractmethod
    async def vault_put(self, session_id: str, sealed: Mapping[str, str]) -> None:
        """Store sealed originals by token for one session, replacing those of the same token."""

    @abstractmethod
    async def vault_get(self, session_id: str, tokens: Collection[str]) -> dict[str, str]:
        """The sealed originals of ``tokens`` that exist."""

    @abstractmethod
    async def vault_all(self, session_id: str) -> dict[str, str]:
        """Every sealed original of one session, by token."""

    @abstractmethod
    async def vault_sessions(self) -> dict[str, int]:
        """Session ids that have vault entries, with how many."""

    @abstractmethod
    async def vault_delete(self, session_ids: Collection[str]) -> int:
        """Delete the vault entries of these sessions; return how many went."""

    @abstractmethod
    async def user_salt(self, user_ref: str, new_salt: str) -> str:
        """The salt stored for ``user_ref``, storing ``new_salt`` first if there is none."""

    @abstractmethod
    async def user_salt_delete(self, user_refs: Collection[str]) -> int:
        """Delete these users' salts (crypto-shredding); return how many went."""

    @abstractmethod
    async def audit_append(self, row: AuditRow) -> None:
        """Append one audit record."""

    @abstractmethod
    async def audit_read(self, limit: int) -> list[AuditRow]:
        """The last ``limit`` audit records, oldest first."""

    @property
    def where(self) -> str:
        """The store, for messages: its type and location, never a password."""
        from memstack.base import describe

        own = f"session_id={self.session.session_id!r}"
        return describe(self.session).replace(f"{own}, ", "").replace(own, "")


def as_utc(value: Any) -> datetime | None:
    """A store's timestamp (SQL text, a naive UTC datetime, epoch seconds) as aware UTC."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float) or (isinstance(value, str) and value.isdigit()):
        return datetime.fromtimestamp(float(value), tz=UTC)
    if isinstance(value, bytes):
        return as_utc(value.decode("ascii"))
    parsed = datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def chunks(values: Sequence[Any], size: int = 500) -> list[Sequence[Any]]:
    return [values[start : start + size] for start in range(0, len(values), size)]
