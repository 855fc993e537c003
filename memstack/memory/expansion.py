"""Query expansion from the first results (pseudo-relevance feedback on the words side).

    >>> from memstack.memory.expansion import expansion_terms
    >>> expansion_terms(
    ...     [("John: they offer yoga, kickboxing and circuit training", 1.0)],
    ...     {"exercis": 1, "john": 1},
    ...     weight=0.25,
    ... )
    {'offer': 0.25, 'yoga': 0.25, 'kickbox': 0.25, 'circuit': 0.25, 'train': 0.25}

Why: a question that asks for a list ("what exercises has John done?") is answered by
several memories, and the words of the ones found first ("yoga", "kickboxing") are the
words of the others ("I started a weekend yoga class"), not the question's. A second
full-text query with the best first memories' terms, weighted below the question's own, is
the relevance-model feedback of classic retrieval (RM3): on LoCoMo, evidence recall at 1,000
tokens 85.4% → 87.0% with the defaults, more on each conversation (``benchmarks/README.md``,
"bench memory"). It only re-ranks: BM25 sums over terms, so the added terms' scores are
read for the first pass's best candidates by memory id and added to theirs (a common word
found in the first memories counts little: its idf), and a memory neither the question's
words nor its meaning found is never brought in. The memories that lent the words are not
scored by them: each would gain most from its own words (in a scope of three memories
every one lends to itself, and the ranking becomes one of vocabulary size).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from memstack.memory.text import terms

__all__ = ["FEEDBACK_MEMORIES", "FEEDBACK_TERMS", "expansion_terms"]

#: The first memories whose words expand the query, and how many terms are added: the
#: usual relevance-model settings at the scale of one recall (a handful of memories, not
#: of documents), not tuned (3 and 10; 5 and 20 recalled within a question of them).
FEEDBACK_MEMORIES = 3
FEEDBACK_TERMS = 10


def expansion_terms(
    found: Iterable[tuple[str, float]],
    query_terms: Mapping[str, float],
    *,
    weight: float,
    count: int = FEEDBACK_TERMS,
) -> dict[str, float]:
    """Up to ``count`` terms of ``found`` (text, score) not in the query, weighted at most
    ``weight`` (the query's own count 1 or more each).

    Each memory lends its score, shared among its terms (a long memory does not outvote a
    short one by length); the best term gets ``weight`` and the others in proportion.
    Equal weights keep the order the terms were met in: the same terms in every process.
    """
    if weight <= 0 or count < 1:
        return {}
    lent: dict[str, float] = {}
    for text, score in found:
        own = [term for term in terms(text) if term not in query_terms]
        if not own or score <= 0:
            continue
        share = score / len(own)
        for term in own:
            lent[term] = lent.get(term, 0.0) + share
    best = sorted(lent, key=lambda term: -lent[term])[:count]
    if not best:
        return {}
    top = lent[best[0]]
    return {term: weight * lent[term] / top for term in best}
