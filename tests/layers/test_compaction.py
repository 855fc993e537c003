"""CompactionSession: contract and Runner over every backend, compaction that fires, failures,
concurrent writers, rewrite mode, TTL lifetimes, options."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agents.memory import Session

from memstack import (
    CapabilityError,
    CompactionSession,
    CompactionWarning,
    ConfigurationError,
    ItemValidationError,
    LayerSpec,
    SummarizerError,
    build_stack,
    capabilities_of,
)
from memstack.base import SessionLayer
from memstack.compaction import (
    ExtractiveSummarizer,
    Items,
    Mask,
    OpenAIChatSummarizer,
    ResponsesCompact,
    Summarize,
    SummaryRequest,
    Tokens,
    Turns,
    input_filter,
)
from memstack.compaction.records import is_record, parse_record
from memstack.compaction.triggers import Estimate
from memstack.crypto import generate_key
from memstack.history import history_problems, is_pinned
from memstack.testing import CONTRACT_CHECKS, FakeClock, InMemorySession, sample_items

from ..backends.test_generic_support import PlainSession
from ..conftest import BACKENDS, Store, runner_conversation
from ..fake_openai_server import CHAT, COMPACT, FakeOpenAI, Garbage, Hang, Status

KEY = generate_key()


FIELDS = Mask(default_template="[answered earlier]", keep_fields={"get_order": ["items"]})


def summarize(max_tokens: int = 300) -> Summarize:
    return Summarize(ExtractiveSummarizer(), max_tokens=max_tokens)


# A trigger that never fires on the contract's small histories, and one that does.
QUIET: dict[str, Any] = {"strategy": [Mask(), summarize()], "trigger": Tokens(1_000_000)}
FIRING: dict[str, Any] = {"strategy": [Mask(), summarize()], "trigger": Items(12, target=4)}

STACKS: dict[str, Callable[[dict[str, Any]], list[LayerSpec]]] = {
    "alone": lambda options: [LayerSpec("compaction", options)],
    "stacked": lambda options: [
        LayerSpec("encrypted", {"key": KEY}),
        LayerSpec("compaction", options),
        LayerSpec("passthrough"),
    ],
}


async def raw_items(session: Session) -> list[dict[str, Any]]:
    """What the layer below the compaction layer holds, records left out."""
    layer = session if isinstance(session, CompactionSession) else None
    if layer is None:
        layer = session.find(CompactionSession)  # type: ignore[attr-defined]
    assert layer is not None
    return [item for item in await layer.inner.get_items() if not is_record(item)]


async def records(layer: CompactionSession) -> list[dict[str, Any]]:
    return [item for item in await layer.inner.get_items() if is_record(item)]


# -- the contract ----------------------------------------------------------------------------
@pytest.mark.parametrize("stack", list(STACKS))
@pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda check: check.__name__)
async def test_contract(store: Store, stack: str, check: Any) -> None:
    await check(lambda session_id: build_stack(store.open(session_id), STACKS[stack](QUIET)))


@pytest.mark.parametrize("stack", list(STACKS))
async def test_compaction_that_fires_keeps_the_session_contract(store: Store, stack: str) -> None:
    """The contract's promises that survive compaction, with the trigger firing."""
    session_id = f"fire-{uuid.uuid4().hex[:12]}"
    session = build_stack(store.open(session_id), STACKS[stack](FIRING))
    layer = session.find(CompactionSession)  # type: ignore[attr-defined]
    items = sample_items(40)
    for start in range(0, 40, 4):  # one turn per add_items, as the Runner writes
        await session.add_items(items[start : start + 4])
        view = await session.get_items()
        assert history_problems(view) == []
        assert len(view) <= 12  # within the trigger's budget after every write
    view = await session.get_items()
    summary, *tail = view
    assert is_pinned(summary) and summary["role"] == "developer"
    assert "m-35 answer" in summary["content"]  # the extract reaches the covered end
    assert tail == items[-4:]
    # Non-destructive: every item is still stored, in order, plus the records.
    assert await raw_items(session) == items
    assert len(await records(layer)) >= 1
    # limit: the last n items of the view.
    assert await session.get_items(limit=3) == view[-3:]
    assert await session.get_items(limit=0) == []
    # Another session over the same store sees the same view; other sessions stay apart.
    again = build_stack(store.open(session_id), STACKS[stack](FIRING))
    assert await again.get_items() == view
    other = build_stack(store.open(f"other-{uuid.uuid4().hex[:12]}"), STACKS[stack](FIRING))
    await other.add_items(sample_items(3, tag="o"))
    assert await other.get_items() == sample_items(3, tag="o")
    assert await session.get_items() == view
    # pop_item undoes the compaction it meets and returns real items, newest first.
    assert await session.pop_item() == items[-1]
    assert await raw_items(session) == items[:-1]
    assert await session.get_items() != view
    assert history_problems(await session.get_items()) == []
    for expected in reversed(items[-8:-1]):
        assert await session.pop_item() == expected
    assert await raw_items(session) == items[:-8]
    await session.clear_session()
    assert await session.get_items() == []
    assert await layer.inner.get_items() == []
    await other.clear_session()


