"""SlidingWindowSession: valid, within budget, a suffix plus pinned items, maximal; bounded
reads; hysteresis; trimming; the contract and the Runner over every backend."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from agents import Agent, RunConfig, Runner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstack import (
    CapabilityError,
    ConfigurationError,
    LayerSpec,
    PassthroughSession,
    SlidingWindowSession,
    TokenCounter,
    build_stack,
    pipeline,
)
from memstack import cache as process_cache
from memstack.history import (
    cut_points,
    history_problems,
    is_pinned,
    is_user_message,
    split_turns,
    split_units,
)
from memstack.layers.window import policy as window_policy
from memstack.testing import CONTRACT_CHECKS, InMemorySession, ScriptedModel, ToolCall, sample_items
from memstack.testing.conversation import get_weather

from ..backends.test_generic_support import PlainSession
from ..conftest import BACKENDS, Store, runner_conversation, shared_data

Item = dict[str, Any]


@cache
def counter() -> TokenCounter:
    return TokenCounter("gpt-4o")


# -- an independent oracle, over the whole history -----------------------------------------
@dataclass(frozen=True)
class Options:
    max_items: int | None = None
    max_turns: int | None = None
    max_tokens: int | None = None
    align: str = "turn"
    pinned_lookback: int = 100
    low_watermark: float | None = None

    def layer(self, inner: Any) -> SlidingWindowSession:
        return SlidingWindowSession(
            inner,
            max_items=self.max_items,
            max_turns=self.max_turns,
            max_tokens=self.max_tokens,
            counter=counter() if self.max_tokens is not None else None,
            align=self.align,  # type: ignore[arg-type]
            pinned_lookback=self.pinned_lookback,
            low_watermark=self.low_watermark,
        )


def candidates(items: Sequence[Item], align: str) -> tuple[list[int], int]:
    """Allowed window starts up to the newest user turn, and that turn's start."""
    ok = cut_points(items)
    units = [s for s in range(len(items)) if ok[s]]
    users = [s for s in units if is_user_message(items[s])]
    starts = units if align == "unit" or not users else sorted({0, *users})
    newest = users[-1] if users else units[-1]
    return [s for s in starts if s <= newest], newest


def inside_starts(items: Sequence[Item], newest: int) -> list[int]:
    """Starts inside the newest turn (an agent loop), which keep the task message."""
    if not is_user_message(items[newest]):
        return []
    ok = cut_points(items)
    return [s for s in range(newest + 1, len(items)) if ok[s]]


def view_from(items: Sequence[Item], start: int, lookback: int) -> list[Item]:
    region = max(0, len(items) - lookback)
    kept = [i for i in range(start) if i >= region and is_pinned(items[i])]
    users = [i for i in range(start) if is_user_message(items[i])]
    if users and not any(is_user_message(x) for x in items[start:]) and users[-1] not in kept:
        ok = cut_points(items)  # once, not once per item: this oracle runs ~10^5 times
        task = max(i for i, x in enumerate(items) if is_user_message(x) and ok[i])
        if task < start:
            kept = sorted([*kept, task])
    return [*(items[i] for i in kept), *items[start:]]


def measure(items: Sequence[Item], start: int, lookback: int) -> tuple[int, int, int]:
    view, suffix = view_from(items, start, lookback), list(items[start:])
    turns = sum(
        1 for t in split_turns(suffix) if any(not is_pinned(x) for x in suffix[t.start : t.stop])
    )
    if len(view) > len(suffix) and any(is_user_message(x) for x in view[: len(view) - len(suffix)]):
        turns = max(turns, 1)  # the task and the loop after it are one turn
    return len(view), turns, counter().count_items(view)


def fits(options: Options, items: Sequence[Item], start: int, scale: float = 1.0) -> bool:
    size, turns, tokens = measure(items, start, options.pinned_lookback)
    return all(
        limit is None or used <= int(limit * scale)
        for used, limit in (
            (size, options.max_items),
            (turns, options.max_turns),
            (tokens, options.max_tokens),
        )
    )


