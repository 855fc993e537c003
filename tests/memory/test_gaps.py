"""Gaps: numbers read past and not seen, asked for again until they show up or age out."""

from __future__ import annotations

from memstack.memory.gaps import MAX_AGE, MAX_OPEN, Gaps


def test_numbers_not_present_are_open_until_filled_or_old() -> None:
    gaps = Gaps().found(range(1, 6), present={1, 3, 5}, now=0.0)
    assert gaps.numbers == (2, 4)
    assert gaps.filled({2}, now=1.0).numbers == (4,)
    assert gaps.filled(set(), now=MAX_AGE).numbers == (2, 4)
    assert gaps.filled(set(), now=MAX_AGE + 1).numbers == ()


def test_only_the_newest_gaps_are_kept() -> None:
    gaps = Gaps().found(range(1, 1_001), present=set(), now=0.0)
    assert gaps.numbers == tuple(range(1_001 - MAX_OPEN, 1_001))


def test_nothing_new_is_the_same_value() -> None:
    gaps = Gaps().found(range(1, 3), present={1}, now=0.0)
    assert gaps.found(range(3, 5), present={3, 4}, now=1.0) is gaps
    assert gaps.filled({9}, now=1.0) is gaps
