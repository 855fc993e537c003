"""A memory embedded at two granularities: the whole text and its sentences.

    >>> from memstack.memory import HashingEmbedder
    >>> from memstack.memory.granularity import SentenceMix, sentences
    >>> sentences("Melanie: Wow! I ran farther to de-stress.")
    ['Melanie: Wow!', 'Melanie: I ran farther to de-stress.']
    >>> plain, mixed = HashingEmbedder(dim=64), SentenceMix(HashingEmbedder(dim=64))
    >>> mixed.embed(["One sentence"]) == plain.embed(["One sentence"])  # queries unchanged
    True

Why: a mean-pooled vector of a turn of several sentences is the average of all it says, so
the one fact a question asks about ("what does Melanie do to destress?" against "Wow,
that's great! I just signed up for a pottery class. It's like therapy for me …") is
diluted by the greeting around it. Indexing text at a finer granularity as well is one of
the directions issue 23 names with published evidence (proposition- and sentence-level
retrieval). Here it costs nothing at recall: the stored vector is the sum of the whole
text's unit vector and ``weight`` times the unit mean of its sentences' unit vectors,
made unit again, so each memory keeps one vector and search is unchanged; a text of one
sentence (most queries) gets exactly the inner embedder's vector.

A sentence out of its memory loses who it is about, so a leading label ("Melanie: …",
as transcripts and observed turns are written) is carried into each sentence: measured on
LoCoMo, without it the mix gained 1 question of 383 (83.6 → 83.8%), with it 7
(benchmarks/README.md, "bench memory").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from memstack.errors import ConfigurationError
from memstack.memory.embedder import Embedder
from memstack.memory.embedder import load_numpy as _numpy

__all__ = ["SENTENCE_WEIGHT", "SentenceMix", "sentences"]

_LAYER = "MemoryStore"
#: The sentences' share against the whole text's: chosen by leave-one-conversation-out on
#: LoCoMo (``memstack bench memory`` sweeps 1 against 0, the mix off).
SENTENCE_WEIGHT = 1.0
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# "Name: text": one to three words before a colon at the very start ("We met at 10: …"
# is no label).
_LABEL = re.compile(r"^[^\W\d][\w'’-]*(?: [^\W\d][\w'’-]*){0,2}:\s")
# Texts longer than this are embedded whole only: splitting a document into hundreds of
# pieces would cost as many model runs for one memory.
_MAX_SENTENCES = 16


def sentences(text: str) -> list[str]:
    """``text``'s sentences, each with the text's leading label; [] for one sentence."""
    parts = [part for part in _SENTENCE_END.split(text.strip()) if part]
    if len(parts) < 2 or len(parts) > _MAX_SENTENCES:
        return []
    label = _LABEL.match(parts[0])
    if label is None:
        return parts
    prefix = label.group(0)
    return [parts[0], *(prefix + part for part in parts[1:])]


class SentenceMix:
    """An embedder whose vector of a text of several sentences also holds its sentences'."""

    def __init__(self, inner: Embedder, *, weight: float = SENTENCE_WEIGHT) -> None:
        if not isinstance(inner, Embedder):
            raise ConfigurationError(f"inner must be an Embedder, not {inner!r}", layer=_LAYER)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight <= 10:
            raise ConfigurationError(
                f"weight must be a number in [0, 10], not {weight!r}", layer=_LAYER
            )
        self.inner = inner
        self.weight = float(weight)
        # The same model's space, so vectors stored before the mix stay comparable: the
        # name says which model, as it did.
        self.name = inner.name
        self.dim = inner.dim

    def __repr__(self) -> str:
        return f"SentenceMix({self.inner!r}, weight={self.weight:g})"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        split = [sentences(text) if self.weight else [] for text in texts]
        pieces = [piece for parts in split for piece in parts]
        # One call, so the inner model batches the pieces with the texts.
        vectors = self.inner.embed([*texts, *pieces])
        if len(vectors) != len(texts) + len(pieces):
            return vectors  # the store reports the count mismatch, naming the model
        np = _numpy()
        out: list[list[float]] = []
        next_piece = len(texts)
        for index, parts in enumerate(split):
            if not parts:
                out.append(vectors[index])
                continue
            own = np.asarray(vectors[next_piece : next_piece + len(parts)], dtype=np.float64)
            next_piece += len(parts)
            mean = _unit(np, _unit(np, own).mean(axis=0))
            whole = _unit(np, np.asarray(vectors[index], dtype=np.float64))
            out.append([float(x) for x in _unit(np, whole + self.weight * mean)])
        return out


def _unit(np: Any, values: Any) -> Any:
    """Rows (or a vector) scaled to unit length; a zero one stays zero."""
    norms = np.linalg.norm(values, axis=-1, keepdims=True)
    return values / np.where(norms > 0, norms, 1.0)
