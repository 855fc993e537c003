"""A memory embedded whole and by sentence (``memstack.memory.granularity``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from memstack.errors import ConfigurationError
from memstack.memory import HashingEmbedder, MemoryStore, OnnxMiniLMEmbedder
from memstack.memory.granularity import SentenceMix, sentences
from memstack.memory.vectors import embedder_named

CHATTY = (
    "Melanie: Wow, Caroline! That's great! I just signed up for a pottery class "
    "yesterday. It's like therapy for me, letting me express myself."
)


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_sentences_carry_the_memorys_label() -> None:
    assert sentences("Jon: Thanks! I went to Rome last week.") == [
        "Jon: Thanks!",
        "Jon: I went to Rome last week.",
    ]
    assert sentences("Likes tea. Hates coffee.") == ["Likes tea.", "Hates coffee."]
    assert sentences("Jon: one sentence only.") == []
    assert sentences("Note: this. And that.")[1] == "Note: And that."
    # A colon later in the first sentence is no label.
    assert sentences("We met at 10: it rained. Then sun.") == [
        "We met at 10: it rained.",
        "Then sun.",
    ]
    assert sentences(" ".join(["Word."] * 40)) == []  # a document is embedded whole


def test_one_sentence_texts_and_queries_get_the_inner_vector() -> None:
    plain, mixed = HashingEmbedder(dim=64), SentenceMix(HashingEmbedder(dim=64))
    texts = ["What does Melanie do to destress?", "Jon: Agreed!"]
    assert mixed.embed(texts) == plain.embed(texts)
    assert (mixed.name, mixed.dim) == (plain.name, plain.dim)
    off = SentenceMix(HashingEmbedder(dim=64), weight=0)
    assert off.embed([CHATTY]) == plain.embed([CHATTY])


def test_a_text_of_sentences_is_the_unit_sum_of_whole_and_sentence_mean() -> None:
    plain, mixed = HashingEmbedder(dim=64), SentenceMix(HashingEmbedder(dim=64), weight=1.0)
    [vector] = mixed.embed([CHATTY])
    assert math.isclose(math.fsum(x * x for x in vector), 1.0, rel_tol=1e-9)
    [whole] = plain.embed([CHATTY])
    parts = plain.embed(sentences(CHATTY))
    # Closer to every sentence than the whole text alone is, on average.
    assert sum(_cosine(vector, p) for p in parts) > sum(_cosine(whole, p) for p in parts)


@pytest.mark.parametrize("weight", [-1, 11, True, "1"])
def test_the_weight_is_checked(weight: object) -> None:
    with pytest.raises(ConfigurationError, match="weight must be a number in"):
        SentenceMix(HashingEmbedder(), weight=weight)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="inner must be an Embedder"):
        SentenceMix("minilm")  # type: ignore[arg-type]


def test_the_default_embedder_mixes_sentences() -> None:
    default = embedder_named("default")
    assert isinstance(default, SentenceMix) and isinstance(default.inner, OnnxMiniLMEmbedder)
    assert default.name == "all-MiniLM-L6-v2-int8"  # vectors stored before stay comparable
    # The one fact among greetings is nearer the question that asks for it.
    question = "What does Melanie do to destress?"
    [asked] = default.embed([question])
    [whole] = default.inner.embed([CHATTY])
    [mixed] = default.embed([CHATTY])
    assert _cosine(asked, mixed) > _cosine(asked, whole) + 0.05


@pytest.mark.parametrize("embedder", ["default", "whole"])
async def test_recall_finds_the_fact_inside_a_chatty_memory(embedder: str) -> None:
    # Meaning only (the query shares no word but the name with any memory): with
    # whole-text vectors the turn holding the fact ranks last, behind turns that say less.
    store = MemoryStore.from_url(
        "sqlite://:memory:", embedder=OnnxMiniLMEmbedder() if embedder == "whole" else embedder
    )
    others = [
        "Melanie: My fam's been awesome - they helped out and showed lots of love and support.",
        "Melanie: Wow, Caroline! That is so great to hear!",
    ]
    for text in [CHATTY, *others]:
        await store.remember("u", text, kind="note")
    found = await store.search("u", "What does Melanie do to destress?", limit=3)
    await store.close()
    ranked = [memory.text for memory, _ in found]
    assert ranked.index(CHATTY) == (0 if embedder == "default" else 2)
