"""TTLSession: expiry on read, real deletion in the store, units, idleness, clocks, encryption."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents.memory import SessionSettings

from memstack import LayerSpec, build_stack, cache
from memstack.errors import BackendError, CapabilityError, ConfigurationError
from memstack.history import history_problems
from memstack.layers import PassthroughSession, TTLSession, purge_written_before
from memstack.layers.ttl.record import MARKER
from memstack.testing import CONTRACT_CHECKS, FakeClock, InMemorySession, sample_items
from memstack.testing.conversation import get_weather
from memstack.testing.model import ScriptedModel, ToolCall

from ..conftest import BACKENDS, SQL_BACKENDS, Store, runner_conversation
from ..direct import backdate, stored
from ..sessions import PlainSession

HOUR = 3600.0


def sid() -> str:
    return f"ttl-{uuid.uuid4().hex[:12]}"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def call(call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}


def output(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


def reasoning(rid: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": rid, "summary": []}


def contents(values: list[Any]) -> list[Any]:
    """What the TTL records wrap, or the value itself."""
    return [v["item"] if isinstance(v, dict) and MARKER in v else v for v in values]


# -- the contract and the Runner ---------------------------------------------------------------
STACKS = {
    "ttl": [LayerSpec("ttl", {"ttl": HOUR})],
    "ttl+idle": [LayerSpec("ttl", {"ttl": HOUR, "idle_ttl": HOUR, "purge_every": 0})],
    "passthrough-ttl-passthrough": [
        LayerSpec("passthrough"),
        LayerSpec("ttl", {"ttl": timedelta(days=30)}),
        LayerSpec("passthrough"),
    ],
}


@pytest.mark.parametrize("stack", list(STACKS))
@pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda check: check.__name__)
async def test_contract(store: Store, stack: str, check: Any) -> None:
    await check(lambda session_id: build_stack(store.open(session_id), STACKS[stack]))


@pytest.mark.parametrize("stack", ["ttl", "passthrough-ttl-passthrough"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_runner_conversation(
    backend: str, stack: str, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    runner_conversation(backend, tmp_path, caplog, lambda store: build_stack(store, STACKS[stack]))


async def test_runner_forgets_expired_turns_mid_conversation() -> None:
    """The model's input on a later turn holds no expired turn, and no orphan."""
    clock = FakeClock()
    store = InMemorySession(sid())
    session = TTLSession(store, ttl=HOUR, clock=clock)
    model = ScriptedModel([ToolCall("get_weather", {"city": "Oslo"}), "Rainy.", "Sunny."])
    agent = Agent(name="w", instructions="Be brief.", model=model, tools=[get_weather])
    config = RunConfig(tracing_disabled=True)

    await Runner.run(agent, "Weather in Oslo?", session=session, run_config=config)
    clock.tick(HOUR)
    await Runner.run(agent, "And tomorrow?", session=session, run_config=config)

    last_input = model.inputs[-1]
    assert "Oslo" not in str(last_input) and "7°C" not in str(last_input)
    assert history_problems(last_input) == []
    assert (await session.get_items())[0]["content"] == "And tomorrow?"


# -- expiry reaches the database ---------------------------------------------------------------
async def test_expired_items_are_deleted_from_the_store(store: Store) -> None:
    clock, session_id = FakeClock(), sid()
    session = TTLSession(store.open(session_id), ttl=HOUR, clock=clock, purge_every=None)
    old, new = sample_items(8, tag="old"), sample_items(4, tag="new")
    await session.add_items(old)
    clock.tick(HOUR / 2)
    await session.add_items(new)

    raw = await stored(store, session_id)
    assert contents(raw) == old + new
    assert all(value[MARKER] == 1 and isinstance(value["t"], float) for value in raw)

    clock.tick(HOUR / 2)
    assert await session.get_items() == new
    assert len(await stored(store, session_id)) == 12  # reads only skip

    assert await session.purge_expired() == 8
    assert contents(await stored(store, session_id)) == new
    assert await session.purge_expired() == 0

    clock.tick(HOUR / 2)
    assert await session.get_items() == []
    assert await session.purge_expired() == 4
    assert await stored(store, session_id) == []


async def test_purge_after_write_is_bounded_and_throttled(store: Store) -> None:
    """Writes purge on the `purge_every` schedule, `purge_batch` at a time; reads never."""
    clock, session_id = FakeClock(), sid()
    session = TTLSession(
        store.open(session_id), ttl=HOUR, clock=clock, purge_every=600, purge_batch=3
    )
    await session.add_items(sample_items(8, tag="old"))  # first write: purges (nothing yet)
    clock.tick(HOUR)

    await session.add_items([user("a")])  # interval passed: at most purge_batch deleted
    assert len(await stored(store, session_id)) == 9 - 3
    clock.tick(10)
    await session.add_items([user("b")])  # within the interval: no purge
    assert len(await stored(store, session_id)) == 7

    assert await session.get_items() == [user("a"), user("b")]  # expired records hidden…
    assert len(await stored(store, session_id)) == 7  # …but a read never deletes
    await session.add_items([user("c")])  # still within the interval: no purge
    assert len(await stored(store, session_id)) == 8
    clock.tick(600)
    await session.add_items([user("d")])  # the interval passed again: the next batch
    assert len(await stored(store, session_id)) == 9 - 3
    assert await session.purge_expired() == 2  # everything expired, whatever the schedule
    assert contents(await stored(store, session_id)) == [user(x) for x in "abcd"]


