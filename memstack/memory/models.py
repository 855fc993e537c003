"""What a memory is: the record, its kinds and sources, and the audit events about it.

    >>> from memstack.memory.models import Memory
    >>> m = Memory(id="m1", scope="user-42", text="Prefers metric units", kind="preference")
    >>> m.source, m.is_live(now=0.0)
    ('explicit', True)

Source, confidence and last-verified are first-class fields because precedence rules read
them: an explicit statement outranks an inference, a verified memory an unverified one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

from memstack.errors import ConfigurationError

__all__ = [
    "KINDS",
    "SOURCES",
    "Event",
    "Kind",
    "Memory",
    "Provenance",
    "Source",
    "check_choice",
    "check_confidence",
    "check_scope",
]

Kind = Literal["preference", "fact", "procedure", "note"]
Source = Literal["explicit", "inferred", "observed", "feedback"]
KINDS: tuple[str, ...] = get_args(Kind)
SOURCES: tuple[str, ...] = get_args(Source)


def check_choice(field_name: str, value: object, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ConfigurationError(
            f"{field_name} must be one of {', '.join(allowed)}, not {value!r}", layer="MemoryStore"
        )
    return value


def check_confidence(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ConfigurationError(
            f"confidence must be a number in [0, 1], not {value!r}", layer="MemoryStore"
        )
    return float(value)


def check_scope(scope: object) -> str:
    if not isinstance(scope, str) or not scope or len(scope) > 255:
        raise ConfigurationError(
            f"scope must be a non-empty string of at most 255 characters, not {scope!r}",
            layer="MemoryStore",
        )
    return scope


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a memory came from: a session and, optionally, the item in it."""

    session_id: str | None = None
    item: str | None = None

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in (("session_id", self.session_id), ("item", self.item)) if v}


@dataclass(frozen=True, slots=True)
class Memory:
    """One long-term memory; times are POSIX seconds."""

    id: str
    scope: str
    text: str
    kind: str = "note"
    source: str = "explicit"
    key: str | None = None
    data: Mapping[str, Any] | None = None
    confidence: float = 1.0
    created_at: float = 0.0
    updated_at: float = 0.0
    valid_from: float | None = None
    superseded_at: float | None = None
    superseded_by: str | None = None
    last_verified_at: float | None = None
    expires_at: float | None = None
    needs_review: bool = False
    provenance: Provenance = field(default_factory=Provenance)
    #: Searchable but never shown: the surrounding conversation of an observed turn.
    context: str | None = None

    def is_live(self, *, now: float) -> bool:
        """Not superseded and not expired: the only memories recall returns."""
        return self.superseded_at is None and (self.expires_at is None or self.expires_at > now)

    def evolve(self, **changes: Any) -> Memory:
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view, for tools, the CLI and export."""
        return {
            "id": self.id,
            "scope": self.scope,
            "key": self.key,
            "kind": self.kind,
            "source": self.source,
            "text": self.text,
            "data": dict(self.data) if self.data is not None else None,
            "confidence": self.confidence,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "valid_from": self.valid_from,
            "superseded_at": self.superseded_at,
            "superseded_by": self.superseded_by,
            "last_verified_at": self.last_verified_at,
            "expires_at": self.expires_at,
            "needs_review": self.needs_review,
            "provenance": self.provenance.as_dict(),
            "context": self.context,
        }


@dataclass(frozen=True, slots=True)
class Event:
    """One audit entry: what happened to a memory, who did it, when; never its text."""

    memory_id: str
    scope: str
    action: str
    actor: str
    at: float
    detail: Mapping[str, Any] = field(default_factory=dict)
