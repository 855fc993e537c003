"""Leave-one-conversation-out selection in ``memstack bench memory`` (pure, no store)."""

from __future__ import annotations

from memstack.bench.memory_bench import (
    Config,
    Conversation,
    Question,
    StrategyScore,
    leave_one_out,
)
from memstack.memory.recall_policy import RecallPolicy


def _conversations() -> list[Conversation]:
    return [
        Conversation(
            name,
            [],
            [Question(name, f"q{i}", "a", frozenset({"D1:1"}), 4) for i in range(2)],
        )
        for name in ("a", "b", "c")
    ]


def _score(found: list[bool]) -> StrategyScore:
    score = StrategyScore("s", "memstack")
    score.found = found
    score.answered = [False] * len(found)
    score.tokens = [10] * len(found)
    score.millis = [1.0] * len(found)
    score.categories = [4] * len(found)
    return score


def test_left_out_figure_is_chosen_on_the_other_conversations() -> None:
    conversations = _conversations()
    configs = [
        Config(2, RecallPolicy(), True),
        Config(2, RecallPolicy(semantic_weight=0.3), True),
    ]
    # Config 1 wins on conversation "a" only (and on all data: 4 of 6 against 3);
    # config 0 wins on "b" and "c". Each fold must be scored by the other fold's choice.
    scores = [
        _score([False, False, True, True, True, False]),
        _score([True, True, True, True, False, False]),
    ]
    held, folds = leave_one_out(conversations, configs, scores, "left-out")
    assert [fold["chosen"] for fold in folds] == [
        configs[0].label,
        configs[1].label,
        configs[1].label,
    ]
    # a by config 0: 0/2; b by config 1: 2/2; c by config 1: 0/2.
    assert held.found == [False, False, True, True, False, False]
    assert sum(held.found) < max(sum(s.found) for s in scores)


def test_ties_go_to_the_defaults() -> None:
    conversations = _conversations()
    configs = [Config(2, RecallPolicy(), True), Config(1, RecallPolicy(), True)]
    scores = [_score([True] * 6), _score([True] * 6)]
    _, folds = leave_one_out(conversations, configs, scores, "left-out")
    assert {fold["chosen"] for fold in folds} == {configs[0].label}