async def test_a_separate_purger_deletes_only_what_expired(sqlite_store: Store) -> None:
    clock, session_id = FakeClock(), sid()
    writer = TTLSession(sqlite_store.open(session_id), ttl=HOUR, clock=clock, purge_every=None)
    await writer.add_items(sample_items(4))
    clock.tick(HOUR)
    await writer.add_items([user("fresh")])
    purger = TTLSession(sqlite_store.open(session_id), ttl=HOUR, clock=clock)
    assert await purger.purge_expired() == 4
    assert contents(await stored(sqlite_store, session_id)) == [user("fresh")]


# -- atomic units --------------------------------------------------------------------------------
async def test_units_written_across_batches_expire_together(store: Store) -> None:
    """An output written after its call carries the call's time; reasoning's follower too."""
    clock, session_id = FakeClock(), sid()
    session = TTLSession(store.open(session_id), ttl=HOUR, clock=clock, purge_every=None)
    history = [
        [user("q1"), call("c1")],
        [output("c1")],
        [reasoning("r1")],
        [assistant("a1"), call("c2"), call("c3")],
        [output("c3"), output("c2")],
        [user("q2")],
    ]
    for batch in history:
        await session.add_items(batch)
        clock.tick(HOUR / 8)
    flat = [item for batch in history for item in batch]

    seen: list[int] = []
    for _ in range(10):
        view = await session.get_items()
        assert history_problems(view) == []
        assert view == flat[len(flat) - len(view) :]  # always a suffix: no holes
        seen.append(len(view))
        clock.tick(HOUR / 8)
    # Units leave whole, each when its oldest item expires: q1 with call+output (written
    # H/8 apart), reasoning+assistant (split across batches), parallel calls+outputs, q2.
    assert sorted(set(seen), reverse=True) == [10, 7, 5, 1, 0]

    clock.set(clock.now - HOUR / 8 * 8)  # back to when only the first unit had expired
    assert await session.purge_expired() == 3
    assert contents(await stored(store, session_id)) == flat[3:]


async def test_output_written_after_its_call_expired_is_never_shown() -> None:
    clock = FakeClock()
    store = InMemorySession(sid())
    session = TTLSession(store, ttl=HOUR, clock=clock, purge_every=None)
    await session.add_items([user("q"), call("slow")])
    clock.tick(HOUR + 1)  # the tool ran longer than the retention period
    await session.add_items([output("slow"), assistant("done")])
    assert await session.get_items() == [assistant("done")]  # the output expired with its call
    assert await session.purge_expired() == 3
    assert contents([json.loads(r) for r in store.rows]) == [assistant("done")]


async def test_output_of_a_call_already_purged_is_never_shown() -> None:
    clock = FakeClock()
    store = InMemorySession(sid())
    session = TTLSession(store, ttl=HOUR, clock=clock, purge_every=None)
    await session.add_items([user("q"), call("c")])
    clock.tick(HOUR)
    assert await session.purge_expired() == 2  # a retention job ran while the tool did
    await session.add_items([output("c"), assistant("a")])  # the call is gone from storage
    assert await session.get_items() == [assistant("a")]
    assert await session.get_items(limit=2) == [assistant("a")]
    assert len(store.rows) == 2


# -- limit and bounded reads ------------------------------------------------------------------
async def test_limit_counts_live_items(store: Store) -> None:
    clock = FakeClock()
    session = TTLSession(store.open(sid()), ttl=HOUR, clock=clock, purge_every=None)
    old, live = sample_items(12, tag="old"), sample_items(4, tag="live")
    await session.add_items(old)
    clock.tick(HOUR / 2)
    await session.add_items(live)
    clock.tick(HOUR / 2)
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=1) == live[-1:]
    assert await session.get_items(limit=3) == live[-3:]
    assert await session.get_items(limit=4) == live
    assert await session.get_items(limit=10) == live
    session.session_settings = SessionSettings(limit=3)
    assert await session.get_items() == live[-3:]
    # A limit that cuts a call from its output keeps the output, as the SDK's stores do.
    assert await session.get_items(limit=2) == live[-2:]


