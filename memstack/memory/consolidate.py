"""Consolidation as a pure plan: merge duplicates, resolve keys, expire, flag stale procedures.

    >>> from memstack.memory.models import Memory
    >>> from memstack.memory.consolidate import ConsolidationPolicy, plan_consolidation
    >>> old = Memory(id="a", scope="u", text="Lives in Oslo", key="city", created_at=1.0)
    >>> new = Memory(id="b", scope="u", text="Lives in Rome", key="city", created_at=2.0)
    >>> [(c.action, c.memory_id, c.by) for c in plan_consolidation([old, new], now=3.0)]
    [('supersede', 'a', 'b')]

The plan never deletes: a merged or superseded memory keeps its row and points at the one
that replaced it (``superseded_by``), a low-value inference gets an expiry date, a stale
procedure a review flag. ``MemoryStore.consolidate`` applies a plan, or only shows it
(``dry_run=True``). Bad LLM merges are how other memory systems lost users' data, so the
rules here are deterministic and explainable.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memstack.errors import ConfigurationError
from memstack.memory.models import Memory
from memstack.memory.text import terms

__all__ = ["Change", "ConsolidationPolicy", "plan_consolidation"]

_DAY = 86_400.0
_EXPLICIT_FIRST = {"explicit": 0, "feedback": 1, "observed": 2, "inferred": 3}


@dataclass(frozen=True, slots=True)
class ConsolidationPolicy:
    """Thresholds of consolidation; days are calendar days of the store's clock."""

    inferred_ttl_days: float = 90.0
    min_inferred_confidence: float = 0.5
    review_procedures_after_days: float = 30.0

    def __post_init__(self) -> None:
        for name in ("inferred_ttl_days", "review_procedures_after_days"):
            if getattr(self, name) <= 0:
                raise ConfigurationError(f"{name} must be > 0", layer="ConsolidationPolicy")
        if not 0.0 <= self.min_inferred_confidence <= 1.0:
            raise ConfigurationError(
                "min_inferred_confidence must be in [0, 1]", layer="ConsolidationPolicy"
            )


@dataclass(frozen=True, slots=True)
class Change:
    """One planned change: ``merge``/``supersede`` (with ``by``), ``expire`` or ``flag``."""

    action: str
    memory_id: str
    reason: str
    by: str | None = None
    text: str = ""

    def describe(self) -> str:
        target = f" → {self.by}" if self.by else ""
        return f"{self.action:<9} {self.memory_id}{target}  {self.reason}: {self.text[:60]!r}"


def _best_first(memories: Iterable[Memory]) -> list[Memory]:
    """Explicit before inferred, verified before not, newest first."""
    return sorted(
        memories,
        key=lambda m: (
            _EXPLICIT_FIRST.get(m.source, 9),
            m.last_verified_at is None,
            -m.created_at,
            m.id,
        ),
    )


def _signature(memory: Memory) -> tuple[str, ...]:
    return (memory.kind, *sorted(set(terms(memory.text))))


def plan_consolidation(
    memories: Sequence[Memory], *, now: float, policy: ConsolidationPolicy = ConsolidationPolicy()
) -> list[Change]:
    """Changes that consolidate these live memories of one scope; empty when nothing to do."""
    changes: list[Change] = []
    gone: set[str] = set()

    def retire(memory: Memory, action: str, by: Memory, reason: str) -> None:
        gone.add(memory.id)
        changes.append(Change(action, memory.id, reason, by.id, memory.text))

    by_key: dict[str, list[Memory]] = defaultdict(list)
    for memory in memories:
        if memory.key is not None:
            by_key[memory.key].append(memory)
    for group in by_key.values():
        explicit = [m for m in group if m.source == "explicit"]
        winner = max(explicit or group, key=lambda m: (m.created_at, m.id))
        for memory in group:
            # Older ones give way; an inference newer than an explicit statement stays
            # beside it (inferred never supersedes explicit), ranked below it.
            if memory is not winner and memory.created_at <= winner.created_at:
                retire(memory, "supersede", winner, f"newer {winner.source} value for key")

    duplicates: dict[tuple[str, ...], list[Memory]] = defaultdict(list)
    for memory in memories:
        if memory.id not in gone:
            duplicates[_signature(memory)].append(memory)
    for group in duplicates.values():
        if len(group) > 1:
            keeper, *rest = _best_first(group)
            for memory in rest:
                retire(memory, "merge", keeper, "duplicate")

    for memory in memories:
        if memory.id in gone:
            continue
        last_seen = memory.last_verified_at or memory.updated_at
        age_days = (now - last_seen) / _DAY
        if (
            memory.source == "inferred"
            and memory.confidence < policy.min_inferred_confidence
            and age_days >= policy.inferred_ttl_days
            and memory.expires_at is None
        ):
            changes.append(Change("expire", memory.id, "low-value inference", None, memory.text))
        elif (
            memory.kind == "procedure"
            and not memory.needs_review
            and age_days >= policy.review_procedures_after_days
        ):
            changes.append(
                Change("flag", memory.id, "procedure not verified recently", None, memory.text)
            )
    return changes
