"""Needed-context recall in context: the token must come with its original surrounding text."""

from __future__ import annotations

from typing import Any

from memstack.bench.in_context import (
    CONTEXT_CHARS,
    in_context_counts,
    normalized,
    shown_in_context,
)
from memstack.bench.needed import Need

Item = dict[str, Any]

LINE = "src/util/dates.py:41:    def parse_date(text, fmt=ISO_FORMAT):  # the one we want"
HOLDER = normalized("header line\n" + LINE + "\nfooter line that goes on for a while")


def note(text: str) -> Item:
    return {"role": "developer", "content": text}


def test_whitespace_is_collapsed_and_the_ends_stripped() -> None:
    assert normalized("  a\n\n  b\tc  ") == "a b c"


def test_a_bag_of_names_keeps_nothing() -> None:
    bag = "Names in it: src/util/dates.py 41 parse_date ISO_FORMAT"
    for token in ("parse_date", "ISO_FORMAT", "41", "src/util/dates.py"):
        assert not shown_in_context(token, [HOLDER], bag), token


def test_the_quoted_line_keeps_every_token_in_it() -> None:
    quoted = "Excerpt: " + normalized(LINE)
    for token in ("parse_date", "ISO_FORMAT", "src/util/dates.py"):
        assert shown_in_context(token, [HOLDER], quoted), token


def test_the_stretch_may_lie_on_either_side_or_on_both() -> None:
    holder = "a" * 40 + " TOKEN_X " + "b" * 40
    # exactly CONTEXT_CHARS characters of agreement in all: kept; one fewer: not
    left = holder[holder.index("TOKEN_X") - CONTEXT_CHARS : holder.index("TOKEN_X") + 7]
    assert shown_in_context("TOKEN_X", [holder], f"[{left}]")
    split = holder[holder.index("TOKEN_X") - 10 : holder.index("TOKEN_X") + 7 + 22]
    assert shown_in_context("TOKEN_X", [holder], split)
    short = holder[holder.index("TOKEN_X") - 10 : holder.index("TOKEN_X") + 7 + 21]
    assert not shown_in_context("TOKEN_X", [holder], f"[{short}]")


def test_a_short_holder_must_be_shown_whole() -> None:
    holder = "port 8080 ok"
    assert shown_in_context("8080", [holder], "the server said: port 8080 ok.")
    assert not shown_in_context("8080", [holder], "the server said: port 8080")


def test_occurrences_glued_to_longer_words_do_not_count() -> None:
    holder = "x" * 40 + " 120 " + "y" * 40
    assert not shown_in_context("120", [holder], "x" * 40 + " 1200 " + "y" * 40)


def test_the_stretch_must_agree_with_the_holder_not_just_any_text() -> None:
    # the token in a long stretch of other text (a summary's own words) is not kept
    prose = "The agent later decided to look more closely at ISO_FORMAT in the module."
    assert not shown_in_context("ISO_FORMAT", [HOLDER], prose)


def test_counts_keep_a_need_by_an_unchanged_holder_first() -> None:
    texts = [HOLDER, normalized("grep -n parse_date src")]
    needs = [Need("parse_date", frozenset({0, 1})), Need("ISO_FORMAT", frozenset({0}))]
    # the grep call is in the view unchanged: parse_date kept; ISO_FORMAT only as a name
    view = [{"type": "function_call"}, note("Names: ISO_FORMAT parse_date")]
    assert in_context_counts(needs, view, [1, None], texts) == (2, 1)
    # a placeholder that quotes the line keeps ISO_FORMAT too
    view = [{"type": "function_call"}, note("[omitted] …" + LINE + "…")]
    assert in_context_counts(needs, view, [1, None], texts) == (2, 2)
    assert in_context_counts([], view, [1, None], texts) == (0, 0)


def test_stretches_do_not_span_two_view_items() -> None:
    holder = "alpha beta gamma delta epsilon TOKEN_Y zeta eta theta iota kappa lambda"
    texts = [holder]
    need = [Need("TOKEN_Y", frozenset({0}))]
    split = [note("alpha beta gamma delta epsilon"), note("TOKEN_Y zeta eta")]
    assert in_context_counts(need, split, [None, None], texts) == (1, 0)
    whole = [note("alpha beta gamma delta epsilon TOKEN_Y zeta eta")]
    assert in_context_counts(need, whole, [None], texts) == (1, 1)