class CountingSession(PassthroughSession):
    """Records the limit of every read that reaches the store."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.reads: list[int | None] = []

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> Any:
        self.reads.append(limit)
        return await self.inner.get_items(limit, **self.forward(wrapper))


async def test_reads_are_bounded_by_the_live_tail() -> None:
    clock = FakeClock()
    counter = CountingSession(InMemorySession(sid()))
    writer = TTLSession(counter, ttl=HOUR, clock=clock, purge_every=None)
    await writer.add_items(sample_items(5000, tag="old"))
    clock.tick(HOUR / 2)
    await writer.add_items(sample_items(5000, tag="new"))
    clock.tick(HOUR / 2)

    cache.clear()  # no earlier read of this session to start from
    reader = TTLSession(counter, ttl=HOUR, clock=clock)
    counter.reads.clear()
    assert len(await reader.get_items(limit=51)) == 51  # 51: a limit of 50 would cut a pair
    assert counter.reads == [51]

    counter.reads.clear()
    # Cold: the tail grows by 4, then to the whole history once that is at most 16 times.
    assert len(await reader.get_items()) == 5000
    assert counter.reads == [128, 512, 2048, 10001]
    counter.reads.clear()
    # Warm, even in another stack: one read just past the live part (what the last needed).
    again = TTLSession(counter, ttl=HOUR, clock=clock)
    assert len(await again.get_items()) == 5000
    assert len(counter.reads) == 1 and 5001 <= counter.reads[0] <= 6300


# -- pop_item ----------------------------------------------------------------------------------
async def test_pop_item_pops_the_newest_live_item_unwrapped(store: Store) -> None:
    clock, session_id = FakeClock(), sid()
    session = TTLSession(store.open(session_id), ttl=HOUR, clock=clock, purge_every=None)
    await session.add_items([user("old")])
    clock.tick(HOUR / 2)
    await session.add_items([user("new"), assistant("reply")])
    assert await session.pop_item() == assistant("reply")
    clock.tick(HOUR / 2)
    assert await session.pop_item() == user("new")
    clock.tick(HOUR / 2)
    await session.add_items([user("x")])
    clock.tick(HOUR)
    assert await session.pop_item() is None  # the newest record was expired: nothing live
    assert contents(await stored(store, session_id)) == [user("old")]


# -- idle expiry -------------------------------------------------------------------------------
async def test_idle_session_reads_empty_is_purged_and_never_comes_back(store: Store) -> None:
    clock, session_id = FakeClock(), sid()
    session = TTLSession(
        store.open(session_id), ttl=None, idle_ttl=600, clock=clock, purge_every=None
    )
    await session.add_items(sample_items(4, tag="first"))
    clock.tick(599)
    await session.add_items([user("still active")])
    clock.tick(599)
    assert len(await session.get_items()) == 5
    clock.tick(1)
    assert await session.get_items() == []
    assert await session.get_items(limit=2) == []

    # A restarted process sees the same: last activity is the newest record's write time.
    restarted = TTLSession(
        store.open(session_id), ttl=None, idle_ttl=600, clock=clock, purge_every=None
    )
    assert await restarted.get_items() == []

    await restarted.add_items([user("hello again")])  # starts the next generation
    assert await restarted.get_items() == [user("hello again")]
    clock.tick(300)
    assert await session.get_items() == [user("hello again")]
    assert await session.purge_expired() == 5
    assert contents(await stored(store, session_id)) == [user("hello again")]


async def test_idle_purge_without_a_write(store: Store) -> None:
    clock, session_id = FakeClock(), sid()
    session = TTLSession(store.open(session_id), ttl=HOUR, idle_ttl=60, clock=clock)
    await session.add_items(sample_items(6))
    clock.tick(60)
    assert await session.pop_item() is None
    assert await session.purge_expired() == 5
    assert await stored(store, session_id) == []


# -- stores that can only skip ------------------------------------------------------------------


async def test_generic_store_skips_and_says_it_cannot_delete(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, bare = FakeClock(), PlainSession(sid())
    session = TTLSession(bare, ttl=HOUR, clock=clock, purge_every=0)
    with caplog.at_level("INFO", logger="memstack.ttl"):
        await session.add_items(sample_items(4))  # the write succeeds; purge is skipped
    assert "can only skip" in caplog.text
    clock.tick(HOUR)
    await session.add_items([user("new")])
    assert await session.get_items() == [user("new")]
    assert len(bare.items) == 5
    with pytest.raises(CapabilityError, match="can only skip expired items"):
        await session.purge_expired()


# -- clocks ------------------------------------------------------------------------------------
async def test_clock_skew_between_writers_never_punches_holes() -> None:
    """A writer whose clock runs behind makes older items expire early, never late."""
    store = InMemorySession(sid())
    fast, slow = FakeClock(10_000.0), FakeClock(10_000.0 - 600)
    a = TTLSession(store, ttl=HOUR, clock=fast, purge_every=None)
    b = TTLSession(store, ttl=HOUR, clock=slow, purge_every=None)
    await a.add_items([user("from fast")])
    await b.add_items([user("from slow")])  # stamped 600 s earlier than the item before it
    fast.tick(100)
    await a.add_items([user("fast again")])
    fast.tick(HOUR - 300)  # "from slow" is expired by its stamp, "from fast" is not
    assert await a.get_items() == [user("fast again")]
    # The prefix purge stops at the first live record; the rest goes when it expires.
    assert await a.purge_expired() == 0
    fast.tick(200)
    assert await a.purge_expired() == 2
    assert contents([json.loads(r) for r in store.rows]) == [user("fast again")]


# -- stored formats ----------------------------------------------------------------------------
async def test_items_written_around_the_layer_are_dated_on_first_sight() -> None:
    store = InMemorySession(sid())
    clock = FakeClock()
    session = TTLSession(store, ttl=HOUR, clock=clock, purge_every=None)
    await session.add_items([user("stamped")])
    clock.tick(HOUR / 2)
    await store.add_items([user("around")])  # another writer, without the layer
    assert await session.get_items() == [user("stamped"), user("around")]
    assert all(MARKER in json.loads(row) for row in store.rows)
    clock.tick(HOUR / 2)
    assert await session.get_items() == [user("around")]
    assert await session.purge_expired() == 1


async def test_unknown_record_format_fails_loudly_and_is_never_deleted() -> None:
    store = InMemorySession(sid())
    future = {MARKER: 2, "t": 1.0, "item": user("from the future")}
    await store.add_items([future])
    session = TTLSession(store, ttl=HOUR, clock=FakeClock())
    with pytest.raises(BackendError, match="format 2"):
        await session.get_items()
    with pytest.raises(BackendError, match="format 2"):
        await session.pop_item()
    assert [json.loads(r) for r in store.rows] == [future]  # pop put it back
    with pytest.raises(BackendError):
        await session.purge_expired()
    assert [json.loads(r) for r in store.rows] == [future]


# -- encryption --------------------------------------------------------------------------------
async def test_purge_below_encryption_needs_no_key(store: Store) -> None:
    """store → TTL → Encrypted: the retention job holds no key and still deletes."""
    from memstack.crypto import generate_key
    from memstack.layers.encrypted import EncryptedSession

    clock, session_id = FakeClock(), sid()
    app = EncryptedSession(
        TTLSession(store.open(session_id), ttl=HOUR, clock=clock, purge_every=None),
        key=generate_key(),
    )
    secret, fresh = [user("card 4111 1111")], [user("still here")]
    await app.add_items(secret)
    clock.tick(HOUR / 2)
    await app.add_items(fresh)
    clock.tick(HOUR / 2)

    raw = await stored(store, session_id)
    assert "4111" not in json.dumps(raw) and "still here" not in json.dumps(raw)
    assert all(value[MARKER] == 1 and set(value["item"]) == {"menc", "kid", "ct"} for value in raw)

    # The retention job: the store and a TTL layer, no EncryptedSession, no key.
    job = TTLSession(store.open(session_id), ttl=HOUR, clock=clock)
    assert await job.purge_expired() == 1
    assert len(await stored(store, session_id)) == 1
    assert await app.get_items() == fresh


async def test_purge_above_encryption_with_the_key(store: Store) -> None:
    """store → Encrypted → TTL: the app's own purge decrypts through the layer below."""
    from memstack.crypto import generate_key
    from memstack.layers.encrypted import EncryptedSession

    clock, session_id = FakeClock(), sid()
    app = TTLSession(
        EncryptedSession(store.open(session_id), key=generate_key()),
        ttl=HOUR,
        clock=clock,
        purge_every=None,
    )
    await app.add_items(sample_items(4, tag="old"))
    clock.tick(HOUR / 2)
    await app.add_items([user("fresh")])
    clock.tick(HOUR / 2)

    raw = await stored(store, session_id)
    assert all(set(value) == {"menc", "kid", "ct"} for value in raw)  # no plaintext stamps
    assert MARKER not in json.dumps(raw)
    assert await app.get_items() == [user("fresh")]
    assert await app.purge_expired() == 4
    assert len(await stored(store, session_id)) == 1


