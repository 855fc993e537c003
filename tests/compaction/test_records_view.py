"""The stored record format, and how a tail of the store resolves into a view."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest

from memstack.compaction.plan import Plan, anchors_after, choose_stop, decide, plan_compaction
from memstack.compaction.records import (
    Record,
    RecordFormatError,
    item_hash,
    parse_record,
    pop_last,
)
from memstack.compaction.triggers import Estimate, Items, after_write
from memstack.compaction.view import Need, Resolution, resolve
from memstack.testing import sample_items
from memstack.tokens import TokenCounter

SUMMARY = ({"role": "developer", "content": "summary"},)


def compaction(
    stored: list[dict[str, Any]], stop: int, *, appended: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    """The record covering ``stop`` uncovered items of ``stored``, made while ``appended``
    were written; it goes right after them."""
    res = resolve(stored, complete=True)
    assert isinstance(res, Resolution)
    plan = plan_compaction(res, stop)
    assert plan is not None
    now = resolve([*stored, *appended], complete=True)
    assert isinstance(now, Resolution)
    anchors = anchors_after(now, plan)
    assert anchors is not None
    return plan.record(SUMMARY, "summary", anchors).to_item()


def view(stored: list[dict[str, Any]], **options: Any) -> list[dict[str, Any]]:
    res = resolve(stored, complete=options.pop("complete", True), **options)
    assert isinstance(res, Resolution), res
    return res.view


def test_record_round_trips_and_is_versioned() -> None:
    items = sample_items(8)
    item = compaction(items, 4)
    assert item["type"] == "memstack.compaction" and item["v"] == 1 and item["mode"] == "append"
    assert item["from"] == item_hash(items[0]) and item["upto"] == item_hash(items[3])
    assert (item["count"], item["span"], item["after"]) == (4, 4, 4)
    assert parse_record(item).to_item() == item


@pytest.mark.parametrize(
    "change",
    [
        {"v": 2},
        {"mode": "x"},
        {"method": "x"},
        {"summary": "text"},
        {"count": 0},
        {"upto": ""},
        {"span": True},
        {"pinned": [1]},
    ],
)
def test_malformed_records_are_refused(change: dict[str, Any]) -> None:
    item = {**compaction(sample_items(8), 4), **change}
    with pytest.raises(RecordFormatError):
        parse_record(item)


def test_view_is_summary_then_uncovered_items_and_never_the_record() -> None:
    items = sample_items(8)
    stored = [*items, compaction(items, 4)]
    assert view(stored) == [*SUMMARY, *items[4:]]


def test_items_appended_while_compacting_stay_visible() -> None:
    items = sample_items(8)
    late = sample_items(4, tag="late")
    record = compaction(items, 4, appended=late)
    stored = [*items, *late, record, *sample_items(2, tag="after")]
    assert view(stored) == [*SUMMARY, *items[4:], *late, *sample_items(2, tag="after")]


def test_repeated_content_does_not_fool_the_anchor() -> None:
    block = [{"role": "user", "content": "again"}, {"role": "assistant", "content": "ok"}]
    stored = [*block, *block, *block]
    record = compaction(stored, 2)  # covers the first block, keeps two identical ones
    assert view([*stored, record]) == [*SUMMARY, *block, *block]
    # Another identical block appended meanwhile is still shown.
    record = compaction(stored, 2, appended=block)
    assert view([*stored, *block, record]) == [*SUMMARY, *block, *block, *block]


def test_a_plan_no_longer_applies_once_its_items_changed() -> None:
    items = sample_items(8)
    res = resolve(items, complete=True)
    assert isinstance(res, Resolution)
    plan = plan_compaction(res, 4)
    assert plan is not None
    for changed in (items[1:], [], sample_items(8, tag="other")):
        now = resolve(changed, complete=True)
        assert isinstance(now, Resolution)
        assert anchors_after(now, plan) is None
    # Another compaction written meanwhile: this one is discarded.
    other = resolve([*items, compaction(items, 2)], complete=True)
    assert isinstance(other, Resolution) and anchors_after(other, plan) is None


def test_record_whose_anchor_was_popped_no_longer_applies() -> None:
    items = sample_items(8)
    record = compaction(items, 8)  # covers everything but the task, carried verbatim
    assert view([*items, record]) == [items[4], *SUMMARY]
    assert view([*items[:-1], record]) == items[:-1]


def test_the_newest_user_message_is_carried_verbatim_until_a_newer_one_comes() -> None:
    items = sample_items(8)  # user messages at 0 and 4
    res = resolve(items, complete=True)
    assert isinstance(res, Resolution)
    plan = plan_compaction(res, 7)
    assert plan is not None
    assert plan.pinned == [items[4]]  # the task of the agent loop being compacted
    assert items[4] not in plan.covered and items[0] in plan.covered
    # Later, with a newer user message, the carried one is summarised like the rest.
    record = compaction(items, 7)
    later = [*items, record, *sample_items(4, tag="n")]
    res = resolve(later, complete=True)
    assert isinstance(res, Resolution)
    assert res.view[0] == items[4]
    plan = plan_compaction(res, 1)  # covers "m-7 answer"; "n-0 question" is newer
    assert plan is not None
    assert plan.pinned == [] and plan.covered == [items[4], items[7]]


def test_record_whose_first_item_expired_no_longer_applies() -> None:
    items = sample_items(12)
    record = compaction(items, 8)
    assert view([*items, record]) == [*SUMMARY, *items[8:]]
    assert view([*items[1:], record]) == items[1:]  # the oldest covered item is gone


def test_bounded_reads_ask_for_more_or_for_the_store_size() -> None:
    items = sample_items(40)
    stored = [*items, compaction(items, 36)]
    # The anchor is outside a 3-entry tail: read more.
    assert resolve(stored[-3:], complete=False) is Need.MORE
    # Anchor found, first covered item far back: a count decides without reading it.
    tail = stored[-10:]
    assert resolve(tail, complete=False) is Need.SIZE
    assert view(tail, complete=False, store_size=len(stored)) == [*SUMMARY, *items[36:]]
    # A store that cannot count: the first item is taken as present beyond the window.
    assert view(tail, complete=False, trust_first=True) == [*SUMMARY, *items[36:]]
    # A store that lost its oldest entry no longer holds the first covered item.
    shrunk = resolve(tail, complete=False, store_size=len(stored) - 1)
    assert shrunk is Need.MORE  # the record is invalid; older entries must be read


def test_successive_records_chain_to_the_first_covered_item() -> None:
    items = sample_items(16)
    stored = [*items[:8], compaction(items[:8], 4), *items[8:]]
    second = compaction(stored, 8)  # items 4-11, after the first record's items 0-3
    record = parse_record(second)
    assert record.count == 12 and record.anchors is not None
    assert record.anchors.first == item_hash(items[0])
    assert record.anchors.span == 13  # twelve items and the first record between them
    assert view([*stored, second]) == [*SUMMARY, *items[12:]]
    # Both records start at items[0]: with it gone, neither applies.
    assert view([*stored[1:], second]) == items[1:]


def test_unreadable_records_are_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    items = sample_items(8)
    future = {**compaction(items, 4), "v": 99}
    with caplog.at_level(logging.WARNING, logger="memstack.compaction"):
        assert view([*items, future]) == items
    assert "version 99" in caplog.text


def test_rewrite_records_stand_at_the_head() -> None:
    items = sample_items(8)
    record = Record(summary=SUMMARY, count=20, pinned=({"role": "system", "content": "s"},))
    assert view([record.to_item(), *items]) == [*record.head, *items]


def test_choose_stop_keeps_turns_fits_target_and_never_covers_an_open_call() -> None:
    items = sample_items(12)  # three turns of four items
    ones = [1] * 12
    assert choose_stop(items, ones, keep_last_turns=1, target=None) == 8
    assert choose_stop(items, ones, keep_last_turns=2, target=None) == 4
    # Two turns are 8 items > target 5: keep the newest units that fit, from a cut point.
    assert choose_stop(items, ones, keep_last_turns=2, target=5) == 7
    # Over the target even for the newest turn: keep only its newest unit (never split a pair).
    assert choose_stop(items, ones, keep_last_turns=1, target=1) == 11
    assert choose_stop(items, ones, keep_last_turns=0, target=None) == 12
    # A call whose output is not stored yet is never covered.
    assert choose_stop(items[:10], [1] * 10, keep_last_turns=0, target=None) == 9


def test_a_read_hashes_only_what_locates_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """Resolving hashes the record's anchors, not every item the read brought back."""
    import memstack.compaction.view as view_module

    items = sample_items(400)
    stored = [*items[:300], compaction(items[:300], 200), *items[300:]]
    hashed: list[int] = []

    def counting_hash(item: dict[str, Any], key: bytes | None = None) -> str:
        hashed.append(1)
        return item_hash(item, key)

    monkeypatch.setattr(view_module, "item_hash", counting_hash)
    seen = view(stored)
    assert seen[len(SUMMARY) :] == items[200:]
    assert 0 < len(hashed) < 120  # the anchor, the first covered item, the 100 after it


