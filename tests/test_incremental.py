"""A read re-derives only the rows the last read did not see, and never trusts a stale one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents.memory import SQLiteSession

from memstack import DecryptionError, EncryptedSession, SlidingWindowSession, TTLSession, cache
from memstack import incremental as inc
from memstack.crypto import generate_key, key_id
from memstack.testing import FakeClock, sample_items


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


def derive(slot: tuple[str, ...], keys: list[Any], seen: list[Any]) -> list[Any]:
    results = inc.previous(slot, keys)
    for index, result in enumerate(results):
        if result is inc.MISSING:
            seen.append(keys[index])
            results[index] = f"<{keys[index]}>"
    inc.keep(slot, keys, results)
    return results


@pytest.mark.parametrize(
    ("first", "second", "derived"),
    [
        (["a", "b"], ["a", "b", "c"], ["c"]),  # the same tail, longer
        (["a", "b", "c"], ["b", "c", "d"], ["d"]),  # moved on by one row
        (["b", "c"], ["a", "b", "c", "d"], ["a", "d"]),  # a longer read around the last
        (["a", "b", "c"], ["a", "b"], []),  # a shorter one (the newest popped)
        (["a", "b", "c"], ["a", "x", "c"], ["x"]),  # a row rewritten in place
        (["a", "b", "c"], ["x", "b", "c"], ["x"]),  # the oldest one rewritten
        (["a", "b", "c"], ["x", "y", "c", "d"], ["x", "y", "d"]),  # ends apart
        (["a", "b"], ["x", "y"], ["x", "y"]),  # nothing in common (cleared, refilled)
        # A view whose middle changed (an output masked since): the rest by key.
        (["a", "b", "c", "d", "e"], ["a", "b", "x", "d", "e", "f"], ["x", "f"]),
    ],
)
def test_results_line_up_by_key_and_only_new_rows_are_derived(
    first: list[str], second: list[str], derived: list[str]
) -> None:
    derive(("t", "s"), first, [])
    seen: list[str] = []
    assert derive(("t", "s"), second, seen) == [f"<{key}>" for key in second]
    assert seen == derived


def test_a_read_with_an_unknown_key_keeps_and_trusts_nothing() -> None:
    derive(("t", "s"), ["a", "b"], [])
    seen: list[Any] = []
    assert derive(("t", "s"), ["a", None], seen) == ["<a>", "<None>"]
    assert seen == ["a", None]  # None never matches a kept None
    seen.clear()
    derive(("t", "s"), ["a", "b"], seen)
    assert seen == []  # the read with None replaced nothing


def test_a_short_read_between_long_ones_keeps_the_long_ones_rows() -> None:
    derive(("t", "s"), ["a", "b", "c", "d"], [])
    derive(("t", "s"), ["c", "d", "e"], [])  # a write's look at the newest rows
    seen: list[str] = []
    derive(("t", "s"), ["a", "b", "c", "d", "e"], seen)
    assert seen == ["a"]  # as many rows as the long read had are kept, newest first


def test_kept_reads_are_weighed_under_the_process_budget() -> None:
    derive(("t", "s"), [f"k{n}" for n in range(100)], [])
    assert cache.stats()["t"].bytes >= 100 * inc.WEIGHT_PER_ROW  # its two lists, at least


# -- through a stack: every change a read must see --------------------------------------


def stack(path: Path, clock: FakeClock, key: str, *, window: bool = True) -> Any:
    """TTL → Encrypted (→ a token window) over the SDK's SQLiteSession on ``path``: a
    store whose reads carry content keys, so every layer's read is incremental."""
    session: Any = EncryptedSession(
        TTLSession(SQLiteSession("s1", str(path)), ttl=3600, clock=clock), key=key
    )
    if window:
        session = SlidingWindowSession(session, max_tokens=100_000)
    return session


def fresh_view(path: Path, clock: FakeClock, key: str) -> Any:
    cache.clear()  # nothing kept: what a new process reads
    return stack(path, clock, key).get_items()


async def test_a_stack_sees_pops_clears_and_writes_of_another_process(tmp_path: Path) -> None:
    path, clock, key = tmp_path / "s.db", FakeClock(1000.0), generate_key()
    mine, theirs = stack(path, clock, key), stack(path, clock, key)  # two processes' stacks
    items = sample_items(12)
    await mine.add_items(items[:8])
    assert await mine.get_items() == items[:8]
    await theirs.add_items(items[8:])
    assert await mine.get_items() == items
    assert await theirs.pop_item() == items[-1]
    assert await mine.get_items() == items[:-1]
    await mine.add_items(items[-1:])
    assert await mine.get_items(limit=3) == items[-3:]
    assert await mine.get_items() == items
    await theirs.clear_session()
    assert await mine.get_items() == []
    await theirs.add_items(items[:4])
    assert await mine.get_items() == items[:4]
    kept = cache.stats()
    assert all(kept[name].hits for name in ("rows read", "ttl stamps", "opened", "view counts"))
    assert await fresh_view(path, clock, key) == items[:4]


async def test_a_row_rewritten_in_place_by_another_process_is_read_again(tmp_path: Path) -> None:
    path, clock, key = tmp_path / "s.db", FakeClock(1000.0), generate_key()
    mine = stack(path, clock, key)
    items = sample_items(4)
    await mine.add_items(items)
    assert await mine.get_items() == items
    # Another process reseals the newest row (same id, new text): a new envelope.
    other = SQLiteSession("s1", str(path))
    newest = (await other.get_items())[-1]
    changed = {**items[-1], "content": "changed"}
    resealed = EncryptedSession(SQLiteSession("s1", str(tmp_path / "x.db")), key=key)
    record = {**newest, "item": resealed._cipher.seal(changed)}
    with other._get_connection() as conn:  # type: ignore[attr-defined]
        conn.execute(
            "UPDATE agent_messages SET message_data = ? WHERE id = (SELECT MAX(id) FROM "
            "agent_messages)",
            (__import__("json").dumps(record),),
        )
        conn.commit()
    assert await mine.get_items() == [*items[:-1], changed]


async def test_time_still_expires_items_whose_stamps_were_kept(tmp_path: Path) -> None:
    path, clock, key = tmp_path / "s.db", FakeClock(1000.0), generate_key()
    mine = stack(path, clock, key)
    items = sample_items(8)
    await mine.add_items(items[:4])
    clock.tick(1800)
    await mine.add_items(items[4:])
    assert await mine.get_items() == items
    clock.tick(1800)  # the first four are an hour old now
    assert await mine.get_items() == items[4:] == await fresh_view(path, clock, key)


class Provider:
    def __init__(self, keys: dict[str, str], active: str) -> None:
        self.keys, self.active_kid = dict(keys), active

    def key(self, kid: str) -> str | None:
        return self.keys.get(kid)


async def test_a_dropped_or_swapped_key_is_never_answered_from_the_last_read(
    tmp_path: Path,
) -> None:
    key = generate_key()
    provider = Provider({key_id(key): key}, key_id(key))
    live = EncryptedSession(SQLiteSession("s1", str(tmp_path / "s.db")), keyring=provider)
    items = sample_items(4)
    await live.add_items(items)
    assert await live.get_items() == items  # kept by content key
    provider.keys[key_id(key)] = generate_key()  # the same id, another key
    with pytest.raises(DecryptionError):
        await live.get_items()
    del provider.keys[key_id(key)]  # revoked
    with pytest.raises(DecryptionError, match="does not hold"):
        await live.get_items()
    provider.keys[key_id(key)] = key
    assert await live.get_items() == items