def all_starts(items: Sequence[Item], options: Options) -> list[int]:
    starts, newest = candidates(items, options.align)
    return [*starts, *inside_starts(items, newest)]


def starts_of(items: Sequence[Item], view: Sequence[Item], options: Options) -> list[int]:
    """Allowed starts whose view is ``view`` (several when only pinned items lie between)."""
    # The view ends with items[s:], so no start before len(items) - len(view) can give it.
    earliest = len(items) - len(view)
    found = [
        s
        for s in all_starts(items, options)
        if s >= earliest and view_from(items, s, options.pinned_lookback) == list(view)
    ]
    assert found, "the view is not pinned items (and the task) before an allowed start + a suffix"
    return found


def check_view(items: Sequence[Item], view: Sequence[Item], options: Options) -> int:
    """Assert every promise of the window about ``view``; return its start."""
    assert history_problems(view) == [], history_problems(view)
    if not items:
        assert view == []
        return 0
    found = starts_of(items, view, options)
    _, newest = candidates(items, options.align)
    inside = inside_starts(items, newest)
    if found[0] > newest:
        # Inside the newest turn only when that turn as a whole is over budget (with
        # hysteresis: over the low watermark when the start last moved).
        scale = options.low_watermark or 1.0
        assert not fits(options, items, newest, scale), "cut into the newest turn though it fits"
    if not fits(options, items, found[0]):
        last = inside[-1] if inside else newest
        assert last in found, "over budget although the newest unit (and task) alone would do"
    if options.low_watermark is None:
        earlier = [s for s in all_starts(items, options) if s < found[0]]
        if earlier:
            assert not fits(options, items, earlier[-1]), "not maximal: one more unit would fit"
    return found[-1]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def window_of(items: list[Item], options: Options) -> list[Item]:
    store = InMemorySession("s")
    await store.add_items(items)  # type: ignore[arg-type]
    return await options.layer(store).get_items()  # type: ignore[return-value]


# -- random histories ----------------------------------------------------------------------
words = st.text(alphabet="ab cd\nxyzé", min_size=0, max_size=30)
_ids = itertools.count()


@st.composite
def histories(draw: st.DrawFn) -> list[Item]:
    def call(reasoning: bool = False) -> list[Item]:
        cid = f"c{next(_ids)}"
        unit: list[Item] = []
        if reasoning:
            unit.append(
                {
                    "type": "reasoning",
                    "id": f"rs{cid}",
                    "summary": [{"type": "summary_text", "text": draw(words)}],
                }
            )
        unit.append(
            {
                "type": "function_call",
                "call_id": cid,
                "name": "f",
                "arguments": json.dumps({"q": draw(words)}),
            }
        )
        unit.append({"type": "function_call_output", "call_id": cid, "output": draw(words)})
        return unit

    def unit() -> list[Item]:
        kind = draw(
            st.sampled_from(
                [
                    "say",
                    "say",
                    "call",
                    "call",
                    "reasoned",
                    "parallel",
                    "think",
                    "system",
                    "developer",
                    "compaction",
                ]
            )
        )
        if kind == "say":
            return [{"role": "assistant", "content": draw(words)}]
        if kind == "call":
            return call()
        if kind == "reasoned":
            return call(reasoning=True)
        if kind == "parallel":
            a, b = call(), call()
            return [a[0], b[0], b[1], a[1]]  # outputs arrive out of order
        if kind == "think":
            return [
                {"type": "reasoning", "id": f"rs{next(_ids)}", "summary": []},
                {"role": "assistant", "content": [{"type": "output_text", "text": draw(words)}]},
            ]
        if kind == "compaction":
            return [{"type": "compaction", "encrypted_content": "opaque"}]
        return [{"role": kind, "content": draw(words)}]

    items: list[Item] = []
    if draw(st.booleans()):
        items.append({"role": "system", "content": draw(words)})
    for _ in range(draw(st.integers(0, 2))):
        items.extend(unit())  # before any user message
    for _ in range(draw(st.integers(0, 7))):
        items.append({"role": "user", "content": draw(words)})
        for _ in range(draw(st.integers(0, 4))):
            items.extend(unit())
    if items and draw(st.booleans()):
        items = items[: draw(st.integers(1, len(items)))]  # stopped mid-turn, even mid-unit
    return items