async def test_purge_above_encryption_without_the_key(store: Store) -> None:
    """store → Encrypted → TTL: a key-free job can only use the store's own write times."""
    from memstack.crypto import generate_key
    from memstack.layers.encrypted import EncryptedSession

    clock, session_id = FakeClock(), sid()
    app = TTLSession(
        EncryptedSession(store.open(session_id), key=generate_key()),
        ttl=HOUR,
        clock=clock,
        purge_every=None,
    )
    old = [user("q"), call("c")]
    await app.add_items(old)
    await app.add_items([output("c"), assistant("a"), user("fresh")])

    job_store = store.open(session_id)  # what the job holds: the store, no key
    if store.backend not in SQL_BACKENDS:
        with pytest.raises(CapabilityError, match="no per-item write time"):
            await purge_written_before(job_store, older_than=HOUR)
        return
    await backdate(store, session_id, 2)  # as if the first batch were written long ago
    assert await purge_written_before(job_store, older_than=timedelta(hours=1)) == 2
    assert len(await stored(store, session_id)) == 3
    # The store split the unit; the layer above still never shows the orphaned output.
    assert await app.get_items() == [assistant("a"), user("fresh")]


# -- configuration and presentation ------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"ttl": 0}, "ttl must be seconds > 0"),
        ({"ttl": -5}, "ttl must be seconds > 0"),
        ({"ttl": "1h"}, "ttl must be seconds > 0"),
        ({"ttl": True}, "ttl must be seconds > 0"),
        ({"ttl": float("inf")}, "ttl must be seconds > 0"),
        ({"ttl": None}, "set ttl, idle_ttl or both"),
        ({"ttl": HOUR, "idle_ttl": timedelta(0)}, "idle_ttl must be seconds > 0"),
        ({"ttl": HOUR, "purge_every": -1}, "purge_every must be seconds >= 0"),
        ({"ttl": HOUR, "purge_batch": 0}, "purge_batch must be an int from 1 to 10000"),
        ({"ttl": HOUR, "purge_batch": 2.5}, "purge_batch must be an int from 1 to 10000"),
        ({"ttl": HOUR, "clock": 12.0}, "clock must be a callable"),
    ],
)
def test_options_are_validated(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigurationError, match=field) as info:
        TTLSession(InMemorySession("s"), **options)
    assert info.value.layer == "TTLSession"


