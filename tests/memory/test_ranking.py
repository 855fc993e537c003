"""Recall's ranking: what asks weighs less than what tells."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstack.errors import ConfigurationError
from memstack.memory import MemoryStore
from memstack.memory.ranking import telling
from memstack.memory.recall_policy import RecallPolicy


def test_a_question_counts_its_share_of_sentences() -> None:
    assert telling("I ran a charity race last Saturday.", question_weight=0.3) == 1.0
    assert telling("What was the race like?", question_weight=0.3) == pytest.approx(0.3)
    # One sentence of two asks: halfway between a question and a statement.
    assert telling("Wow! What got you into running?", question_weight=0.3) == pytest.approx(0.65)
    assert telling("What was the race like?", question_weight=1.0) == 1.0  # switched off
    assert telling("", question_weight=0.3) == 1.0


def test_policy_checks_the_question_weight() -> None:
    with pytest.raises(ConfigurationError, match="question_weight"):
        RecallPolicy(question_weight=1.5)


@pytest.mark.parametrize("question_weight", [0.3, 1.0])
async def test_recall_prefers_the_answer_to_a_question_with_the_same_words(
    tmp_path: Path, question_weight: float
) -> None:
    store = MemoryStore.from_url(
        f"sqlite:///{tmp_path / 'm.db'}",
        embedder=None,
        recall_policy=RecallPolicy(question_weight=question_weight),
    )
    asked = "Bo: When is the charity race?"
    told = "Ana: The charity race is on a Saturday in May, by the river, early on."
    await store.remember("ana", asked, source="observed")
    await store.remember("ana", told, source="observed")
    found = await store.search("ana", "When is the charity race?", limit=2)
    # Words alone put the shorter question first; what asks weighs 0.3 by default.
    assert found[0][0].text == (told if question_weight < 1 else asked)
    await store.close()