def budgets() -> st.SearchStrategy[Options]:
    limit = st.none() | st.integers(1, 12)
    return st.builds(
        Options,
        max_items=limit,
        max_turns=st.none() | st.integers(1, 4),
        max_tokens=st.none() | st.integers(1, 150),
        align=st.sampled_from(["turn", "unit"]),
        pinned_lookback=st.sampled_from([0, 3, 100]),
        low_watermark=st.none() | st.sampled_from([0.3, 0.5, 0.8]),
    ).filter(lambda o: (o.max_items, o.max_turns, o.max_tokens) != (None, None, None))


PROPERTY = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(items=histories(), options=budgets())
def test_random_histories(items: list[Item], options: Options) -> None:
    assert history_problems(items) == []
    check_view(items, run(window_of(items, options)), options)


@PROPERTY
@given(
    items=histories(),
    options=budgets(),
    pad=st.integers(0, 40),
    anchor_lookback=st.sampled_from([3, 10, 1 << 14]),
    horizon=st.sampled_from([0.5, 2, 32]),
)
def test_the_answer_does_not_depend_on_how_much_was_read(
    items: list[Item], options: Options, pad: int, anchor_lookback: int, horizon: float
) -> None:
    """A window found from a small tail read equals the one found reading everything."""

    async def both() -> tuple[list[Item], list[Item]]:
        store = InMemorySession("s")
        filler = sample_items(pad, tag="old")
        await store.add_items([*filler, *items])  # type: ignore[list-item]
        small, whole = options.layer(store), options.layer(store)
        # The smallest first read, so that most answers need several reads; and everything.
        small.min_read, whole.min_read = 1, 10**6
        with (
            mock.patch.multiple(
                window_policy, _MAX_ANCHOR_LOOKBACK=anchor_lookback, _ANCHOR_HORIZON=horizon
            ),
            mock.patch.multiple(pipeline, _FIRST_READ=1),
        ):
            process_cache.clear()  # no hint from an earlier read
            first = await small.get_items()
            process_cache.clear()
            return first, await whole.get_items()  # type: ignore[return-value]

    small, whole = run(both())
    assert small == whole


@pytest.mark.parametrize("low", [None, 0.5])
def test_a_history_that_fits_starts_at_its_oldest_item_without_a_replay(low: float | None):
    """Whole and fitting: the start is 0 at once; a tail that may not be whole reads on.

    (``test_the_answer_does_not_depend_on_how_much_was_read`` compares this shortcut, taken
    on a whole read, with the replay that a read of a shorter tail goes through.)
    """
    items = sample_items(12)
    budget = window_policy.Budget(tokens=10**6)
    lower = None if low is None else budget.scaled(low)

    def tail(complete: bool) -> window_policy.Tail:
        return window_policy.Tail(
            items, complete=complete, align="turn", pinned_lookback=100, counter=TokenCounter()
        )

    whole = tail(complete=True)
    with mock.patch.object(window_policy.Tail, "anchor", side_effect=AssertionError("replayed")):
        assert whole.plan(budget, lower) == 0
    assert whole.reach == 0  # it needed the whole tail: the next read is as long
    assert tail(complete=False).plan(budget, lower) is None  # older items may fit too