@pytest.mark.parametrize("stack", list(STACKS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_runner_conversation(
    backend: str, stack: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runner_conversation(
        backend, tmp_path, caplog, lambda store: build_stack(store, STACKS[stack](QUIET))
    )


class Counting(InMemorySession):
    """Records the ``limit`` of every read."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.limits: list[int | None] = []

    async def get_items(self, limit: int | None = None, **kwargs: Any) -> list[Any]:
        self.limits.append(limit)
        return await super().get_items(limit, **kwargs)


class CountingPlain(PlainSession):
    """A store without capabilities (it cannot count), recording its reads."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.limits: list[int | None] = []

    async def get_items(self, limit: int | None = None) -> list[Any]:
        self.limits.append(limit)
        return await super().get_items(limit)


@pytest.mark.parametrize("store", [Counting, CountingPlain])
async def test_reads_stay_bounded_on_a_long_history(store: Any) -> None:
    inner = store("long")
    session = CompactionSession(inner, strategy=summarize(), trigger=Items(40, target=12))
    items = sample_items(2000)
    for start in range(0, 2000, 4):
        await session.add_items(items[start : start + 4])
    inner.limits.clear()
    view = await session.get_items()
    assert len(view) <= 40 and view[-4:] == items[-4:]
    # One read of the tail since the last compaction (and a count where there is one).
    assert len(inner.limits) == 1 and inner.limits[0] <= 128  # a first read, not 2000
    assert await raw_items(session) == items


async def test_a_write_under_the_trigger_reads_nothing() -> None:
    """One view read per turn: the trigger check after a write reuses the last measure."""
    inner = Counting("turns")
    session = CompactionSession(inner, strategy=summarize(), trigger=Items(60, target=20))
    items = sample_items(400)
    await session.add_items(items[:4])  # the first write measures the view once
    reads_per_write = []
    for start in range(4, 400, 4):
        inner.limits.clear()
        await session.add_items(items[start : start + 4])
        reads_per_write.append(len(inner.limits))
        assert len(await session.get_items()) <= 60  # the trigger still keeps its limit
    # Full checks only when the estimate reaches the limit or every 16 writes.
    assert reads_per_write.count(0) >= len(reads_per_write) * 3 // 4, reads_per_write
    assert await records(session)  # and it did compact


async def test_another_process_writes_are_caught_by_the_periodic_full_check() -> None:
    store = InMemorySession("shared")
    ours = CompactionSession(store, strategy=summarize(), trigger=Items(40, target=12))
    theirs = CompactionSession(store, strategy=summarize(), trigger=None)  # never compacts
    await ours.add_items(sample_items(4, tag="a"))
    await theirs.add_items(sample_items(100, tag="b"))  # far over the limit, unseen by ours
    for n in range(Estimate.FULL_CHECK_EVERY):
        await ours.add_items([{"role": "user", "content": f"ping {n}"}])
    assert len(await ours.get_items()) <= 40


# -- failures --------------------------------------------------------------------------------
@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as running:
        yield running


def with_server(server: FakeOpenAI, timeout: float = 60.0, **options: Any) -> CompactionSession:
    # The timeout stands for "should not hang": generous, never what a test checks.
    summarizer = OpenAIChatSummarizer(model="m", client=server.client())
    return CompactionSession(
        InMemorySession("s"),
        strategy=Summarize(summarizer, timeout=timeout),
        trigger=Items(12, target=4),
        **options,
    )


@pytest.mark.parametrize(
    ("failure", "seconds"),
    # Only where the endpoint hangs (60 s) is the timeout the failure: 2 s, far from both.
    [(Status(500), 60.0), (Hang(60), 2.0), (Garbage(), 60.0)],
    ids=["500", "hang", "garbage"],
)
async def test_failing_summarizer_leaves_history_intact_with_a_typed_error(
    server: FakeOpenAI, failure: Any, seconds: float
) -> None:
    session = with_server(server, seconds, on_error="raise")
    items = sample_items(16)
    await session.add_items(items[:12])  # at the limit: no call yet
    assert server.bodies(CHAT) == []
    server.chat.append(failure)
    with pytest.raises(SummarizerError) as caught:
        await session.add_items(items[12:])
    assert caught.value.__cause__ is not None
    assert await session.get_items() == items  # stored, uncompacted, no summary
    assert await records(session) == []
    # The next write retries; a working endpoint then compacts.
    await session.add_items(sample_items(4, tag="n"))
    view = await session.get_items()
    assert view[0]["role"] == "developer" and "tool calls so far" in view[0]["content"]
    assert len(server.bodies(CHAT)) == 2


async def test_failing_summarizer_warns_by_default(
    server: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    session = with_server(server)
    items = sample_items(16)
    server.chat.append(Status(500))
    with pytest.warns(CompactionWarning, match="history left as is"):
        await session.add_items(items)
    assert await session.get_items() == items
    assert "compaction failed" in caplog.text
    server.chat.append(Status(500))
    with pytest.raises(SummarizerError):  # an explicit compact() always raises
        await session.compact()
    assert await session.get_items() == items and await records(session) == []


async def test_a_summary_that_reads_error_is_never_stored() -> None:
    class Apologetic:
        async def summarize(self, request: SummaryRequest) -> str:
            return "Error: I could not summarise this conversation."

    session = CompactionSession(
        InMemorySession("s"),
        strategy=Summarize(Apologetic()),
        trigger=Items(12, target=4),
        on_error="raise",
    )
    with pytest.raises(SummarizerError, match="error message"):
        await session.add_items(sample_items(16))
    assert await records(session) == []


async def test_responses_compaction_through_the_layer(server: FakeOpenAI) -> None:
    strategy = ResponsesCompact(model="gpt-4.1", client=server.client(), timeout=60)
    session = CompactionSession(
        InMemorySession("r"), strategy=strategy, trigger=Items(12, target=4)
    )
    items = sample_items(16)
    await session.add_items(items)
    view = await session.get_items()
    users = [i for i in items[:12] if i.get("role") == "user"]
    assert [i["content"][0]["text"] for i in view[:3]] == [u["content"] for u in users]
    assert view[3]["type"] == "compaction" and view[4:] == items[12:]
    assert history_problems(view) == []
    # The next compaction sends what stood for the older history along with the new items.
    more = sample_items(12, tag="n")
    await session.add_items(more)
    second = server.bodies(COMPACT)[-1]["input"]
    assert second[:4] == view[:4] and second[4:] == [*items[12:], *more[:8]]


@pytest.mark.parametrize(
    ("trigger", "limit"),
    [(Turns(3, target=1), 3), (Tokens(250, target=80), 250)],
    ids=["turns", "tokens"],
)
async def test_turn_and_token_triggers(trigger: Any, limit: int) -> None:
    session = CompactionSession(
        InMemorySession("t"), strategy=summarize(100), trigger=trigger, model="gpt-4o"
    )
    counter = session.counter
    items = sample_items(40)
    for start in range(0, 40, 4):
        await session.add_items(items[start : start + 4])
        view = await session.get_items()
        measure = sum(trigger.weights(view, counter))
        assert measure <= limit, (start, measure)
    assert view[0]["role"] == "developer" and view[-4:] == items[-4:]


# -- concurrent writers and stale compactions -------------------------------------------------
class Gate:
    """A summariser that waits until the test lets it answer."""

    def __init__(self) -> None:
        self.called = asyncio.Event()
        self.release = asyncio.Event()
        self.requests: list[SummaryRequest] = []

    async def summarize(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        self.called.set()
        await self.release.wait()
        return f"summary of {len(request.items)} items"


def gated(store: Session, gate: Gate, **options: Any) -> CompactionSession:
    return CompactionSession(
        store, strategy=Summarize(gate), trigger=Items(12, target=4), **options
    )


async def test_writes_during_a_compaction_are_never_covered_or_lost(store: Store) -> None:
    session_id = f"concurrent-{uuid.uuid4().hex[:12]}"
    gate = Gate()
    session = gated(store.open(session_id), gate)
    neighbour = gated(store.open(session_id), Gate())  # another process on the same history
    items = sample_items(16)
    compaction = asyncio.create_task(session.add_items(items))
    await gate.called.wait()
    late = sample_items(8, tag="late")
    await session.add_items(late[:4])  # same layer, while its compaction waits
    await neighbour.inner.add_items(late[4:])  # another writer, below the layer
    gate.release.set()
    await compaction
    view = await session.get_items()
    assert view[0]["content"].endswith("summary of 12 items")
    assert view[1:] == [*items[12:], *late]
    assert await raw_items(session) == [*items, *late]
    assert history_problems(view) == []
    await session.clear_session()


@pytest.mark.parametrize("change", ["pop", "clear", "other compaction"])
async def test_a_compaction_of_a_history_that_changed_is_discarded(change: str) -> None:
    store = InMemorySession("s")
    gate = Gate()
    session = gated(store, gate, on_error="raise")
    items = sample_items(16)
    await session.inner.add_items(items)
    task = asyncio.create_task(session.compact())
    await gate.called.wait()
    if change == "pop":
        for _ in range(13):
            await store.pop_item()  # the newest 12 covered items are gone
    elif change == "clear":
        await store.clear_session()
        await store.add_items(sample_items(16, tag="new"))
    else:
        other = gated(store, Gate())
        other.compactor.summarizer.release.set()  # type: ignore[union-attr]
        assert await other.compact() is not None
    before = list(store.rows)
    gate.release.set()
    assert await task is None
    assert store.rows == before  # nothing written


# -- rewrite mode ------------------------------------------------------------------------------
async def test_rewrite_mode_replaces_covered_items_atomically(store: Store) -> None:
    inner = store.open(f"rewrite-{uuid.uuid4().hex[:12]}")
    if not capabilities_of(inner).atomic:
        with pytest.raises(CapabilityError, match="atomically"):
            gated(inner, Gate(), mode="rewrite")
        return
    gate = Gate()
    session = gated(inner, gate, mode="rewrite")
    items = [{"role": "system", "content": "policy"}, *sample_items(16)]
    task = asyncio.create_task(session.add_items(items))
    await gate.called.wait()
    late = sample_items(4, tag="late")
    await inner.add_items(late)  # appended while summarising: not among the replaced
    gate.release.set()
    await task
    stored = await inner.get_items()
    record = parse_record(stored[0])
    assert record.anchors is None and record.count == 13
    assert stored[1:] == [*items[13:], *late]
    view = await session.get_items()
    assert view[0] == {"role": "system", "content": "policy"}  # pinned, kept verbatim
    assert view[1]["content"].endswith("summary of 12 items")
    assert view[2:] == [*items[13:], *late]
    # pop_item: real items first, then what the record stands for, newest first.
    for expected in reversed(view[2:]):
        assert await session.pop_item() == expected
    assert await session.pop_item() == view[1]
    assert await session.get_items() == view[:1]
    assert await session.pop_item() == view[0]
    assert await session.get_items() == [] and await inner.get_items() == []


async def test_rewrite_mode_discards_a_compaction_of_a_changed_history() -> None:
    store = InMemorySession("s")
    gate = Gate()
    session = gated(store, gate, mode="rewrite")
    await store.add_items(sample_items(16))
    task = asyncio.create_task(session.compact())
    await gate.called.wait()
    for _ in range(8):  # into the covered items, then new ones in their place
        await store.pop_item()
    await store.add_items(sample_items(8, tag="x"))
    before = list(store.rows)
    gate.release.set()
    assert await task is None
    assert store.rows == before


def test_rewrite_mode_needs_an_atomic_store() -> None:
    with pytest.raises(CapabilityError, match="mode='rewrite'"):
        CompactionSession(PlainSession(), strategy=summarize(), mode="rewrite")  # type: ignore[arg-type]


# -- TTL: a summary does not outlive what it covers ------------------------------------------
async def test_summary_expires_with_the_oldest_item_it_covers() -> None:
    from memstack.layers import TTLSession
    from memstack.layers.ttl.record import read_record

    clock = FakeClock()
    store = InMemorySession("s")
    ttl = TTLSession(store, ttl=1000, clock=clock, purge_every=None)
    session = CompactionSession(ttl, strategy=summarize(), trigger=Items(12, target=4))
    items = sample_items(16)
    for start in range(0, 16, 4):  # one turn every 100 s
        await session.add_items(items[start : start + 4])
        clock.tick(100)
    stored = [read_record(value) for value in await store.get_items()]
    [record] = [stamp for stamp in stored if is_record(stamp.item)]
    assert record.anchor == stored[0].anchor  # stamped with the oldest covered item's time
    assert record.written > record.anchor
    view = await session.get_items()
    assert view[0]["role"] == "developer" and view[1:] == items[12:]
    clock.tick(1000 - 400)  # the first turn (and the summary built on it) expires now
    view = await session.get_items()
    assert all(not is_pinned(item) for item in view)  # no summary any more…
    assert view == items[4:]  # …and nothing that is still alive is hidden


async def test_the_recommended_stack_dates_summaries_through_encryption() -> None:
    """store → TTL → Encrypted → Compaction → Window: the sealed record still expires with
    its oldest source, and the window and the input filter see summary + tail."""
    from memstack.layers import SlidingWindowSession, TTLSession

    clock = FakeClock()
    store = InMemorySession("recommended")
    stack = build_stack(
        store,
        [
            LayerSpec(TTLSession, {"ttl": 1000, "clock": clock, "purge_every": None}),
            LayerSpec("encrypted", {"key": KEY}),
            LayerSpec("compaction", FIRING),
            LayerSpec(SlidingWindowSession, {"max_items": 10}),
        ],
    )
    items = sample_items(16)
    for start in range(0, 16, 4):
        await stack.add_items(items[start : start + 4])
        clock.tick(100)
    assert "m-0 question" not in str(store.rows)  # sealed at rest, summary included
    view = await stack.get_items()
    assert view[0]["role"] == "developer" and view[1:] == items[12:]
    assert repr(input_filter(stack)) == (
        "ModelInputFilter(CompactionSession → SlidingWindowSession)"
    )
    clock.tick(600)  # the first turn expires: so does the summary built on it
    compaction = stack.find(CompactionSession)  # type: ignore[attr-defined]
    assert await compaction.get_items() == items[4:]  # no summary, nothing live hidden
    assert await stack.get_items() == items[8:]  # the window: whole turns within 10 items


# -- options, repr, records from users -------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"strategy": "summarize"}, "strategy"),
        ({"strategy": []}, "strategy"),
        ({"strategy": [Mask(), Mask()]}, "at most one Mask"),
        ({"strategy": Mask(), "trigger": Items(10)}, "trigger needs"),
        ({"strategy": summarize(), "trigger": 100}, "trigger"),
        ({"strategy": summarize(), "keep_last_turns": -1}, "keep_last_turns"),
        ({"strategy": summarize(), "mode": "destroy"}, "mode"),
        ({"strategy": Mask(), "mode": "rewrite"}, "mode='rewrite'"),
        ({"strategy": summarize(), "on_error": "ignore"}, "on_error"),
        ({"strategy": summarize(), "counter": object()}, "counter"),
        ({"strategy": summarize(2000), "trigger": Tokens(3000, target=1500)}, "max_tokens"),
        ({"strategy": [Mask(), summarize()], "carry_fields": True}, "carry_fields needs"),
        ({"strategy": [FIELDS, summarize()], "carry_fields": 1}, "carry_fields"),
        ({"strategy": [FIELDS, summarize()], "carry_beyond_turn": ["get_order"]}, "needs carry"),
        (
            {"strategy": [FIELDS, summarize()], "carry_fields": True, "carry_beyond_turn": ["x"]},
            "without keep_fields",
        ),
        (
            {"strategy": [FIELDS, summarize()], "carry_fields": True, "carry_beyond_turn": "x"},
            "carry_beyond_turn",
        ),
        ({"strategy": [FIELDS, summarize()], "carry_turn_fields": {"s": ["a"]}}, "needs carry"),
        (
            {"strategy": [FIELDS, summarize()], "carry_fields": True, "carry_turn_fields": ["a"]},
            "keep_fields must map",
        ),
        ({"strategy": summarize(), "cooldown": 2}, "cooldown needs a trigger"),
        ({"strategy": summarize(), "trigger": Items(10), "cooldown": -1}, "cooldown"),
    ],
)
def test_options_are_validated(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigurationError, match=field):
        CompactionSession(InMemorySession("s"), **options)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Tokens(100, target=100), "target"),
        (lambda: Items(10, target=0), "target"),
        (lambda: Turns(1), "limit"),
        (lambda: Tokens(True), "limit"),  # type: ignore[arg-type]
    ],
)
def test_trigger_options_are_validated(make: Callable[[], Any], field: str) -> None:
    with pytest.raises(ConfigurationError, match=field):
        make()


