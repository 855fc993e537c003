"""The audit trail each change leaves (``memstack/memory/events.py``), on every backend."""

from __future__ import annotations

from memstack.memory import MemoryStore
from memstack.testing import FakeClock


async def test_each_change_leaves_one_event_with_actor_time_and_detail(
    memory: MemoryStore, scope: str, clock: FakeClock
) -> None:
    older = await memory.write(scope, "diet", "Vegetarian", actor="onboarding")
    clock.tick(10)
    newer = await memory.write(scope, "diet", "Vegan since March")
    clock.tick(10)
    await memory.verify(scope, newer.id, actor="support")
    clock.tick(10)
    await memory.forget(scope, newer.id, actor="user")
    start = 1_700_000_000.0

    older_trail = await memory.history(older.id)
    assert [(e.action, e.actor, e.at, dict(e.detail)) for e in older_trail] == [
        ("remembered", "onboarding", start, {}),
        ("superseded", "api", start + 10, {"superseded_by": newer.id, "reason": "same key"}),
    ]
    newer_trail = await memory.history(newer.id)
    assert [(e.action, e.actor, e.at, e.scope) for e in newer_trail] == [
        ("remembered", "api", start + 10, scope),
        ("verified", "support", start + 20, scope),
        ("forgotten", "user", start + 30, scope),
    ]
    assert "Vega" not in repr([*older_trail, *newer_trail])


async def test_forgetting_a_whole_scope_says_so_and_erasing_leaves_no_event(
    memory: MemoryStore, scope: str
) -> None:
    first = await memory.remember(scope, "Lives in Lyon")
    await memory.remember(scope, "Works nights")
    assert await memory.forget(scope, actor="job") == 2
    assert [(e.action, dict(e.detail)) for e in await memory.history(first.id)] == [
        ("remembered", {}),
        ("forgotten", {"whole_scope": True}),
    ]

    again = await memory.remember(scope, "Moved to Nantes")
    assert await memory.erase(scope) == 1
    assert await memory.history(first.id) == []
    assert await memory.history(again.id) == []


async def test_consolidation_logs_its_reasons(
    memory: MemoryStore, scope: str, clock: FakeClock
) -> None:
    weak = await memory.remember(scope, "Might enjoy hiking", source="inferred", confidence=0.3)
    procedure = await memory.remember(scope, "Deploy with make release", kind="procedure")
    clock.tick(100 * 86_400)
    changes = {c.memory_id: c for c in await memory.consolidate(scope, actor="nightly")}

    for memory_id, action in ((weak.id, "expired"), (procedure.id, "flagged")):
        *_, last = await memory.history(memory_id)
        assert (last.action, last.actor, last.at) == (action, "nightly", clock())
        assert dict(last.detail) == {"reason": changes[memory_id].reason}