def test_ttl_is_required_and_keyword_only() -> None:
    with pytest.raises(TypeError):
        TTLSession(InMemorySession("s"))  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        TTLSession(InMemorySession("s"), 3600)  # type: ignore[misc]


def test_repr_and_stack_builder() -> None:
    stack = build_stack(
        InMemorySession("s1"), [LayerSpec("ttl", {"ttl": timedelta(days=7), "idle_ttl": 900})]
    )
    assert isinstance(stack, TTLSession)
    assert repr(stack) == (
        "InMemorySession(session_id='s1') → "
        "TTLSession(ttl=604800.0, idle_ttl=900.0, purge_every=60.0)"
    )


async def test_purge_written_before_validates() -> None:
    with pytest.raises(ConfigurationError, match="older_than"):
        await purge_written_before(InMemorySession("s"), older_than=-1)
    with pytest.raises(ConfigurationError, match="batch_size"):
        await purge_written_before(InMemorySession("s"), older_than=1, batch_size=0)


# -- capabilities through the layer, and derived data ------------------------------------------
async def test_capabilities_see_live_items_and_replacements_keep_stamps(store: Store) -> None:
    clock, session_id = FakeClock(), sid()
    session = TTLSession(store.open(session_id), ttl=HOUR, clock=clock, purge_every=None)
    pinned = {"role": "developer", "content": "rules"}
    mid = [pinned, *sample_items(4, tag="mid")]
    await session.add_items([user("old")])
    clock.tick(HOUR / 4)
    await session.add_items(mid)
    clock.tick(HOUR / 4)
    await session.add_items([user("new")])
    clock.tick(HOUR / 2)  # "old" has expired, the rest has not

    caps = session.storage_capabilities()
    assert caps.atomic and await caps.count() == 6
    summary = {"role": "system", "content": "summary of mid"}
    assert not await caps.replace_oldest(5, [summary], expect=sample_items(5, tag="other"))
    # A window-like rewrite: keeps the pinned item, replaces the rest by a summary.
    assert await caps.replace_oldest(5, [pinned, summary], expect=mid)
    assert await session.get_items() == [pinned, summary, user("new")]
    raw = await stored(store, session_id)
    assert contents(raw) == [pinned, summary, user("new")]  # the dead "old" went too
    assert raw[1]["u"] == raw[0]["t"]  # the summary carries its oldest source's time

    clock.tick(HOUR / 4 - 1)
    assert await session.get_items() == [pinned, summary, user("new")]
    clock.tick(1)  # the sources' retention ends: the summary goes with them
    assert await session.get_items() == [user("new")]

    assert await caps.delete_where(lambda item: item == user("new")) == 3
    assert await stored(store, session_id) == []


async def test_capability_delete_oldest_counts_live_items(store: Store) -> None:
    clock, session_id = FakeClock(), sid()
    session = TTLSession(store.open(session_id), ttl=HOUR, clock=clock, purge_every=None)
    await session.add_items(sample_items(4, tag="old"))
    clock.tick(HOUR / 2)
    live = sample_items(8, tag="live")
    await session.add_items(live)
    clock.tick(HOUR / 2)
    caps = session.storage_capabilities()
    assert await caps.delete_oldest(4) == 4
    assert contents(await stored(store, session_id)) == live[4:]
    assert await caps.delete_oldest(100) == 4
    assert await caps.delete_oldest(1) == 0