def test_refuses_a_server_side_conversation_store() -> None:
    from agents.memory import OpenAIConversationsSession

    server_side = OpenAIConversationsSession(conversation_id="conv_1", openai_client=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="Conversations API"):
        CompactionSession(server_side, strategy=summarize())
    assert CompactionSession(server_side, strategy=Mask()).mask is not None  # a view only


def test_stack_builder_and_repr_show_the_configuration() -> None:
    stack = build_stack(InMemorySession("s"), [LayerSpec("compaction", FIRING)])
    assert isinstance(stack, CompactionSession)
    assert repr(stack) == (
        "InMemorySession(session_id='s') → CompactionSession(strategy=[Mask(), Summarize("
        "ExtractiveSummarizer(), max_tokens=300)], trigger=Items(limit=12, target=4), "
        "keep_last_turns=1)"
    )
    responses = CompactionSession(
        InMemorySession("s"),
        strategy=ResponsesCompact(model="gpt-4.1", client=object()),  # type: ignore[arg-type]
    )
    assert "ResponsesCompact(model='gpt-4.1')" in repr(responses)


def tool_pair(call_id: str, name: str, arguments: str, answer: Any) -> list[dict[str, Any]]:
    """One call and its JSON answer, as the Runner writes them."""
    return [
        {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments},
        {"type": "function_call_output", "call_id": call_id, "output": json.dumps(answer)},
    ]


