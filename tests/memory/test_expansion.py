"""Query expansion: the best first memories' words find the others a list question needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memstack.errors import ConfigurationError
from memstack.memory import HashingEmbedder, MemoryStore
from memstack.memory.expansion import expansion_terms
from memstack.memory.recall_policy import RecallPolicy

EXERCISES = "John: the gym's exercise classes are yoga and kickboxing."
YOGA = "John: started a weekend yoga class with a colleague."
WEATHER = "John: grey weather all week."  # shorter: "John" alone ranks it above YOGA
RAIN = "John: rain, rain and rain."
# Shares no term with the question: expansion re-ranks, it does not widen recall.
ELSEWHERE = "Yoga at dawn by the lake."
# The rest of the scope, so that rare words weigh more than common ones.
OTHERS = [f"Maria: shelter shift number {n} went fine." for n in range(8)]
QUESTION = "What exercises has John done?"


def test_expansion_terms_leave_out_the_query_and_weigh_below_it() -> None:
    extra = expansion_terms(
        [("yoga, yoga and kickboxing", 1.0), ("kickboxing gloves", 0.5)],
        {"exercis": 1, "kickbox": 1},
        weight=0.25,
    )
    assert "kickbox" not in extra  # already asked
    assert extra["yoga"] == pytest.approx(0.25)  # the best term gets the weight
    assert extra["glove"] == pytest.approx(0.125)  # half the score, one term
    assert list(extra) == ["yoga", "glove"]


def test_expansion_terms_are_few_and_off_at_weight_zero() -> None:
    found = [("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu", 1.0)]
    assert len(expansion_terms(found, {}, weight=0.25)) == 10
    assert len(expansion_terms(found, {}, weight=0.25, count=3)) == 3
    assert expansion_terms(found, {}, weight=0.0) == {}
    assert expansion_terms([("the and of", 1.0)], {}, weight=0.25) == {}  # stop words only


def test_policy_checks_the_expansion_weight() -> None:
    assert RecallPolicy().expansion == 0.25
    with pytest.raises(ConfigurationError, match="expansion"):
        RecallPolicy(expansion=1.5)


@pytest.mark.parametrize("embedder", [None, HashingEmbedder(dim=64)])
async def test_a_list_question_ranks_up_a_memory_with_the_first_ones_words(
    tmp_path: Path, embedder: HashingEmbedder | None
) -> None:
    found: dict[float, list[str]] = {}
    for weight in (0.0, 0.25):
        store = MemoryStore.from_url(
            f"sqlite:///{tmp_path / f'm{weight}.db'}",
            embedder=embedder,
            recall_policy=RecallPolicy(expansion=weight, min_similarity=0.5),
        )
        for text in (EXERCISES, YOGA, WEATHER, RAIN, ELSEWHERE, *OTHERS):
            await store.remember("john", text, source="observed")
        ranked = await store.search("john", QUESTION, limit=4)
        found[weight] = [m.text for m, _ in ranked]
        if embedder is None:  # words only: nothing that shares no word with the question
            wide = await store.search("john", QUESTION, limit=10)
            assert ELSEWHERE not in [m.text for m, _ in wide]
        await store.close()
    # The three best lend their words and keep their scores; the fourth gains.
    assert found[0.0][0] == EXERCISES and found[0.0][3] == YOGA
    assert found[0.25][0] == EXERCISES  # the question's own words still lead
    assert found[0.25].index(YOGA) < 3


async def test_added_terms_score_the_given_memories_as_a_ranking_would(
    memory: MemoryStore, scope: str
) -> None:
    for text in (EXERCISES, YOGA, WEATHER, ELSEWHERE, *OTHERS):
        await memory.remember(scope, text, source="observed")
    await memory.remember(scope + "-other", YOGA, source="observed")  # not counted
    terms = {"yoga": 0.25, "class": 0.5, "nowhere": 1.0}
    index, now = memory.parts.index, memory.parts.now()
    async with memory.parts.connect("test") as conn:
        rows = await index.ranked(conn, scope, terms, 50, now)
        ranked = {row.id: float(row.total) for row in rows}
        some = list(ranked)[:2]
        scored = await index.scores(conn, scope, terms, [*some, "no-such-id"])
        assert await index.scores(conn, scope, {}, some) == {}
    assert set(ranked) == {m.id for m in await memory.list_memories(scope) if "oga" in m.text}
    assert scored == pytest.approx({memory_id: ranked[memory_id] for memory_id in some})


async def test_added_terms_are_scored_in_one_read_with_their_frequencies(
    memory: MemoryStore, scope: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Expansion's terms are new to the frequency cache: counted in the same statement
    that reads their impacts, one round trip on the critical path instead of two."""
    import memstack.memory.fulltext as fulltext

    for text in (EXERCISES, YOGA, WEATHER, ELSEWHERE, *OTHERS):
        await memory.remember(scope, text, source="observed")
    await memory.remember(scope + "-other", YOGA, source="observed")  # not counted
    ids = [m.id for m in await memory.list_memories(scope)]
    terms = {"yoga": 0.25, "class": 0.5, "nowhere": 1.0}
    reads: list[str] = []
    real = fulltext.fetch_all

    async def counted(*args: Any, **kwargs: Any) -> list[Any]:
        reads.append(args[1])
        return await real(*args, **kwargs)

    index, now = memory.parts.index, memory.parts.now()
    async with memory.parts.connect("test") as conn:
        monkeypatch.setattr(fulltext, "fetch_all", counted)
        scored = await index.scores(conn, scope, terms, ids)  # frequencies not cached
        monkeypatch.undo()
        ranked = {
            row.id: float(row.total) for row in await index.ranked(conn, scope, terms, 50, now)
        }
    assert len(reads) == 1
    assert scored == pytest.approx(ranked)
