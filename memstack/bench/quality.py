"""A retention proxy: what the user told the agent and what tools returned, still in view.

    >>> from memstack.bench.quality import identifiers
    >>> sorted(identifiers("I'm sara_doe_496, booking HAT001 to JFK on 2024-05-01"))
    ['2024-05-01', 'HAT001', 'sara_doe_496']

Identifiers are the facts an agent must not forget: ids, codes, dates, paths, emails.
A fact counts as retained at a call when it appears anywhere in that call's input
(verbatim, or quoted in a summary); a tool result counts when its output is there
verbatim, or at least half of its identifiers are (as a summary keeps them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memstack.history import history_problems, is_output, is_user_message

__all__ = ["Retention", "identifiers"]

_IDENTIFIER = re.compile(
    r"[\w.+-]+@[\w-]+\.[\w.]+"  # emails
    r"|\b\d{4}-\d{2}-\d{2}\b"  # dates
    r"|(?:[\w.-]+/)+[\w.-]+"  # paths
    r"|\b(?=\w*\d)(?=\w*[A-Za-z_])\w{4,}\b"  # codes with letters and digits
    r"|\b[a-z]+(?:_[a-z0-9]+){2,}\b"  # snake_case names with several parts
)
_MAX_PER_OUTPUT = 8


def identifiers(text: str) -> set[str]:
    return set(_IDENTIFIER.findall(text))


def _text(item: dict[str, Any]) -> str:
    content = item.get("content", item.get("output", ""))
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


@dataclass
class Retention:
    """Accumulates, call by call, how much of what mattered the model could still see."""

    facts: set[str] = field(default_factory=set)
    outputs: list[tuple[str, set[str]]] = field(default_factory=list)
    fact_scores: list[float] = field(default_factory=list)
    output_scores: list[float] = field(default_factory=list)
    invalid_views: int = 0

    def observe(self, new_items: Iterable[dict[str, Any]]) -> None:
        """Items that just entered the conversation (user messages, tool outputs)."""
        for item in new_items:
            if is_user_message(item):
                self.facts |= identifiers(_text(item))
            elif is_output(item):
                text = _text(item)
                ids = sorted(identifiers(text), key=len, reverse=True)[:_MAX_PER_OUTPUT]
                self.outputs.append((text, set(ids)))

    def score(self, view: Sequence[dict[str, Any]]) -> None:
        """Score one model call's input."""
        if history_problems(view):
            self.invalid_views += 1
        visible = "\n".join(_text(item) for item in view)
        if self.facts:
            self.fact_scores.append(sum(f in visible for f in self.facts) / len(self.facts))
        if self.outputs:
            kept = 0
            for text, ids in self.outputs:
                if text in visible or (ids and sum(i in visible for i in ids) * 2 >= len(ids)):
                    kept += 1
            self.output_scores.append(kept / len(self.outputs))

    @staticmethod
    def mean(scores: Sequence[float]) -> float:
        return sum(scores) / len(scores) if scores else 1.0