def order_lookup(n: int) -> list[dict[str, Any]]:
    answer = {"items": [f"item-{n}"], "address": "Storgata 1, Oslo " * 20}
    return tool_pair(f"o{n}", "get_order", f'{{"id": "A{n}"}}', answer)


async def test_carried_key_fields_stand_after_the_summary_until_the_user_speaks() -> None:
    session = CompactionSession(
        InMemorySession("s"),
        strategy=[FIELDS, summarize()],
        trigger=Items(6, target=2),
        carry_fields=True,
        cooldown=2,
    )
    assert "carry_fields=True, cooldown=2" in repr(session)
    await session.add_items([{"role": "user", "content": "check orders 1 to 6"}])
    for n in range(1, 7):  # one agent loop: the Runner writes each call with its output
        await session.add_items(order_lookup(n))
        view = await session.get_items()
        assert history_problems(view) == [] and await session.get_items() == view
    records = [parse_record(i) for i in await session.inner.get_items() if is_record(i)]
    assert len(records) >= 2  # compactions inside the loop, each after the cooldown
    carried = [i for i in view if i.get("type") == "function_call_output" and "Kept" in i["output"]]
    assert [i["call_id"] for i in carried] == [f"o{n}" for n in range(1, len(carried) + 1)]
    assert carried and carried[0]["output"] == (
        '[answered earlier] Kept from it, verbatim:\n"items": ["item-1"]'
    )
    summary = next(i for i, item in enumerate(view) if item.get("role") == "developer")
    assert view[0]["role"] == "user" and summary < view.index(carried[0])
    # The user speaks: the next compaction summarises what was carried.
    await session.add_items([{"role": "assistant", "content": "All checked."}])
    await session.add_items([{"role": "user", "content": "thanks"}, *order_lookup(7)])
    await session.add_items([{"role": "assistant", "content": "Anything else?"}])
    view = await session.get_items()
    assert history_problems(view) == []
    assert not any("Kept" in str(item.get("output", "")) for item in view)


