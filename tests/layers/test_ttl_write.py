"""TTLSession's write: the stored tail its stamps follow, read where the write happens.

A write stamps each item with when its unit began (an output continues its stored call)
and the session's generation (a write into an idle-expired session starts the next one),
so it reads the newest stored records first. Over a SQL store (``SQLAlchemySession`` on
PostgreSQL and SQLite) that read happens in the write's own transaction, under the row
lock the store's writes take: one round trip. Everywhere, what another writer did since
this stack last read (a write, a pop, a clear) is what the stamps follow.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import event

from memstack.layers import TTLSession
from memstack.layers.ttl.record import MARKER
from memstack.testing import FakeClock

from ..conftest import SERVICES, Store, require_service
from ..direct import stored

HOUR = 3600.0


def sid() -> str:
    return f"ttl-write-{uuid.uuid4().hex[:12]}"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def call(call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}


def output(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


def began(record: dict[str, Any]) -> float:
    """When a stored record's unit began (``u``, else its write time)."""
    return float(record.get("u", record["t"]))


@pytest.mark.parametrize("backend", ["postgres", "sqlalchemy-sqlite"])
async def test_a_write_over_sql_reads_its_tail_in_its_own_transaction(
    backend: str, tmp_path: Any
) -> None:
    if backend in SERVICES:
        require_service(*SERVICES[backend])
    store = Store(backend, tmp_path)
    try:
        session_id = sid()
        clock = FakeClock(1000.0)
        stack = TTLSession(store.open(session_id), ttl=HOUR, clock=clock, purge_every=None)
        await stack.add_items([user("q1"), call("c1")])  # type: ignore[list-item]
        transactions: list[int] = []

        def began_one(conn: Any) -> None:
            transactions.append(1)

        event.listen(store.engine.sync_engine, "begin", began_one)
        try:
            clock.tick(60)
            await stack.add_items([output("c1")])  # type: ignore[list-item]
        finally:
            event.remove(store.engine.sync_engine, "begin", began_one)
        assert transactions == [1]  # the tail read and the insert: one transaction
        records = await stored(store, session_id)
        assert [r["item"] for r in records] == [user("q1"), call("c1"), output("c1")]
        assert began(records[2]) == 1000.0  # the output's unit began with its stored call
    finally:
        await store.aclose()


@pytest.mark.parametrize("backend", ["postgres", "sqlalchemy-sqlite", "sqlite-file", "memory"])
async def test_stamps_follow_what_other_writers_did_since_this_stack_read(
    backend: str, tmp_path: Any
) -> None:
    """Two stacks over one session, each with its own store object and clock: each write
    follows the stored tail as it is then (a call the other added, a pop, a clear)."""
    if backend in SERVICES:
        require_service(*SERVICES[backend])
    store = Store(backend, tmp_path)
    try:
        session_id = sid()
        clock_a, clock_b = FakeClock(100.0), FakeClock(200.0)
        a = TTLSession(store.open(session_id), ttl=HOUR, clock=clock_a, purge_every=None)
        b = TTLSession(store.open(session_id), ttl=HOUR, clock=clock_b, purge_every=None)

        await a.add_items([user("q1"), call("c1")])  # type: ignore[list-item]
        assert await b.get_items() == [user("q1"), call("c1")]
        await b.add_items([output("c1")])  # type: ignore[list-item]  # at 200, after A's call
        assert began((await stored(store, session_id))[-1]) == 100.0

        # B pops its output, then A's next write continues A's own call again.
        assert await b.pop_item() == output("c1")
        clock_a.set(150.0)
        await a.add_items([output("c1")])  # type: ignore[list-item]
        assert began((await stored(store, session_id))[-1]) == 100.0

        # A read, then B cleared and wrote a call of its own: A's output of that call
        # continues B's call, not anything A saw before the clear.
        assert await a.get_items() == [user("q1"), call("c1"), output("c1")]
        await b.clear_session()
        clock_b.set(300.0)
        await b.add_items([user("q2"), call("c2")])  # type: ignore[list-item]
        clock_a.set(400.0)
        await a.add_items([output("c2")])  # type: ignore[list-item]
        records = await stored(store, session_id)
        assert [r["item"] for r in records] == [user("q2"), call("c2"), output("c2")]
        assert [began(r) for r in records] == [300.0, 300.0, 300.0]
        assert await a.get_items() == [user("q2"), call("c2"), output("c2")]
    finally:
        await store.aclose()


@pytest.mark.parametrize("backend", ["postgres", "sqlalchemy-sqlite"])
async def test_a_write_after_another_writers_idle_history_starts_a_generation(
    backend: str, tmp_path: Any
) -> None:
    if backend in SERVICES:
        require_service(*SERVICES[backend])
    store = Store(backend, tmp_path)
    try:
        session_id = sid()
        clock_a, clock_b = FakeClock(0.0), FakeClock(0.0)
        options: dict[str, Any] = {"ttl": None, "idle_ttl": 50.0, "purge_every": None}
        a = TTLSession(store.open(session_id), clock=clock_a, **options)
        b = TTLSession(store.open(session_id), clock=clock_b, **options)
        await a.add_items([user("old")])  # type: ignore[list-item]
        assert await a.get_items() == [user("old")]
        clock_b.set(100.0)  # A's history has been idle for longer than idle_ttl
        await b.add_items([user("new")])  # type: ignore[list-item]
        records = await stored(store, session_id)
        assert [r.get("g", 0) for r in records] == [0, 1]
        assert all(MARKER in r for r in records)
        clock_a.set(100.0)
        assert await a.get_items() == [user("new")]
    finally:
        await store.aclose()