def test_a_history_that_fits_the_low_watermark_needs_no_complete_read() -> None:
    """Past the anchor lookback the replay starts within it, read whole or not: a
    history that fits the low watermark must not show more to a reader that read it all."""
    lookback = 3  # items; 1 << 14 in production
    items: list[Item] = [{"role": "user", "content": "u0"}]
    for turn in range(1, 4):
        items += [{"role": "assistant", "content": f"a{turn}-{i}"} for i in range(lookback + 2)]
        items.append({"role": "user", "content": f"u{turn}"})
    items.append({"role": "assistant", "content": "done"})
    options = Options(max_turns=10, low_watermark=0.5, pinned_lookback=0)  # 4 turns fit 5

    async def both() -> tuple[list[Item], list[Item]]:
        store = InMemorySession("s")
        await store.add_items(items)  # type: ignore[arg-type]
        small, whole = options.layer(store), options.layer(store)
        small.min_read, whole.min_read = 1, 10**6
        with (
            mock.patch.multiple(window_policy, _MAX_ANCHOR_LOOKBACK=lookback),
            mock.patch.multiple(pipeline, _FIRST_READ=1),
        ):
            process_cache.clear()
            first = await small.get_items()
            process_cache.clear()
            return first, await whole.get_items()  # type: ignore[return-value]

    small, whole = run(both())
    assert small == whole


# -- real transcripts, replayed turn by turn -----------------------------------------------
def conversations(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in shared_data(f"{name}.jsonl").read_text().splitlines()]


def checkpoints(items: list[Item], every: int) -> list[int]:
    """History lengths at which to look: before each user message, every few items, the end."""
    points = {i for i, item in enumerate(items) if is_user_message(item)}
    points |= set(range(every, len(items), every)) | {len(items)}
    return sorted(p for p in points if p > 0)


REPLAY_OPTIONS = {
    "tokens-turn": Options(max_tokens=3000),
    "tokens-unit": Options(max_tokens=6000, align="unit"),
    "items-unit-lookback": Options(max_items=15, align="unit", pinned_lookback=20),
    "turns+tokens": Options(max_turns=2, max_tokens=20_000),
    "hysteresis": Options(max_tokens=4000, align="unit", low_watermark=0.5),
}


@pytest.mark.parametrize("dataset", ["airline_tau", "swe_coding"])
async def test_replayed_transcripts(dataset: str) -> None:
    checked = 0
    for record in conversations(dataset):
        items: list[Item] = record["items"]
        store = InMemorySession(record["id"])
        windows = {name: o.layer(store) for name, o in REPLAY_OPTIONS.items()}
        written = 0
        for point in checkpoints(items, every=60 if dataset == "swe_coding" else 6):
            await store.add_items(items[written:point])  # type: ignore[arg-type]
            written = point
            history = items[:point]
            for name, window in windows.items():
                check_view(history, await window.get_items(), REPLAY_OPTIONS[name])
                checked += 1
    assert checked > 1000


# -- specific behaviour --------------------------------------------------------------------
def turn(n: int, *, calls: int = 1) -> list[Item]:
    items: list[Item] = [{"role": "user", "content": f"question {n}"}]
    for c in range(calls):
        cid = f"t{n}c{c}"
        items.append({"type": "function_call", "call_id": cid, "name": "f", "arguments": "{}"})
        items.append({"type": "function_call_output", "call_id": cid, "output": f"out {n}.{c}"})
    items.append({"role": "assistant", "content": f"answer {n}"})
    return items


async def test_agent_loop_keeps_the_task_then_the_newest_units() -> None:
    items = [*turn(1), *turn(2, calls=5)]
    task = items[4]
    view = await window_of(items, Options(max_items=3))
    assert view == [task, items[-1]]  # the task, then the newest units that fit: 2 of 3
    assert items[-3]["type"] == "function_call"
    view = await window_of(items, Options(max_items=4))
    assert view == [task, *items[-3:]]  # a call is never separated from its output
    view = await window_of(items, Options(max_tokens=5))
    assert view == [task, items[-1]]  # only the newest unit may exceed the budget


async def test_pinned_items_are_kept_and_counted() -> None:
    system = {"role": "system", "content": "You are terse."}
    items = [system, *turn(1), *turn(2), *turn(3)]
    view = await window_of(items, Options(max_items=9))
    assert view == [system, *turn(2), *turn(3)]  # 9 items: the system message counts
    view = await window_of(items, Options(max_items=9, pinned_lookback=5))
    assert view == items[-8:]  # the system message is older than the lookback