def test_pop_last_hands_out_a_rewrite_records_items_newest_first() -> None:
    task = {"role": "user", "content": "the task"}
    summary = ({"role": "developer", "content": "s1"}, *SUMMARY)
    record = Record(summary=summary, count=5, pinned=(task,), method="responses")
    popped: list[dict[str, Any]] = []
    left: Record | None = record
    while left is not None:
        item, left = pop_last(left)
        popped.append(item)
        if left is not None:  # what the store keeps still parses, with what it stood for
            assert parse_record(left.to_item()) == left
            assert (left.count, left.method, left.anchors) == (5, "responses", None)
    assert popped == [*reversed(record.summary), task]


def test_decide_measures_then_plans() -> None:
    stored = sample_items(16)
    res = resolve(stored, complete=True)
    assert isinstance(res, Resolution)
    counter = TokenCounter()
    kwargs: dict[str, Any] = {"counter": counter, "keep_last_turns": 1}
    assert decide(res, res.raw, trigger=Items(16, target=4), force=False, **kwargs) == Estimate(16)
    plan = decide(res, res.raw, trigger=Items(15, target=4), force=False, **kwargs)
    assert isinstance(plan, Plan) and plan.stop == 12  # the last turn (4 items) kept
    forced = decide(res, res.raw, trigger=Items(16, target=4), force=True, **kwargs)
    assert isinstance(forced, Plan) and forced.stop == 12
    one_turn = resolve(stored[:4], complete=True)
    assert isinstance(one_turn, Resolution)
    assert decide(one_turn, one_turn.raw, trigger=None, force=True, **kwargs) is None
    assert plan.derived_from([None, 5.0, 3.0, *[None] * 13]) == 3.0
    assert plan.derived_from([None] * 16) is None