async def test_rotation_through_ttl_keeps_write_times(store: Store) -> None:
    """store → TTL → Encrypted: re-encryption rewrites items, never their retention."""
    from memstack.crypto import Keyring, generate_key, key_id
    from memstack.layers.encrypted import EncryptedSession

    old_key, new_key = generate_key(), generate_key()
    clock, session_id = FakeClock(), sid()
    ttl = TTLSession(store.open(session_id), ttl=HOUR, clock=clock, purge_every=None)
    await EncryptedSession(ttl, key=old_key).add_items(sample_items(4))
    clock.tick(HOUR / 2)
    await EncryptedSession(ttl, key=old_key).add_items([user("later")])
    before = [(value["t"], value.get("u")) for value in await stored(store, session_id)]

    rotated = EncryptedSession(ttl, keyring=Keyring.of(new_key, old_key))
    assert await rotated.rotate() == 5
    raw = await stored(store, session_id)
    assert [(value["t"], value.get("u")) for value in raw] == before
    assert {value["item"]["kid"] for value in raw} == {key_id(new_key)}
    clock.tick(HOUR / 2)
    assert await rotated.get_items() == [user("later")]


async def test_write_times_cross_encryption_both_ways() -> None:
    """``read_tail`` reports each item's expiry stamp; ``add_derived`` dates items older."""
    from memstack import capabilities_of
    from memstack.crypto import generate_key
    from memstack.layers.encrypted import EncryptedSession

    clock, store = FakeClock(), InMemorySession(sid())
    start = clock.now
    stack = EncryptedSession(
        TTLSession(store, ttl=HOUR, clock=clock, purge_every=None), key=generate_key()
    )
    caps = capabilities_of(stack)
    await stack.add_items([user("a")])
    clock.tick(100)
    await caps.add_derived([assistant("summary of older things")], derived_from=start - 900)
    await stack.add_items([user("b")])
    tail = await caps.read_tail(10)
    assert tail.items == await stack.get_items()
    assert tail.written_at == [start, start - 900, start + 100]
    assert (await caps.read_tail(2)).written_at == [start - 900, start + 100]

    clock.set(start - 900 + HOUR)  # the summary's sources expire, and so does the summary
    assert await stack.get_items() == [user("a"), user("b")]
    ttl = stack.inner
    assert isinstance(ttl, TTLSession)
    assert await ttl.purge_expired() == 1  # deleted from among live records
    assert len(store.rows) == 2
    clock.set(start + HOUR)
    assert await stack.get_items() == [user("b")]
    assert await ttl.purge_expired() == 1


@pytest.mark.parametrize("mode", ["append", "rewrite"])
async def test_a_summary_never_outlives_what_it_summarises(store: Store, mode: str) -> None:
    from memstack.compaction import ExtractiveSummarizer, Items, Summarize
    from memstack.layers import CompactionSession

    clock, session_id = FakeClock(), sid()
    start = clock.now
    ttl = TTLSession(store.open(session_id), ttl=HOUR, clock=clock, purge_every=None)
    session = CompactionSession(
        ttl,
        strategy=Summarize(ExtractiveSummarizer(), max_tokens=300),
        trigger=Items(12, target=4),
        keep_last_turns=1,
        mode=mode,  # type: ignore[arg-type]
    )
    for turn in range(4):  # one turn every 10 minutes; the 4th triggers a compaction
        await session.add_items(sample_items(4, tag=f"t{turn}"))
        clock.tick(600)
    view = await session.get_items()
    assert view[0]["role"] == "developer" and view[1:] == sample_items(4, tag="t3")

    clock.set(start + HOUR - 1)
    assert (await session.get_items())[0]["role"] == "developer"
    clock.set(start + HOUR)  # the oldest summarised turn expires, and so does the summary
    # Appended summaries leave their other sources stored: those are shown again, raw,
    # until they expire in turn. Rewritten ones replaced their sources.
    kept = [turn for turn in range(4) if mode == "append" and turn > 0] or [3]
    expected = [item for turn in kept for item in sample_items(4, tag=f"t{turn}")]
    assert await session.get_items() == expected
    assert "developer" not in json.dumps(await ttl.get_items())
    assert await ttl.purge_expired() == (5 if mode == "append" else 1)
    assert contents(await stored(store, session_id)) == expected


async def test_pop_item_skips_an_expired_summary_on_top() -> None:
    clock = FakeClock()
    session = TTLSession(InMemorySession(sid()), ttl=HOUR, clock=clock, purge_every=None)
    clock.tick(HOUR / 2)
    await session.add_items([user("q"), assistant("a")])
    summary = [{"role": "developer", "content": "summary"}]
    await session.add_derived(summary, derived_from=clock.now - HOUR / 2)
    assert len(await session.get_items()) == 3
    clock.tick(HOUR / 2)  # the summary's sources have expired; q and a have not
    assert await session.get_items() == [user("q"), assistant("a")]
    assert await session.pop_item() == assistant("a")
    assert await session.get_items() == [user("q")]


async def test_purge_never_takes_a_later_record_when_its_marker_vanished() -> None:
    """A purge told to delete through a record another purger already deleted."""
    from memstack.layers.ttl.policy import doomed as _doomed
    from memstack.layers.ttl.record import write_record

    dead = write_record(user("dead"), written=100.0)
    same_batch = write_record(user("written with it"), written=100.0, anchor=100.0)
    later = write_record(user("later"), written=200.0)
    doomed = _doomed(dead, lambda value: value is dead, prefix=True)
    # ``dead`` is gone: nothing that remains was written before it, so nothing matches.
    assert [doomed(value) for value in (same_batch, later)] == [False, False]


