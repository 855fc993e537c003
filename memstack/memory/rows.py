"""One memory as one row: clear columns for what precedence reads, a sealed payload for the rest.

    >>> from memstack.memory.cipher import MemoryCipher
    >>> from memstack.memory.models import Memory
    >>> values = row_values(MemoryCipher(None), Memory(id="m1", scope="ana", text="Likes tea"))
    >>> values["payload"], values["kind"]
    ('{"text":"Likes tea"}', 'note')

Text, key name, structured data, provenance and context go in the payload, which the
cipher seals when the store has a key; the key is findable through its keyed digest.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Row

from memstack.memory.cipher import MemoryCipher
from memstack.memory.fulltext import weighted_terms
from memstack.memory.models import Memory, Provenance

__all__ = ["memory_from_row", "row_values"]


def memory_from_row(cipher: MemoryCipher, row: Row[Any]) -> Memory:
    """The memory a row of the memories table holds (its payload opened)."""
    payload = cipher.open(row.scope, row.payload)
    return Memory(
        id=row.id,
        scope=row.scope,
        text=payload["text"],
        kind=row.kind,
        source=row.source,
        key=payload.get("key"),
        data=payload.get("data"),
        confidence=row.confidence,
        created_at=row.created_at,
        updated_at=row.updated_at,
        valid_from=row.valid_from,
        superseded_at=row.superseded_at,
        superseded_by=row.superseded_by,
        last_verified_at=row.last_verified_at,
        expires_at=row.expires_at,
        needs_review=bool(row.needs_review),
        provenance=Provenance(**payload.get("provenance", {})),
        context=payload.get("context"),
    )


def row_values(cipher: MemoryCipher, memory: Memory) -> dict[str, Any]:
    """The memories-table row of ``memory``, payload sealed under the active key."""
    kid = cipher.active_kid
    payload: dict[str, Any] = {"text": memory.text}
    if memory.key is not None:
        payload["key"] = memory.key
    if memory.data is not None:
        payload["data"] = dict(memory.data)
    if provenance := memory.provenance.as_dict():
        payload["provenance"] = provenance
    if memory.context:
        payload["context"] = memory.context
    return {
        "id": memory.id,
        "scope": memory.scope,
        "key_digest": (
            cipher.key_digest(kid, memory.scope, memory.key) if memory.key is not None else None
        ),
        "kind": memory.kind,
        "source": memory.source,
        "confidence": memory.confidence,
        "created_at": memory.created_at,
        "updated_at": memory.updated_at,
        "valid_from": memory.valid_from,
        "superseded_at": memory.superseded_at,
        "superseded_by": memory.superseded_by,
        "last_verified_at": memory.last_verified_at,
        "expires_at": memory.expires_at,
        "needs_review": memory.needs_review,
        "length": sum(weighted_terms(memory).values()),
        "kid": kid,
        "payload": cipher.seal(memory.scope, payload),
    }