async def test_pairs_carried_for_good_stand_before_the_summary_so_the_prefix_stays() -> None:
    lookups = Mask(
        default_template="[answered earlier]",
        keep_fields={"get_order": ["items"], "get_user": ["cards"]},
    )
    session = CompactionSession(
        InMemorySession("s"),
        strategy=[lookups, summarize()],
        trigger=Items(6, target=2),
        carry_fields=True,
        carry_beyond_turn=["get_user"],
        cooldown=2,
    )
    profile = json.dumps({"cards": ["visa_7447"], "address": "Storgata 1, Oslo " * 20})
    await session.add_items(
        [
            {"role": "user", "content": "I am user u1"},
            {"type": "function_call", "call_id": "u1", "name": "get_user",
             "arguments": '{"id": "u1"}'},
            {"type": "function_call_output", "call_id": "u1", "output": profile},
            {"role": "assistant", "content": "Welcome back."},
            {"role": "user", "content": "check orders 1 to 8"},
        ]
    )  # fmt: skip
    views = []
    for n in range(1, 9):
        await session.add_items(order_lookup(n))
        views.append(await session.get_items())
        assert history_problems(views[-1]) == []
    records = [parse_record(i) for i in await session.inner.get_items() if is_record(i)]
    assert len(records) >= 3
    heads = [v for v in views if any(i.get("role") == "developer" for i in v)]
    for view in heads:
        pair = next(i for i, item in enumerate(view) if item.get("call_id") == "u1")
        summary = next(i for i, item in enumerate(view) if item.get("role") == "developer")
        assert pair < summary  # the profile's pair first, then the summary
    # From one compaction to the next in the turn, the view up to the summary is the same.
    starts = [v[: next(i for i, item in enumerate(v) if item.get("role") == "developer")]
              for v in heads]  # fmt: skip
    assert len({json.dumps(start) for start in starts[1:]}) == 1