@pytest.mark.parametrize(
    "record",
    [
        {MARKER: 1, "t": True, "item": {}},
        {MARKER: 1, "t": float("inf"), "item": {}},
        {MARKER: 1, "t": 1.0, "item": []},
        {MARKER: 1, "t": 1.0, "u": "yesterday", "item": {}},
        {MARKER: 1, "t": 1.0, "g": 1.5, "item": {}},
        {MARKER: 1, "t": 1.0, "d": 2, "item": {}},
        {MARKER: 1, "item": {}},
    ],
)
def test_damaged_records_are_refused_not_guessed(record: dict[str, Any]) -> None:
    from memstack.layers.ttl.record import UnknownRecord, read_record

    with pytest.raises(UnknownRecord, match="damaged"):
        read_record(record)


@pytest.mark.parametrize(
    "record",
    [
        {MARKER: 1, "t": 1.5, "item": {"role": "user"}},
        {MARKER: True, "t": 1.5, "item": {}},
        {MARKER: 1, "t": 2, "item": {}},
        {MARKER: 1, "t": float("nan"), "item": {}},
        {MARKER: 2, "t": 1.5, "item": {}},
        {MARKER: 1, "t": 1.5, "other": {}},
        {MARKER: 1, "t": 1.5, "item": {}, "u": 1.0},
        {"t": 1.5, "item": {}, "x": 1},
    ],
)
def test_a_common_record_reads_as_any_record_does(record: dict[str, Any]) -> None:
    """The shortcut for marker, time and item gives what the general reading gives (a
    dict subclass takes the general way)."""
    from memstack.layers.ttl.record import read_record

    class Record(dict[str, Any]):
        pass

    def outcome(value: object) -> object:
        try:
            stamp = read_record(value)
        except Exception as exc:  # the outcome is compared, whatever it is
            return type(exc), str(exc)
        return type(stamp), tuple(stamp)

    assert outcome(record) == outcome(Record(record))


def _random_history(rng: Any, turns: int) -> list[tuple[str, list[dict[str, Any]]]]:
    """Batches as agents write them, with units split across batches and late summaries."""
    batches: list[tuple[str, list[dict[str, Any]]]] = []
    for n in range(turns):
        kind = rng.choice(["turn", "tool", "split tool", "parallel", "reasoning", "summary"])
        if kind == "turn":
            batches.append(("", [user(f"q{n}"), assistant(f"a{n}")]))
        elif kind == "tool":
            batches.append(("", [user(f"q{n}"), call(f"c{n}"), output(f"c{n}")]))
        elif kind == "split tool":
            batches += [("", [user(f"q{n}"), call(f"c{n}")]), ("", [output(f"c{n}")])]
        elif kind == "parallel":
            calls, outputs = [call(f"p{n}"), call(f"r{n}")], [output(f"r{n}"), output(f"p{n}")]
            batches += [("", calls), ("", outputs)]
        elif kind == "reasoning":
            batches += [("", [reasoning(f"rs{n}")]), ("", [assistant(f"after {n}")])]
        else:
            batches.append(("derived", [{"role": "developer", "content": f"summary {n}"}]))
    return batches


async def _keeps_every_promise(store: Store, seed: int) -> None:
    import random

    rng = random.Random(seed)
    clock, session_id = FakeClock(), sid()
    idle = HOUR / 2 if seed % 2 else None
    every = 0 if seed % 3 == 0 else None  # some also purge after every write, bounded
    session = TTLSession(
        store.open(session_id),
        ttl=HOUR,
        idle_ttl=idle,
        clock=clock,
        purge_every=every,
        purge_batch=3,
    )
    purged = shown = 0
    for kind, batch in _random_history(rng, 25):
        if kind == "derived":
            await session.add_derived(batch, derived_from=clock.now - rng.uniform(0, HOUR))
        else:
            await session.add_items(batch)
        clock.tick(rng.choice([0, 1, 60, HOUR / 7, HOUR / 3]))

        view = await session.get_items()
        assert history_problems(view) == []
        tail = await session.storage_capabilities().read_tail(len(view) + 1)
        assert tail.items == view
        assert all(time is not None and time + HOUR > clock.now for time in tail.written_at)
        for n in (1, 2, 3, 5, len(view), len(view) + 1):
            # A limit slices the view, as the SDK's stores do: an output it cut from its
            # call stays (the Runner drops it from the model input).
            assert await session.get_items(limit=n) == view[-n:]
        if rng.random() < 0.3:
            purged += await session.purge_expired()
            assert await session.get_items() == view
            assert contents(await stored(store, session_id)) == view
        shown = max(shown, len(view))
    assert shown and (purged or every == 0)  # the history grew, and expiry had work to do


