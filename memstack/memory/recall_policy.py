"""``RecallPolicy``: the knobs of recall ranking, as one frozen value a store is given.

    >>> from memstack.memory.recall_policy import RecallPolicy
    >>> policy = RecallPolicy(feedback=3)
    >>> policy.semantic_weight, policy.min_similarity, policy.candidates(1000)
    (0.5, 0.2, 50)
    >>> RecallPolicy(semantic_weight=1.5)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    memstack.errors.ConfigurationError: ... semantic_weight must be a number in [0, 1], not 1.5

``memstack bench memory`` sweeps these fields and reports, next to the defaults, the
figure of leave-one-conversation-out selection on LoCoMo (``benchmarks/README.md``,
section "bench memory"): a value picked on the conversations it is reported on flatters.
"""

from __future__ import annotations

from dataclasses import dataclass

from memstack.errors import ConfigurationError

__all__ = ["RecallPolicy"]

_LAYER = "MemoryStore"


def _number(name: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ConfigurationError(
            f"{name} must be a number in [{low:g}, {high:g}], not {value!r}", layer=_LAYER
        )
    return float(value)


@dataclass(frozen=True, slots=True)
class RecallPolicy:
    """How recall weighs meaning against words and how many candidates it reads."""

    #: Share of the fused score from the embedding side (0: words only).
    semantic_weight: float = 0.5
    #: Vector hits below this cosine similarity are not candidates (-1: every hit is).
    #: Model-specific: with the default MiniLM, unrelated pairs score under 0.2 and a
    #: question and its answer above 0.25 ("what language?" / "Prefers answers in French"
    #: 0.28); without a floor every recall injects the nearest memories, however far.
    min_similarity: float = 0.2
    #: Candidates read per token of budget (at least 20, at most 200).
    candidates_per_token: float = 0.05
    #: Multi-hop: the best this many first-pass hits pull the query vector toward them
    #: for a second vector search (0: one search).
    feedback: int = 0
    #: How far the second search's query moves toward those hits.
    feedback_weight: float = 0.5
    #: What a sentence that asks counts for, against 1 for one that tells: a question
    #: someone asked ("what was the event like?") holds no fact, yet it shares the words
    #: and the form of the question recall is asked (``memstack.memory.ranking.telling``).
    question_weight: float = 0.3
    #: Query expansion: terms of the best first memories join a second full-text query,
    #: the best weighted this much against the question's own (0: one full-text query;
    #: ``memstack.memory.expansion``).
    expansion: float = 0.25

    def __post_init__(self) -> None:
        _number("semantic_weight", self.semantic_weight, 0.0, 1.0)
        _number("min_similarity", self.min_similarity, -1.0, 1.0)
        _number("candidates_per_token", self.candidates_per_token, 0.001, 1.0)
        _number("feedback", self.feedback, 0, 50)
        _number("feedback_weight", self.feedback_weight, 0.0, 10.0)
        _number("question_weight", self.question_weight, 0.0, 1.0)
        _number("expansion", self.expansion, 0.0, 1.0)
        if not isinstance(self.feedback, int):
            raise ConfigurationError(
                f"feedback must be an int, not {self.feedback!r}", layer=_LAYER
            )

    def candidates(self, max_tokens: int) -> int:
        """Enough candidates to fill the budget with short memories, and no more to decode."""
        return min(200, max(20, int(max_tokens * self.candidates_per_token)))