def search(n: int) -> list[dict[str, Any]]:
    # Each flight is longer than a part (160 characters): cut into its members.
    flights = [
        {"flight_number": f"HAT{n}{k}", "origin": "DTW", "status": "available",
         "seats": {"economy": k}, "prices": {"economy": 100 + k}, "note": "x" * 99}
        for k in range(4)
    ]  # fmt: skip
    return tool_pair(f"s{n}", "search", f'{{"date": "2024-05-1{n}"}}', flights)


async def test_turn_fields_are_carried_in_the_turn_though_old_answers_keep_none() -> None:
    session = CompactionSession(
        InMemorySession("s"),
        strategy=[FIELDS, summarize()],
        trigger=Items(6, target=2),
        carry_fields=True,
        carry_turn_fields={"search": ["[*].flight_number", "[*].prices"]},
    )
    assert "carry_turn_fields={'search': ['[*].flight_number', '[*].prices']}" in repr(session)
    await session.add_items([{"role": "user", "content": "find me a flight"}])
    for n in range(1, 5):
        await session.add_items(search(n))
        view = await session.get_items()
        assert history_problems(view) == [] and await session.get_items() == view
    carried = [i for i in view if i.get("type") == "function_call_output" and "Kept" in i["output"]]
    assert carried and carried[0]["output"].startswith(
        '[answered earlier] Kept from it, verbatim:\n"flight_number": "HAT10"\n'
        '"prices": {"economy": 100}\n"flight_number": "HAT11"'
    )
    assert "available" not in carried[0]["output"]  # only the named members
    # Once the user has answered, an old search keeps nothing: the Mask has no fields for it.
    await session.add_items([{"role": "assistant", "content": "HAT10 costs 100."}])
    await session.add_items([{"role": "user", "content": "book it"}, *search(5)])
    await session.add_items([{"role": "assistant", "content": "Done."}])
    view = await session.get_items()
    assert history_problems(view) == []
    assert not any("Kept" in str(item.get("output", "")) for item in view)