@pytest.mark.parametrize("seed", range(40))
async def test_random_histories_keep_every_promise(seed: int, tmp_path: Any) -> None:
    """Whatever was written when: views are valid, limits slice them, purges keep them."""
    await _keeps_every_promise(Store("memory", tmp_path), seed)


@pytest.mark.parametrize("seed", range(3))
async def test_random_histories_on_every_backend(store: Store, seed: int) -> None:
    await _keeps_every_promise(store, seed)


def test_purge_every_can_be_changed_on_a_live_layer() -> None:
    session = TTLSession(InMemorySession("s"), ttl=HOUR)
    session.purge_every = None
    assert session.purge_every is None and "purge_every=None" in repr(session)
    session.purge_every = 300
    assert session.purge_schedule.every == 300.0
    with pytest.raises(ConfigurationError, match="purge_every must be seconds >= 0"):
        session.purge_every = -1


async def test_a_ttl_layer_below_encryption_hands_its_own_callers_fresh_items(
    sqlite_store: Store,
) -> None:
    """A layer is a Session alone, wherever it sits: its caller may alter what it returns.

    Below encryption the layer may share what it reads with the layer above; a direct
    caller (``memstack inspect`` reads every layer, user code reaches one with
    ``find``) must still get items of its own.
    """
    from memstack import EncryptedSession
    from memstack.crypto import generate_key

    key = generate_key()
    stack = EncryptedSession(TTLSession(sqlite_store.open(sid()), ttl=HOUR), key=key)
    ttl = stack.inner
    await stack.add_items(sample_items(4))
    assert await stack.get_items() == sample_items(4)
    envelopes = await ttl.get_items()
    expected = [dict(envelope) for envelope in envelopes]
    for envelope in envelopes:
        envelope["ct"] = "altered"
    assert await ttl.get_items() == expected
    tail = await ttl.storage_capabilities().read_tail(4)
    for envelope in tail.items:
        envelope.clear()
    assert (await ttl.storage_capabilities().read_tail(4)).items == expected
    # A second handle over the same layers opens what the store holds, not what was altered.
    assert await EncryptedSession(ttl, key=key).get_items() == sample_items(4)


def test_the_live_path_answers_as_resolve_or_not_at_all() -> None:
    # ``Expiry.resolve_live`` (a warm read's C-speed path) must equal ``resolve`` whenever
    # it answers: across expiry by age, idleness, older generations, derived records and
    # unstamped items, whole reads and tails.
    from memstack.layers.ttl.policy import Expiry
    from memstack.layers.ttl.record import read_record, write_record

    def records(gens: list[int]) -> list[Any]:
        out: list[Any] = []
        for i, g in enumerate(gens):
            item = (
                {"type": "function_call_output", "call_id": f"c{i}", "output": "x"}
                if i % 4 == 0
                else {"role": "user", "content": f"m{i}"}
            )
            out.append(write_record(item, written=10.0 * i, generation=g, derived=i % 7 == 3))
        out.insert(2, {"role": "user", "content": "written before the layer"})
        return out

    answered = 0
    for expiry in (Expiry(ttl=100.0, idle_ttl=None), Expiry(ttl=None, idle_ttl=30.0)):
        for history in (records([0] * 12), records([0] * 5 + [1] * 7), records([1] * 12)):
            for tail in (history, history[3:], [v for v in history if "t" in v]):
                stamps = [read_record(v) for v in tail]
                for now in (0.0, 105.0, 120.0, 135.0, 500.0):
                    for whole in (True, False):
                        live = expiry.resolve_live(list(tail), stamps, now, whole=whole)
                        if live is not None:
                            answered += 1
                            slow = expiry.resolve(list(tail), now, whole=whole, read=read_record)
                            assert live == slow
    assert answered > 10


async def test_a_warm_read_still_hides_what_expired_since() -> None:
    clock = FakeClock()
    stack = TTLSession(InMemorySession(sid()), ttl=100, clock=clock)
    await stack.add_items(sample_items(8))
    clock.tick(60)
    await stack.add_items(sample_items(4))
    assert len(await stack.get_items()) == 12
    assert len(await stack.get_items()) == 12  # warm: every row seen
    clock.tick(50)  # the first eight are now 110 s old
    assert await stack.get_items() == sample_items(4)


async def test_a_read_only_look_dates_nothing(sqlite_store: Store) -> None:
    """Inside ``read_only()`` undated history is shown as it is, and the store is left as
    it was; the next ordinary read dates it."""
    from memstack.history import read_only

    session_id = sid()
    bare = sqlite_store.open(session_id)
    await bare.add_items(sample_items(4))
    before = await stored(sqlite_store, session_id)
    ttl = TTLSession(sqlite_store.open(session_id), ttl=HOUR)
    with read_only():
        assert await ttl.get_items() == sample_items(4)
    assert await stored(sqlite_store, session_id) == before
    assert await ttl.get_items() == sample_items(4)
    assert all(MARKER in value for value in await stored(sqlite_store, session_id))  # dated
