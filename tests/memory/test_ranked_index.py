"""The terms index recall ranks from: ties at a term's cut, and tables made before it.

Each query term contributes its best 200 postings (``memstack.memory.fulltext``); when
more than that share the cut's impact, the ones kept are the highest memory ids, with
the ``(scope, term, impact, memory_id)`` index or without it, on every backend.
"""

from __future__ import annotations

import string
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from memstack.memory import MemoryStore
from memstack.memory.schema import ranked_index
from memstack.memory.text import query_term_counts

from .conftest import MEMORY_BACKENDS, memory_url

POSTINGS_PER_TERM = 200  # memstack.memory.fulltext._POSTINGS_PER_TERM
TIED = 260


def _word(i: int) -> str:
    """A distinct lowercase word per ``i`` (no digits: the tokeniser keeps letters)."""
    letters = string.ascii_lowercase
    return "zq" + "".join(letters[(i // 26**p) % 26] for p in range(3))


@pytest.fixture(params=MEMORY_BACKENDS)
async def prefixed(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryStore]:
    """A full-text store on tables of its own (dropped after), so an index can be dropped."""
    url = memory_url(request.param, tmp_path)
    store = MemoryStore.from_url(url, embedder=None, table_prefix=f"rk{uuid.uuid4().hex[:8]}_")
    yield store
    async with store.engine.begin() as conn:
        await conn.run_sync(store.tables.metadata.drop_all)
    await store.close()


async def _index_names(store: MemoryStore) -> set[str]:
    async with store.engine.connect() as conn:
        found = await conn.run_sync(lambda sync: inspect(sync).get_indexes(store.tables.terms.name))
    return {index["name"] for index in found}


async def _drop_index(store: MemoryStore, name: str) -> None:
    on = f" ON {store.tables.terms.name}" if store.engine.dialect.name != "sqlite" else ""
    if store.engine.dialect.name == "postgresql":
        on = ""
    async with store.engine.begin() as conn:
        await conn.execute(text(f"DROP INDEX {name}{on}"))


async def _kept(store: MemoryStore, scope: str) -> set[str]:
    async with store.parts.connect("test") as conn:
        terms = query_term_counts("apple")
        rows = await store.index.ranked(conn, scope, terms, 1_000, store.parts.now())
    return {row.id for row in rows}


async def test_ties_at_the_cut_keep_the_highest_ids_with_and_without_the_index(
    prefixed: MemoryStore,
) -> None:
    scope = "ties"
    # One batch, the same length: every "apple" posting has the same impact.
    memories = [
        prefixed.new_memory(scope, f"apple {_word(i)}", source="observed") for i in range(TIED)
    ]
    await prefixed.remember_many(memories)
    expected = set(sorted(m.id for m in memories)[-POSTINGS_PER_TERM:])

    assert await _kept(prefixed, scope) == expected
    name = str(ranked_index(prefixed.tables).name)
    await _drop_index(prefixed, name)
    assert name not in await _index_names(prefixed)
    assert await _kept(prefixed, scope) == expected


async def test_tables_made_before_the_index_get_it_when_opened(prefixed: MemoryStore) -> None:
    scope = "old"
    await prefixed.remember(scope, "apple orchard in spring")
    name = str(ranked_index(prefixed.tables).name)
    replaced = name.removesuffix("_ranked") + "_impact"
    # The tables as an older memstack made them: (scope, term, impact), no memory id.
    await _drop_index(prefixed, name)
    async with prefixed.engine.begin() as conn:
        terms = prefixed.tables.terms.name
        await conn.execute(text(f"CREATE INDEX {replaced} ON {terms} (scope, term, impact)"))
    assert name not in await _index_names(prefixed)

    reopened = MemoryStore(
        prefixed.engine, embedder=None, table_prefix=prefixed.tables.meta.name[: -len("y_meta")]
    )
    found = await reopened.search(scope, "apple", limit=5)
    names = await _index_names(prefixed)
    assert name in names and replaced not in names
    assert [memory.text for memory, _ in found] == ["apple orchard in spring"]