def test_an_estimate_carries_a_write_only_while_it_decides() -> None:
    trigger, counter = Items(10, target=4), TokenCounter()
    two = sample_items(2)
    assert after_write(None, trigger, two, counter) is None
    assert after_write(Estimate(8), trigger, two, counter) == Estimate(10, writes=1)
    assert after_write(Estimate(9), trigger, two, counter) is None
    assert after_write(Estimate(0, writes=15), trigger, two, counter) is None


def test_a_cooldown_holds_a_summarised_view_past_the_limit_for_a_while() -> None:
    stored = sample_items(16)
    record = compaction(stored, 8)
    res = resolve([*stored, record], complete=True)
    assert isinstance(res, Resolution) and res.record is not None
    # Uncovered: 2 user messages, 2 replies, 2 outputs (the calls wait for their output).
    assert [item.get("role", item.get("type")) for item in res.raw].count("function_call") == 2
    kwargs: dict[str, Any] = {"counter": TokenCounter(), "keep_last_turns": 1, "force": False}
    trigger = Items(4, target=2)  # the view (summary + 8 items) is past it
    held = decide(res, res.raw, trigger=trigger, cooldown=7, **kwargs)
    assert held == Estimate(9)  # over the limit: the next write measures in full again
    assert isinstance(decide(res, res.raw, trigger=trigger, cooldown=6, **kwargs), Plan)
    # Without a summary in force there is nothing to cool down from.
    first = resolve(stored, complete=True)
    assert isinstance(first, Resolution)
    assert isinstance(decide(first, first.raw, trigger=trigger, cooldown=99, **kwargs), Plan)
    assert isinstance(
        decide(res, res.raw, trigger=trigger, cooldown=99, **{**kwargs, "force": True}), Plan
    )
