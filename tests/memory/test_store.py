"""MemoryStore on SQLite, PostgreSQL and MariaDB: recall, precedence, scopes, forget, audit."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import update

from memstack.errors import BackendError, ConfigurationError
from memstack.memory import MemoryStore
from memstack.testing import FakeClock
from memstack.tokens import TokenCounter


async def test_recall_finds_relevant_memories_within_budget(
    memory: MemoryStore, scope: str
) -> None:
    await memory.remember(scope, "Ana is allergic to peanuts", kind="fact")
    await memory.remember(scope, "Ana prefers answers in Portuguese", kind="preference")
    await memory.remember(scope, "Ana's cat is called Miso", kind="fact")
    found = await memory.recall(scope, "Is there anything with peanuts she cannot eat?")
    assert found.memories[0].text == "Ana is allergic to peanuts"
    assert "peanuts" in found.text
    assert found.tokens == TokenCounter().count_text(found.text)

    for _ in range(40):
        await memory.remember(scope, "Ana mentioned peanuts again in a long story " * 3)
    small = await memory.recall(scope, "peanuts", max_tokens=60)
    assert 0 < len(small) < 40
    assert small.tokens <= 60


async def test_scopes_never_leak(memory: MemoryStore, scope: str) -> None:
    other = scope + "-other"
    await memory.remember(scope, "Secret project codename Bluebird")
    await memory.remember(other, "Shopping list: eggs")
    assert not await memory.recall(other, "Bluebird codename")
    assert [m.text for m in await memory.list_memories(other)] == ["Shopping list: eggs"]
    assert await memory.forget(other) == 1
    assert [m.text for m in await memory.recall(scope, "codename")] == [
        "Secret project codename Bluebird"
    ]


async def test_explicit_key_supersedes_and_inferred_does_not(
    memory: MemoryStore, scope: str, clock: FakeClock
) -> None:
    first = await memory.write(scope, "home_city", "Lives in Oslo")
    clock.tick(10)
    second = await memory.write(scope, "home_city", "Lives in Rome")
    clock.tick(10)
    await memory.remember(scope, "Lives in Paris", key="home_city", source="inferred")
    assert (await memory.read(scope, "home_city")).text == "Lives in Rome"  # type: ignore[union-attr]
    old = await memory.get(scope, first.id)
    assert old is not None and old.superseded_by == second.id
    texts = [m.text for m in await memory.recall(scope, "where does she live city")]
    assert "Lives in Oslo" not in texts
    assert texts.index("Lives in Rome") < texts.index("Lives in Paris")
    assert await memory.keys(scope) == ["home_city"]
    assert await memory.delete(scope, "home_city") == 3
    assert await memory.read(scope, "home_city") is None


async def test_expired_memories_are_not_recalled(
    memory: MemoryStore, scope: str, clock: FakeClock
) -> None:
    await memory.remember(scope, "Travelling in Japan this week", expires_at=clock() + 60)
    assert await memory.recall(scope, "Japan")
    clock.tick(61)
    assert not await memory.recall(scope, "Japan")
    assert await memory.purge_expired(scope) == 1
    assert await memory.list_memories(scope, include_inactive=True) == []


async def test_forget_one_memory_and_audit_trail_without_text(
    memory: MemoryStore, scope: str
) -> None:
    kept = await memory.remember(scope, "Likes jazz")
    gone = await memory.remember(scope, "Diagnosed with asthma in 2019", kind="fact")
    assert await memory.forget(scope, gone.id, actor="user") == 1
    assert [m.id for m in await memory.list_memories(scope, include_inactive=True)] == [kept.id]
    trail = await memory.history(gone.id)
    assert [(e.action, e.actor) for e in trail] == [("remembered", "api"), ("forgotten", "user")]
    assert "asthma" not in repr(trail)
    assert not await memory.recall(scope, "asthma")


async def test_consolidation_is_non_destructive_with_dry_run(
    memory: MemoryStore, scope: str, clock: FakeClock
) -> None:
    duplicate = await memory.remember(scope, "Prefers tea over coffee", kind="preference")
    clock.tick(5)
    await memory.remember(scope, "prefers TEA over coffee!", kind="preference")  # newer wins
    weak = await memory.remember(scope, "Might enjoy hiking", source="inferred", confidence=0.3)
    procedure = await memory.remember(scope, "Deploy with make release", kind="procedure")
    clock.tick(100 * 86_400)
    planned = await memory.consolidate(scope, dry_run=True)
    assert {(c.action, c.memory_id) for c in planned} == {
        ("merge", duplicate.id),
        ("expire", weak.id),
        ("flag", procedure.id),
    }
    assert len(await memory.list_memories(scope)) == 4  # dry run changed nothing
    applied = await memory.consolidate(scope)
    assert applied == planned
    assert len(await memory.list_memories(scope)) == 2
    assert len(await memory.list_memories(scope, include_inactive=True)) == 4  # nothing deleted
    flagged = await memory.get(scope, procedure.id)
    assert flagged is not None and flagged.needs_review
    assert (await memory.verify(scope, procedure.id)).needs_review is False
    assert await memory.consolidate(scope, dry_run=True) == []


async def test_bad_arguments_raise_typed_errors(memory: MemoryStore, scope: str) -> None:
    with pytest.raises(ConfigurationError, match="kind must be one of"):
        await memory.remember(scope, "x", kind="opinion")
    with pytest.raises(ConfigurationError, match="confidence"):
        await memory.remember(scope, "x", confidence=2)
    with pytest.raises(ConfigurationError, match="max_tokens"):
        await memory.recall(scope, "x", max_tokens=0)
    with pytest.raises(ConfigurationError, match="scope"):
        await memory.remember("", "x")
    with pytest.raises(ConfigurationError, match="SQL database"):
        MemoryStore.from_url("redis://127.0.0.1:6379/0")


async def test_schema_version_is_recorded(memory: MemoryStore) -> None:
    assert await memory.schema_version() == 1


async def test_tables_are_not_created_when_told_not_to(tmp_path: Path) -> None:
    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'none.db'}", create_tables=False)
    with pytest.raises(BackendError, match="no such table"):
        await store.remember("ana", "x")
    await store.close()


async def test_a_newer_schema_version_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'v.db'}"
    store = MemoryStore.from_url(url)
    await store.schema_version()
    async with store.engine.begin() as conn:
        await conn.execute(update(store.tables.meta).values(value="2"))
    await store.close()
    again = MemoryStore.from_url(url)
    with pytest.raises(ConfigurationError, match="schema version 2"):
        await again.recall("ana", "x")
    await again.close()


async def test_accents_fold_in_full_text_search(memory: MemoryStore, scope: str) -> None:
    await memory.remember(scope, "Zoë's birthday is in May")
    await memory.remember(scope, "Lunch with José at the Café Müller")
    for query in ("zoe birthday", "Zoë", "ZOE"):
        found = [m.text for m, _ in await memory.search(scope, query)]
        assert found == ["Zoë's birthday is in May"], query
    found = [m.text for m, _ in await memory.search(scope, "jose cafe muller")]
    assert found == ["Lunch with José at the Café Müller"]


async def test_write_stores_a_standing_fact(memory: MemoryStore, scope: str) -> None:
    await memory.write(scope, "home_city", "Lives in Porto")
    current = await memory.read(scope, "home_city")
    assert current is not None and current.kind == "fact"
    # The standing block shows it without a matching word in the query.
    recalled = await memory.recall(scope, "what should I cook tonight?", profile=True)
    assert [m.text for m in recalled] == ["Lives in Porto"]
    note = await memory.write(scope, "todo", "Buy stamps", kind="note")
    assert note.kind == "note"