async def test_users_cannot_write_records() -> None:
    session = CompactionSession(InMemorySession("s"), **FIRING)
    with pytest.raises(ItemValidationError, match=r"memstack\.compaction"):
        await session.add_items([{"type": "memstack.compaction", "v": 1}])


# -- under the Runner, with compaction firing between runs ------------------------------------
async def test_runner_sees_the_summary_and_never_a_record() -> None:
    from agents import Agent, RunConfig, Runner

    from memstack.testing import ScriptedModel, ToolCall
    from memstack.testing.conversation import get_weather

    cities = ["Oslo", "Rome", "Paris", "Lima", "Kyiv", "Oslo"]
    replies = [(ToolCall("get_weather", {"city": city}), f"{city}!") for city in cities]
    model = ScriptedModel([reply for pair in replies for reply in pair])
    agent = Agent(name="weather", model=model, tools=[get_weather])
    store = InMemorySession("runner")
    session = CompactionSession(store, strategy=[Mask(), summarize()], trigger=Items(10, target=4))
    config = RunConfig(tracing_disabled=True, call_model_input_filter=input_filter(session))
    for city in cities:
        result = await Runner.run(agent, f"Weather in {city}?", session=session, run_config=config)
        assert result.final_output == f"{city}!"
    assert len([row for row in store.rows if '"memstack.compaction"' in row]) >= 2
    for sent in model.inputs:
        assert history_problems(sent) == []
        assert not any(is_record(item) for item in sent)
    last = model.inputs[-1]
    assert last[0]["role"] == "developer" and "Lima" in last[0]["content"]
    # Undo the last turn: pop_item returns the real items, newest first.
    assert (await session.pop_item())["role"] == "assistant"  # type: ignore[index]
    view = await session.get_items()
    assert history_problems(view) == [] and not any(is_record(item) for item in view)