async def test_cuts_never_split_a_call_from_its_output() -> None:
    items = [*turn(1), *turn(2, calls=3)]
    for size in range(1, len(items) + 1):
        view = await window_of(items, Options(max_items=size, align="unit"))
        assert history_problems(view) == []
        assert view[0].get("type") != "function_call_output"


async def test_turn_alignment_starts_at_a_user_message() -> None:
    items = [*turn(1, calls=3), *turn(2, calls=3)]
    by_turn = await window_of(items, Options(max_items=11))
    by_unit = await window_of(items, Options(max_items=11, align="unit"))
    assert by_turn == turn(2, calls=3)
    assert by_unit == items[-11:] and by_unit[0]["type"] == "function_call"


async def test_limit_is_the_last_items_of_the_view() -> None:
    store = InMemorySession("s")
    await store.add_items(sample_items(40))  # type: ignore[arg-type]
    window = SlidingWindowSession(store, max_turns=2)
    view = await window.get_items()
    assert len(view) == 8
    assert await window.get_items(limit=3) == view[-3:]
    assert await window.get_items(limit=100) == view
    assert await window.get_items(limit=0) == []
    store.session_settings.limit = 5  # type: ignore[union-attr]
    assert await window.get_items() == view[-5:]


async def test_the_store_is_untouched_by_default() -> None:
    store = InMemorySession("s")
    items = sample_items(32)
    await store.add_items(items)  # type: ignore[arg-type]
    window = SlidingWindowSession(store, max_items=4)
    assert len(await window.get_items()) == 4
    assert await store.get_items() == items
    await window.add_items(sample_items(4, tag="new"))  # type: ignore[arg-type]
    assert await window.pop_item() == sample_items(4, tag="new")[-1]
    assert len(await store.get_items()) == 35


