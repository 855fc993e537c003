"""Summaries and placeholders that quote lines: QuotingSummarizer, Mask(excerpt=…), excerpts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memstack.bench.in_context import normalized, shown_in_context
from memstack.compaction import Mask, Summarize
from memstack.compaction.config import strategy_from_config
from memstack.compaction.excerpts import excerpt, used_names
from memstack.compaction.quoting import QuotingSummarizer
from memstack.errors import ConfigurationError
from memstack.tokens import TokenCounter
from tests.items import call, output

Item = dict[str, Any]

LISTING = "\n".join(f"{n}:     x_{n} = compute(value_{n})" for n in range(100, 160))
LISTING += "\n161:     def parse_date(text, fmt=ISO_FORMAT):\n162:         return None"


def said(text: str) -> Item:
    return {"role": "assistant", "content": text}


RUN: list[Item] = [
    call("c1", "cat -n src/util/dates.py"),
    output("c1", LISTING),
    said("The default of parse_date is wrong."),
    call("c2", "grep -rn ISO_FORMAT src"),
    output("c2", "src/util/dates.py:3:ISO_FORMAT = '%Y-%d-%m'"),
]


def test_used_names_are_the_agents_own_words_only() -> None:
    assert used_names(RUN) == ["src/util/dates.py", "parse_date", "ISO_FORMAT"]


def test_excerpt_keeps_the_lines_holding_the_names_within_budget() -> None:
    assert excerpt(LISTING, ["parse_date"], budget=200) == [
        "161:     def parse_date(text, fmt=ISO_FORMAT):"
    ]
    assert excerpt(LISTING, ["parse_date"], budget=10) == []
    assert excerpt(LISTING, ["value_1"], budget=500) == []  # value_10 is another name


def test_excerpt_of_a_one_line_json_gives_a_stretch_per_name() -> None:
    record = json.dumps({f"field_{n}": f"v{n}" for n in range(40)} | {"flight": "HAT069"})
    [stretch] = excerpt(record, ["HAT069"], budget=300, width=60)
    assert "HAT069" in stretch and len(stretch) <= 60
    assert shown_in_context("HAT069", [record], stretch)


async def summary_of(items: list[Item], **options: Any) -> str:
    strategy = Summarize(QuotingSummarizer(), max_tokens=options.pop("max_tokens", 300))
    [item] = await strategy.compact([], items, **options)
    return str(item["content"]).split("\n\n", 1)[1]


async def test_the_summary_quotes_lines_not_a_list_of_names() -> None:
    text = await summary_of(RUN)
    lines = text.splitlines()
    assert "$ grep -rn ISO_FORMAT src" in lines
    assert "> The default of parse_date is wrong." in lines
    # every name the agent used is shown with the text it stood in
    holders = [normalized(json.loads(RUN[0]["arguments"])["command"]), normalized(LISTING)]
    holders += [normalized(RUN[2]["content"]), "grep -rn ISO_FORMAT src"]
    for name in ("src/util/dates.py", "parse_date", "ISO_FORMAT"):
        assert shown_in_context(name, holders, normalized(text)), name
    # lines holding no name the agent used are left out
    assert "compute(value_120)" not in text


async def test_a_quoted_traceback_is_not_taken_for_a_failure_report() -> None:
    # Found replaying a coding run: at a second compaction, a summary whose first carried
    # line read "traceback.print_exc() …" was refused as an error message.
    strategy = Summarize(QuotingSummarizer(), max_tokens=300)
    previous = [
        {
            "role": "developer",
            "content": f"{strategy.header}\n\ntraceback.print_exc() in reproduce_issue",
        }
    ]
    [summary] = await strategy.compact(previous, [call("c9", "python3 reproduce_issue.py")])
    assert "traceback.print_exc() in reproduce_issue" in summary["content"]


async def test_names_the_tail_shows_verbatim_are_not_quoted_again() -> None:
    alone = await summary_of(RUN[:3])
    assert "parse_date" in alone
    tail = [said("parse_date stays; only the default changes.")]
    assert "parse_date" not in await summary_of(RUN[:3], kept=tail)


async def test_the_summary_fits_its_budget_and_is_deterministic() -> None:
    counter = TokenCounter()
    long_run = [
        item
        for n in range(40)
        for item in (call(f"c{n}", f"sed -n {n}p src/mod_{n}.py"), output(f"c{n}", LISTING))
    ]
    first = await summary_of(long_run, max_tokens=120)
    assert counter.count_item({"content": first}) <= 120
    assert first == await summary_of(long_run, max_tokens=120)
    assert "src/mod_39.py" in first  # the newest names weigh most


async def test_a_previous_summary_is_carried_as_candidate_lines() -> None:
    summarizer = QuotingSummarizer()
    strategy = Summarize(summarizer, max_tokens=300)
    first = await strategy.compact([], RUN)
    [second] = await strategy.compact(first, [call("c3", "pytest tests/test_dates.py")])
    assert "ISO_FORMAT" in second["content"] and "tests/test_dates.py" in second["content"]


def test_quoting_is_a_recipe_summarizer_and_checks_its_options() -> None:
    [_, summarize] = strategy_from_config(
        [{"mask": {"keep_last_outputs": 1}}, {"summarize": {"summarizer": {"quoting": {}}}}]
    )
    assert isinstance(summarize.summarizer, QuotingSummarizer)
    with pytest.raises(ConfigurationError, match="line_chars"):
        QuotingSummarizer(line_chars=10)


def loop(count: int) -> list[Item]:
    items: list[Item] = [{"role": "user", "content": "fix parse_date"}]
    for n in range(count):
        items += [call(f"c{n}", f"cat -n src/m{n}.py"), output(f"c{n}", LISTING)]
        items.append(said(f"Line 161 of src/m{n}.py matters."))
    return items


def test_mask_excerpt_quotes_the_lines_the_agent_used_after_the_output() -> None:
    mask = Mask(keep_last_turns=0, keep_last_outputs=1, excerpt=300)
    masked = mask.apply(loop(3))
    placeholder = masked[2]["output"]
    assert placeholder.startswith("[Output of bash(")
    assert "161:     def parse_date(text, fmt=ISO_FORMAT):" in placeholder  # "161" was used
    assert "compute(value_120)" not in placeholder


def test_mask_excerpt_reads_the_same_at_every_later_call() -> None:
    # The placeholder depends only on items that are there once it is masked: the prompt
    # prefix stays byte-stable while the conversation grows.
    mask = Mask(keep_last_turns=0, keep_last_outputs=2, excerpt=300)
    views = [mask.apply(loop(n)) for n in range(3, 8)]
    first = views[0][2]["output"]
    assert first != LISTING
    assert all(view[2]["output"] == first for view in views)
    with pytest.raises(ConfigurationError, match="excerpt"):
        Mask(excerpt=-1)


RESERVATION = json.dumps(
    {
        "reservation_id": "4WQ150",
        "address": "901 Pine Lane, Suite 360, Houston, TX 77271",
        "flights": [
            {"flight_number": f"HAT{n:03}", "date": f"2024-05-{n:02}", "price": 100 + n}
            for n in range(1, 4)
        ],
        "payment_history": [{"payment_id": "gift_card_8190333", "amount": 306}],
    }
)
SUPPORT_RUN: list[Item] = [
    {"role": "user", "content": "What is on my reservation 4WQ150?"},
    {
        "type": "function_call",
        "call_id": "r1",
        "name": "get_reservation_details",
        "arguments": json.dumps({"reservation_id": "4WQ150"}),
    },
    output("r1", RESERVATION),
    said("It has three flights."),
]


async def test_a_json_answer_is_quoted_by_its_parts_with_where_they_stood() -> None:
    strategy = Summarize(
        QuotingSummarizer(keep_fields={"get_reservation_details": ["flights", "payment_history"]}),
        max_tokens=300,
    )
    [summary] = await strategy.compact([], SUPPORT_RUN)
    text = str(summary["content"])
    assert (
        '  | get_reservation_details 4WQ150 flights[0]: {"flight_number": "HAT001", '
        '"date": "2024-05-01", "price": 101}'
    ) in text.splitlines()
    assert '"payment_id": "gift_card_8190333"' in text
    assert "Pine Lane" not in text  # not a key field, and the agent never used it
    holder = normalized(RESERVATION)
    for name in ("HAT003", "2024-05-02", "gift_card_8190333"):
        assert shown_in_context(name, [holder], normalized(text)), name


async def test_without_keep_fields_unused_json_parts_are_not_quoted() -> None:
    text = await summary_of(SUPPORT_RUN)
    assert "HAT002" not in text and "gift_card_8190333" not in text


def test_keep_fields_is_checked_and_shown() -> None:
    with pytest.raises(ConfigurationError, match="keep_fields"):
        QuotingSummarizer(keep_fields={"get_order": "items"})
    assert "keep_fields" in repr(QuotingSummarizer(keep_fields={"get_order": ["items"]}))


async def test_merge_overlaps_quotes_each_line_once_and_fits_more() -> None:
    reply = "\n".join(f"- Flight HAT{n:03}: ${100 + n}" for n in range(12))
    counter = TokenCounter()
    apart = Summarize(QuotingSummarizer(counter=counter), max_tokens=100)
    merged = Summarize(QuotingSummarizer(counter=counter, merge_overlaps=True), max_tokens=100)
    [alone] = await apart.compact([], [said(reply)])
    [once] = await merged.compact([], [said(reply)])

    def flights(item: Item) -> list[str]:
        return [line.removeprefix("> ") for line in item["content"].splitlines() if "HAT" in line]

    assert len(flights(alone)) > len(set(flights(alone)))  # overlapping quotes repeat lines
    assert len(flights(once)) == len(set(flights(once))) > len(set(flights(alone)))
    assert counter.count_item(once) <= counter.count_item(alone) + 8  # the same budget
    assert "merge_overlaps=True" in repr(merged.summarizer)
    with pytest.raises(ConfigurationError, match="merge_overlaps"):
        QuotingSummarizer(merge_overlaps=1)  # type: ignore[arg-type]


async def test_the_lead_line_can_be_shorter() -> None:
    lead = "Quoted ($ a call, | its output, > the agent):"
    strategy = Summarize(QuotingSummarizer(lead=lead), max_tokens=300)
    [item] = await strategy.compact([], RUN)
    assert str(item["content"]).split("\n\n", 1)[1].startswith(lead + "\n$ ")
    assert "lead=" in repr(strategy.summarizer)
    with pytest.raises(ConfigurationError, match="lead"):
        QuotingSummarizer(lead="")
