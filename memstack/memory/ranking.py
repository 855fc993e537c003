"""Ranking: BM25 relevance fused with precedence, then packed into a token budget.

    >>> from memstack.memory.models import Memory
    >>> from memstack.memory.ranking import precedence, precedence_order
    >>> said = Memory(id="a", scope="u", text="Vegan", source="explicit", created_at=1.0)
    >>> guessed = Memory(id="b", scope="u", text="Likes steak", source="inferred", created_at=2.0)
    >>> precedence(said, now=10.0) > precedence(guessed, now=10.0)
    True
    >>> [m.id for m in precedence_order([guessed, said])]
    ['a', 'b']

Precedence rules, from the issue: explicit user statement > feedback > observed > inferred;
verified > unverified; recent > old. They multiply relevance (so an irrelevant explicit
memory never beats a relevant inference by much) and fix the order of the injected block.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from memstack.memory.models import Memory

__all__ = [
    "BM25",
    "HEADER",
    "CachedCount",
    "Packed",
    "Ranked",
    "longest_injectable",
    "pack",
    "precedence",
    "precedence_order",
    "render",
    "render_line",
    "telling",
]

HEADER = "What you know about this user from earlier conversations (long-term memory):"
SOURCE_RANK: Mapping[str, int] = {"explicit": 0, "feedback": 1, "observed": 2, "inferred": 3}
_SOURCE_WEIGHT: Mapping[str, float] = {
    "explicit": 1.0,
    "feedback": 0.95,
    "observed": 0.9,
    "inferred": 0.75,
}
_HALF_LIFE_DAYS = 180.0
_DAY = 86_400.0
_TOKEN_CACHE = 50_000
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True, slots=True)
class BM25:
    """Okapi BM25 parameters; ``idf`` uses the non-negative Lucene form."""

    k1: float = 1.2
    b: float = 0.75

    @staticmethod
    def idf(df: int, n_docs: int) -> float:
        return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))


class Ranked(Protocol):
    """What precedence reads: a ``Memory``, or its row (recall ranks rows, then decodes)."""

    @property
    def source(self) -> str: ...
    @property
    def confidence(self) -> float: ...
    @property
    def last_verified_at(self) -> float | None: ...
    @property
    def needs_review(self) -> bool: ...
    @property
    def updated_at(self) -> float: ...


def precedence(memory: Ranked, *, now: float) -> float:
    """A multiplier in (0, 1]: source, confidence, verification and age."""
    weight = _SOURCE_WEIGHT.get(memory.source, 0.75) * (0.75 + 0.25 * memory.confidence)
    if memory.last_verified_at is None:
        weight *= 0.95
    if memory.needs_review:
        weight *= 0.8
    age_days = max(0.0, now - memory.updated_at) / _DAY
    decay: float = 0.5 ** (age_days / _HALF_LIFE_DAYS)
    return weight * (0.9 + 0.1 * decay)


def telling(text: str, *, question_weight: float) -> float:
    """A multiplier in [question_weight, 1]: the share of ``text``'s sentences that tell.

    A sentence ending in "?" counts ``question_weight``. On LoCoMo a tenth of the turns
    are mostly questions but under 3% of the turns that hold an answer are.
    """
    if question_weight >= 1.0 or "?" not in text:
        return 1.0
    sentences = [s for s in _SENTENCE_END.split(text.strip()) if s]
    if not sentences:
        return 1.0
    asked: float = sum(s.rstrip().endswith("?") for s in sentences) / len(sentences)
    return 1.0 - (1.0 - question_weight) * asked


def precedence_order(memories: Iterable[Memory]) -> list[Memory]:
    """Deterministic block order: by source, verified first, newest first, then id."""
    return sorted(
        memories,
        key=lambda m: (
            SOURCE_RANK.get(m.source, 9),
            m.last_verified_at is None,
            -(m.valid_from if m.valid_from is not None else m.updated_at),
            m.id,
        ),
    )


def _date(seconds: float) -> str:
    day = datetime.fromtimestamp(seconds, UTC)
    return f"{day.day} {day:%b %Y}"


def render_line(memory: Memory) -> str:
    """One compact line: the text, then only the qualifiers that change its meaning."""
    notes = []
    if memory.source == "inferred":
        notes.append("inferred")
    if memory.needs_review:
        notes.append("not re-verified")
    suffix = f" ({', '.join(notes)})" if notes else ""
    return f"- {memory.text}{suffix}"


def date_line(memory: Memory) -> str | None:
    """The heading of a run of memories valid from one day; dated once, not per line."""
    return f"{_date(memory.valid_from)}:" if memory.valid_from is not None else None


def render(memories: Sequence[Memory], header: str = HEADER) -> str:
    """The block: header, then memories in the given order, grouped under their dates."""
    lines = [header] if header else []
    current: str | None = None
    for memory in memories:
        heading = date_line(memory)
        if heading is not None and heading != current:
            lines.append(heading)
        current = heading
        lines.append(render_line(memory))
    return "\n".join(lines)


class CachedCount:
    """A token counter that counts each text once (default: ``memstack.tokens``)."""

    def __init__(self, count: Callable[[str], int] | None = None) -> None:
        self.count = count
        self._cache: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        # Memories are recalled again and again; counting each text once pays off.
        cached = self._cache.get(text)
        if cached is None:
            if self.count is None:
                from memstack.tokens import TokenCounter  # tiktoken loads only when needed

                self.count = TokenCounter().count_text
            if len(self._cache) >= _TOKEN_CACHE:
                self._cache.clear()
            cached = self._cache[text] = self.count(text)
        return cached


# What a block adds around one memory's text besides its header, in tokens, at most: the
# line's "- " and qualifiers ("(inferred, not re-verified)"), a day's heading, the newlines.
LINE_OVERHEAD = 20


def longest_injectable(max_tokens: int, header: str, count: Callable[[str], int]) -> int:
    """The most tokens a memory's text may have for a block of ``max_tokens`` under
    ``header`` to hold it (``pack`` never splits a memory)."""
    used = count(header) + 1 if header else 0
    return max(1, max_tokens - used - LINE_OVERHEAD)


@dataclass(frozen=True, slots=True)
class Packed:
    memories: tuple[Memory, ...]
    text: str
    tokens: int


def pack(
    ranked: Sequence[Memory],
    *,
    max_tokens: int,
    count: Callable[[str], int],
    header: str = HEADER,
) -> Packed:
    """The best-ranked memories whose rendered block fits ``max_tokens``, in block order.

    Greedy by rank, skipping a memory that does not fit and trying smaller ones after it:
    a long memory never hides several short relevant ones. A day's heading is paid for
    by the first memory of that day.
    """
    used = count(header) + 1 if header else 0
    chosen: list[Memory] = []
    seen_texts: set[str] = set()
    dated: set[str] = set()
    for memory in ranked:
        if memory.text.casefold() in seen_texts:
            continue
        heading = date_line(memory)
        cost = count(render_line(memory)) + 1
        if heading is not None and heading not in dated:
            cost += count(heading) + 1
        if used + cost > max_tokens:
            if max_tokens - used < 8:  # no memory line is that short: the block is full
                break
            continue
        chosen.append(memory)
        seen_texts.add(memory.text.casefold())
        if heading is not None:
            dated.add(heading)
        used += cost
    if not chosen:
        return Packed((), "", 0)
    ordered = precedence_order(chosen)
    text = render(ordered, header)
    tokens = count(text)
    while tokens > max_tokens and len(ordered) > 1:  # joins may tokenise differently
        worst = chosen.pop()
        ordered.remove(worst)
        text = render(ordered, header)
        tokens = count(text)
    return Packed(tuple(ordered), text, tokens)