class CountingSession(InMemorySession):
    """Records how many items each read returned."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.reads: list[int] = []

    async def get_items(self, limit: int | None = None, **kwargs: Any) -> Any:
        items = await super().get_items(limit, **kwargs)
        self.reads.append(len(items))
        return items


@pytest.mark.parametrize(
    "options",
    [
        Options(max_items=20),
        Options(max_turns=3),
        Options(max_tokens=400, align="unit"),
        Options(max_tokens=400, low_watermark=0.5),
    ],
    ids=["items", "turns", "tokens", "hysteresis"],
)
async def test_reads_are_bounded(options: Options) -> None:
    read = {}
    for size in (100, 10_000, 100_000):
        store = CountingSession("s")
        store.rows = [json.dumps(item) for item in sample_items(size)]
        window = options.layer(store)
        await window.get_items()
        store.reads.clear()
        for _ in range(3):
            await window.get_items()
        read[size] = sum(store.reads)
    if options.low_watermark is None:  # one first read's worth, whatever the history
        assert read[100_000] == read[10_000] <= 3 * 128 and read[100] == 3 * 100
    else:  # back to the newest anchor: content-dependent, but not growing with the history
        assert read[100_000] <= 3 * 1000 and read[10_000] <= 3 * 1000


async def test_wrapper_is_forwarded() -> None:
    store = InMemorySession("s")
    await store.add_items(sample_items(8))  # type: ignore[arg-type]
    window = SlidingWindowSession(store, max_turns=1)
    marker: Any = object()
    await window.get_items(wrapper=marker)
    assert store.last_wrapper is marker


# -- hysteresis ----------------------------------------------------------------------------
async def replay_starts(
    items: list[Item], options: Options, every: int = 10**9
) -> list[tuple[int, int, int]]:
    """(history length, window start, view size) at each checkpoint."""
    store = InMemorySession("s")
    window = options.layer(store)
    seen = []
    written = 0
    for point in checkpoints(items, every):
        await store.add_items(items[written:point])  # type: ignore[arg-type]
        written = point
        view = await window.get_items()
        start = check_view(items[:point], view, options)
        # A fresh layer (another process) sees the same window.
        assert await options.layer(store).get_items() == view
        seen.append((point, start, len(view)))
    return seen


def moves(starts: list[tuple[int, int, int]]) -> int:
    return sum(1 for a, b in itertools.pairwise(starts) if a[1] != b[1])


async def test_hysteresis_keeps_the_prefix_for_several_turns() -> None:
    items = [item for n in range(60) for item in turn(n, calls=n % 3)]
    plain = Options(max_items=30)
    sticky = Options(max_items=30, low_watermark=0.5)
    plain_starts = await replay_starts(items, plain)
    sticky_starts = await replay_starts(items, sticky)
    assert moves(plain_starts) > 30
    assert moves(sticky_starts) <= moves(plain_starts) // 2
    assert max(size for _, _, size in sticky_starts) <= 30


async def test_hysteresis_on_real_transcripts_moves_less() -> None:
    total = {0.5: 0, None: 0}
    for dataset, budget in (("airline_tau", 4000), ("swe_coding", 12_000)):
        for record in conversations(dataset)[:20]:
            for low in total:
                options = Options(max_tokens=budget, align="unit", low_watermark=low)
                total[low] += moves(await replay_starts(record["items"], options, every=4))
    assert total[0.5] < total[None] * 0.5, total


async def test_hysteresis_jumps_down_to_the_low_watermark() -> None:
    store = InMemorySession("s")
    window = SlidingWindowSession(store, max_items=20, low_watermark=0.5, align="unit")
    forced = unforced = 0
    start = 0
    for i in range(150):
        await store.add_items([{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}])
        view = await window.get_items()
        assert len(view) <= 20
        new_start = i + 1 - len(view)
        if new_start != start:
            if i + 1 - start > 20:  # the old start no longer fits: drop to the low watermark
                assert len(view) <= 10
                forced += 1
            else:  # a new anchor restarted the replay
                unforced += 1
        start = new_start
    assert forced >= 10 and unforced <= forced // 4


# -- trimming ------------------------------------------------------------------------------
async def test_trim_deletes_what_the_window_dropped(store: Store) -> None:
    session = store.open(f"trim-{uuid.uuid4().hex[:8]}")
    system = {"role": "system", "content": "Be brief."}
    await session.add_items([system, *sample_items(40)])  # type: ignore[list-item]
    window = SlidingWindowSession(session, max_turns=2, trim=True)
    view = await window.get_items()
    assert view == [system, *sample_items(40)[-8:]]
    assert await session.get_items() == view  # the store is now the window
    assert await window.get_items() == view
    await session.clear_session()


async def test_trim_with_hysteresis_writes_only_on_jumps() -> None:
    trims = {}
    for low in (None, 0.5):
        store = InMemorySession("s")
        window = SlidingWindowSession(store, max_items=20, low_watermark=low, trim=True)
        trims[low] = 0
        for n in range(30):
            before = len(store.rows)
            await window.add_items(turn(n))  # type: ignore[arg-type]
            view = await window.get_items()
            assert await store.get_items() == view and len(view) <= 20
            trims[low] += len(store.rows) < before + 4
    assert trims[None] >= 20 and trims[0.5] <= trims[None] // 2, trims


async def test_trim_discards_a_stale_plan() -> None:
    class Interfering(InMemorySession):
        async def get_items(self, limit: int | None = None, **kwargs: Any) -> Any:
            items = await super().get_items(limit, **kwargs)
            self.rows[0] = json.dumps({"role": "user", "content": "rewritten elsewhere"})
            return items

    store = Interfering("s")
    await store.add_items(sample_items(20))  # type: ignore[arg-type]
    await SlidingWindowSession(store, max_turns=1, trim=True).get_items()
    assert len(store.rows) == 20  # the oldest item changed after the read: nothing deleted


def test_trim_needs_an_atomic_store() -> None:
    with pytest.raises(CapabilityError, match="trim=True needs a store that deletes atomically"):
        SlidingWindowSession(PlainSession(), max_items=5, trim=True)  # type: ignore[arg-type]
    SlidingWindowSession(PlainSession(), max_items=5)  # type: ignore[arg-type]  # a view is fine


# -- options -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "set at least one of max_items, max_turns, max_tokens"),
        ({"max_items": 0}, "max_items must be None or an int >= 1, not 0"),
        ({"max_turns": 2.5}, "max_turns must be None or an int >= 1"),
        ({"max_tokens": True}, "max_tokens must be None or an int >= 1"),
        ({"max_items": 5, "model": "gpt-4o"}, "model and counter only apply with max_tokens"),
        ({"max_tokens": 5, "model": "gpt-4o", "counter": TokenCounter()}, "model or counter"),
        ({"max_tokens": 5, "counter": object()}, "count_item"),
        ({"max_items": 5, "align": "word"}, "align must be 'turn' or 'unit'"),
        ({"max_items": 5, "low_watermark": 1.0}, "low_watermark must be None or a number with 0"),
        ({"max_items": 5, "low_watermark": 0}, "0 < x < 1"),
        ({"max_items": 5, "pinned_lookback": -1}, "pinned_lookback must be an int >= 0"),
        ({"max_items": 5, "trim": "yes"}, "trim must be True or False"),
    ],
)
def test_options_are_validated(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        SlidingWindowSession(InMemorySession("s"), **options)
    assert caught.value.layer == "SlidingWindowSession"


async def test_injected_counter_is_used() -> None:
    class Fixed:
        def count_item(self, item: Any) -> int:
            return 10

    store = InMemorySession("s")
    await store.add_items(sample_items(20))  # type: ignore[arg-type]
    window = SlidingWindowSession(store, max_tokens=45, counter=Fixed(), align="unit")
    view = await window.get_items()
    assert len(view) == 4


def test_repr_and_stack_builder() -> None:
    stack = build_stack(
        InMemorySession("s"), [LayerSpec("window", {"max_tokens": 8000, "low_watermark": 0.6})]
    )
    assert repr(stack) == (
        "InMemorySession(session_id='s') → SlidingWindowSession(max_tokens=8000, "
        "align='turn', low_watermark=0.6, encoding='o200k_base')"
    )
    with pytest.raises(ConfigurationError, match="unknown option"):
        build_stack(InMemorySession("s"), [LayerSpec("window", {"max_itemz": 3})])


# -- the contract and the Runner over every backend ----------------------------------------
GENEROUS = {"max_items": 10_000, "max_turns": 1_000, "max_tokens": 10_000_000}
STACKS = {
    "window": [LayerSpec("window", GENEROUS)],
    "window over passthrough": [LayerSpec("passthrough"), LayerSpec("window", GENEROUS)],
    "passthrough over window": [LayerSpec("window", GENEROUS), LayerSpec("passthrough")],
}


@pytest.mark.parametrize("stack", list(STACKS))
@pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda check: check.__name__)
async def test_contract(store: Store, stack: str, check: Any) -> None:
    await check(lambda session_id: build_stack(store.open(session_id), STACKS[stack]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_runner_conversation(
    backend: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runner_conversation(
        backend,
        tmp_path,
        caplog,
        lambda store: PassthroughSession(SlidingWindowSession(store, **GENEROUS)),
    )


async def test_runner_sends_the_model_only_the_window() -> None:
    model = ScriptedModel(
        [
            ToolCall("get_weather", {"city": "Oslo"}),
            "Oslo: rain",
            ToolCall("get_weather", {"city": "Rome"}),
            "Rome: sun",
            "You're welcome.",
        ]
    )
    agent = Agent(name="w", instructions="Be brief.", model=model, tools=[get_weather])
    store = InMemorySession("runner")
    session = SlidingWindowSession(store, max_turns=1)
    config = RunConfig(tracing_disabled=True)
    for text in ("Weather in Oslo?", "And Rome?", "Thanks"):
        await Runner.run(agent, text, session=session, run_config=config)
    last = model.inputs[-1]
    sent = json.dumps(last, ensure_ascii=False)
    assert "Oslo" not in sent  # the first turn is outside the window
    assert "21°C and sun" in sent  # the previous turn, with its tool output
    assert last[-1].get("content") == "Thanks"
    assert history_problems(last) == []
    assert len(await store.get_items()) == 10  # the store keeps everything


def airline_sample() -> list[list[Item]]:
    return [record["items"] for record in conversations("airline_tau")[:15]]


@pytest.mark.parametrize(
    "options",
    [
        {"max_tokens": 1500},
        {"max_turns": 2},
        {"max_items": 12, "align": "unit"},
        {"max_tokens": 1500, "low_watermark": 0.6},
    ],
    ids=str,
)
async def test_in_run_filter_is_the_same_window(options: dict[str, Any]) -> None:
    """``filter_model_input`` (used inside a run) shows what ``get_items`` shows."""
    for items in airline_sample():
        window = SlidingWindowSession(InMemorySession("in-run"), **options)
        await window.add_items(items)
        assert window.filter_model_input(items) == await window.get_items()


async def test_budget_holds_inside_agent_loops_on_coding_transcripts() -> None:
    """max_tokens=8000 on real coding runs: every view minus its newest unit fits, both
    through get_items and through the in-run filter (one task, then 41-145 tool steps)."""
    budget, checked, largest = 8000, 0, 0
    for record in conversations("swe_coding"):
        items: list[Item] = record["items"]
        store = InMemorySession(record["id"])
        window = Options(max_tokens=budget).layer(store)
        written = 0
        for point in checkpoints(items, every=20):
            await store.add_items(items[written:point])  # type: ignore[arg-type]
            written = point
            for view in (await window.get_items(), window.filter_model_input(items[:point])):
                assert history_problems(view) == []
                newest = split_units(view)[-1]
                without = counter().count_items(view) - counter().count_items(view[newest.start :])
                assert without <= budget, (record["id"], point, without)
                largest = max(largest, counter().count_items(view))
                checked += 1
    assert checked > 500
    # Before the agent-loop rule the newest turn was kept whole: 27,000 tokens and more.
    assert largest < 3 * budget


async def test_layers_above_read_the_window_through_its_capabilities() -> None:
    """A view's adapter is the store's for every change, but reads the tail through the view."""
    from memstack import capabilities_of

    store = InMemorySession("view-caps")
    window = SlidingWindowSession(store, max_items=4, align="unit")
    await window.add_items(sample_items(8))
    caps = capabilities_of(window)
    assert repr(caps) == repr(capabilities_of(store)) and caps.counts_cheaply
    tail = await caps.read_tail(100)
    assert tail.items == await window.get_items() and len(tail.items) == 4
    assert tail.written_at == [None] * 4
    assert await caps.count() == 8  # the store's count, as before
    assert await caps.delete_oldest(2) == 2 and len(store.rows) == 6


@pytest.mark.parametrize("held", [120, 400])
async def test_a_first_read_counts_only_the_newest_items_it_needs(
    sqlite_store: Store, held: int
) -> None:
    """Over a long history, a first read (the process cache empty) counts tokens newest
    first and stops once they pass the budget: it never tokenises the whole history to
    learn that the whole does not fit (a history read whole, as a first read of a small
    session is, included)."""
    asked: list[int] = []

    class Recording:
        def count_item(self, item: Any) -> int:
            asked.append(1)
            return 10

    store = sqlite_store.open("s")
    await store.add_items(sample_items(held))  # type: ignore[arg-type]
    window = SlidingWindowSession(store, max_tokens=200, counter=Recording(), align="unit")
    process_cache.clear()
    view = await window.get_items()
    assert len(view) == 20 and view == (await store.get_items())[-20:]
    # Two passes ask this counter (uncached, as any counter not a TokenCounter): whether
    # the whole fits, then the plan; each counts the window and the item that passes it.
    assert len(asked) <= 2 * (len(view) + 1), len(asked)