@pytest.mark.parametrize("below", ["store", "ttl", "encrypted over ttl", "window"])
async def test_wrapper_reaches_the_store_through_the_capability_reads(below: str) -> None:
    from memstack.layers import EncryptedSession, SlidingWindowSession, TTLSession

    store = InMemorySession("s")
    inner: Any = {
        "store": lambda: store,
        "ttl": lambda: TTLSession(store, ttl=3600),
        "encrypted over ttl": lambda: EncryptedSession(TTLSession(store, ttl=3600), key=KEY),
        "window": lambda: SlidingWindowSession(store, max_items=50),
    }[below]()
    session = CompactionSession(inner, strategy=Mask())
    await session.add_items(sample_items(4))
    marker: Any = object()
    assert await session.get_items(wrapper=marker) == sample_items(4)
    assert store.last_wrapper is marker


class Tagging(SessionLayer):
    """A user's own layer: it rewrites what it stores and shows, with no adapter of its own."""

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        await self.inner.add_items([{**item, "tagged": True} for item in items])

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[Any]:
        stored = await self.inner.get_items(limit=limit) if limit else await self.inner.get_items()
        return [{k: v for k, v in item.items() if k != "tagged"} for item in stored]


async def test_compaction_reads_and_writes_through_a_plain_layer_below_it() -> None:
    """A layer of the user's between compaction and the store is crossed, not skipped."""
    store = InMemorySession("s")
    session = CompactionSession(
        Tagging(store), strategy=summarize(), trigger=Items(12, target=4), keep_last_turns=1
    )
    await session.add_items(sample_items(16))
    stored = await store.get_items()
    assert all(row.get("tagged") is True for row in stored)  # the summary record too
    assert any(is_record(row) for row in stored)
    view = await session.get_items()
    assert view[0]["role"] == "developer" and not any("tagged" in item for item in view)


async def test_compact_turns_store_failures_into_backend_errors(tmp_path: Path) -> None:
    import sqlite3

    from agents.memory import SQLiteSession

    from memstack import BackendError
    from memstack.layers import TTLSession

    path = tmp_path / "chat.db"
    store = SQLiteSession("s", str(path))
    session = CompactionSession(TTLSession(store, ttl=3600), strategy=summarize())
    await session.add_items(sample_items(8))
    with sqlite3.connect(path) as other:  # another process breaks the database
        other.execute("DROP TABLE agent_messages")
    with pytest.raises(BackendError, match="CompactionSession"):
        await session.compact()
