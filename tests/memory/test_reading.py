"""Recall's reading path: rank rows on their columns, decode only what it returns."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from memstack.crypto import Keyring, generate_key
from memstack.memory import HashingEmbedder, MemoryStore
from memstack.memory import reading as reading_module
from memstack.memory.cipher import MemoryCipher
from memstack.memory.models import Memory
from memstack.memory.reading import _plain_text
from memstack.memory.rows import row_values

TEXTS = [
    "Likes tea?",
    'He said "hi"',
    "two\nlines? yes",
    "Zoë — ok?",
    "back\\slash?",
    "tab\there",
    "\u0001control",
    "",
]


@pytest.mark.parametrize("text", TEXTS)
def test_the_text_read_without_decoding_is_the_decoded_text_or_none(text: str) -> None:
    memory = Memory(id="m", scope="s", text=text, context="asked?", data={"q": "why?"})
    payload = row_values(MemoryCipher(None), memory)["payload"]
    assert _plain_text(payload) in (None, text)
    sealed = row_values(MemoryCipher(Keyring.of(generate_key())), memory)
    assert _plain_text(sealed["payload"]) is None  # a sealed payload is always opened


def _noting_decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the memories a search decodes, in order."""
    opened: list[str] = []
    decode = reading_module.memory_from_row

    def counting(cipher: MemoryCipher, row: object) -> Memory:
        memory = decode(cipher, row)  # type: ignore[arg-type]
        opened.append(memory.id)
        return memory

    monkeypatch.setattr(reading_module, "memory_from_row", counting)
    return opened


async def test_only_the_returned_memories_are_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'r.db'}", embedder=HashingEmbedder())
    # The 45 memories tie on words, and the words side keeps ``limit`` of them by id: with
    # random ids the questions took those places about once in 400 runs, and the
    # statements left out competed on meaning alone, below two questions. Ids fix the cut.
    await store.remember_many(
        [
            replace(store.new_memory("ana", f"Ana went hiking with friend {n}"), id=f"s{n:03d}")
            for n in range(40)
        ]
        + [
            replace(store.new_memory("ana", f"Did Ana go hiking with friend {n}?"), id=f"t{n:03d}")
            for n in range(5)
        ]
    )
    opened = _noting_decodes(monkeypatch)
    found = await store.search("ana", "hiking with a friend", limit=5)
    assert len(found) == 5
    assert set(opened) == {memory.id for memory, _ in found}  # not the other 35 candidates
    # The questions were ranked with their weight, as before: none outranks a statement.
    assert not any(memory.text.endswith("?") for memory, _ in found)
    await store.close()


async def test_the_query_is_handed_to_the_embedding_worker_before_the_loop_reads_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker starts at once, not at the search's first wait: it embeds while the loop
    stems the query and opens its connection."""
    import threading

    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'r.db'}", embedder=HashingEmbedder())
    await store.remember("ana", "Ana went hiking")
    started = threading.Event()
    first_hop, terms = reading_module._first_hop, reading_module.query_term_counts
    seen: list[bool] = []

    def hop(*args: object) -> object:
        started.set()
        return first_hop(*args)  # type: ignore[arg-type]

    def stem(query: str) -> dict[str, int]:
        seen.append(started.wait(timeout=2.0))  # the loop has not waited yet
        return terms(query)

    monkeypatch.setattr(reading_module, "_first_hop", hop)
    monkeypatch.setattr(reading_module, "query_term_counts", stem)
    found = await store.search("ana", "hiking", limit=3)
    await store.close()
    assert seen == [True]
    assert [memory.text for memory, _ in found] == ["Ana went hiking"]


async def test_the_connection_goes_back_while_the_loop_ranks_and_decodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's rollback runs on SQLite's thread while the loop ranks and decodes what it
    returns: its hand-off there and back is off the recall's path."""
    from collections.abc import Callable

    import aiosqlite

    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'r.db'}", embedder=HashingEmbedder())
    await store.remember_many([store.new_memory("ana", f"Ana went hiking {n}") for n in range(5)])
    await store.search("ana", "warm up", limit=3)
    handed: list[str] = []
    execute = aiosqlite.Connection._execute

    async def noted(self: aiosqlite.Connection, fn: Callable[..., Any], *a: Any, **k: Any) -> Any:
        name = getattr(fn, "__name__", "?")
        handed.append(name)
        result = await execute(self, fn, *a, **k)
        handed.append(f"{name} done")
        return result

    seen: list[list[str]] = []
    decode = reading_module.memory_from_row

    def noting(cipher: MemoryCipher, row: object) -> Memory:
        seen.append(list(handed))
        return decode(cipher, row)  # type: ignore[arg-type]

    monkeypatch.setattr(aiosqlite.Connection, "_execute", noted)
    monkeypatch.setattr(reading_module, "memory_from_row", noting)
    found = await store.search("ana", "hiking", limit=3)
    after = list(handed)
    await store.close()
    assert len(found) == 3
    assert seen and all(s[-1] == "rollback" for s in seen)  # handed over, not yet back
    assert after[-2:] == ["rollback", "rollback done"]  # and back before the search returned


async def test_reads_on_postgresql_run_outside_a_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each statement reads its own snapshot at READ COMMITTED anyway: no BEGIN and no
    ROLLBACK round trip around a recall's reads."""
    import uuid

    import memstack.memory.fulltext as fulltext
    import memstack.memory.reading as reading

    from ..conftest import POSTGRES_URL, require_service

    require_service("PostgreSQL", POSTGRES_URL)
    in_transaction: list[bool] = []

    def watched(fetch: Any) -> Any:
        async def fetch_all(conn: Any, *args: Any, **kwargs: Any) -> Any:
            found = await fetch(conn, *args, **kwargs)
            raw = await conn.get_raw_connection()
            in_transaction.append(raw.driver_connection.is_in_transaction())
            return found

        return fetch_all

    monkeypatch.setattr(fulltext, "fetch_all", watched(fulltext.fetch_all))
    monkeypatch.setattr(reading, "fetch_all", watched(reading.fetch_all))
    store = MemoryStore.from_url(POSTGRES_URL, embedder=HashingEmbedder())
    scope = f"autocommit-{uuid.uuid4().hex[:8]}"
    try:
        await store.remember(scope, "Allergic to peanuts", kind="fact")
        await store.remember(scope, "Lives in Lisbon near the river", kind="fact")
        found = await store.recall(scope, "does she have a peanut allergy?")
        assert found.memories[0].text == "Allergic to peanuts"
    finally:
        await store.forget(scope)
        await store.close()
    assert in_transaction and not any(in_transaction)


# -- failures after the first statements: reported, and the connection goes back --------
HIKES = [f"Ana went hiking with friend {n} near the lake at dawn" for n in range(12)]


async def _hiking_store(tmp_path: Path, **options: object) -> MemoryStore:
    store = MemoryStore.from_url(
        f"sqlite:///{tmp_path / 'r.db'}",
        embedder=HashingEmbedder(),
        clock=lambda: 1_700_000_000.0,  # the same precedence in every search
        **options,
    )
    await store.remember_many(
        [replace(store.new_memory("ana", text), id=f"h{n:03d}") for n, text in enumerate(HIKES)]
    )
    await store.search("ana", "warm up", limit=3)
    return store


def _noting_statements(
    monkeypatch: pytest.MonkeyPatch, handed: list[str], fail_expansion: bool = False
) -> None:
    """Note each call handed to aiosqlite's thread (the expansion's statement as
    ``impacts``) and its return; with ``fail_expansion``, that statement fails there."""
    import sqlite3
    from collections.abc import Callable

    import aiosqlite

    execute = aiosqlite.Connection._execute

    async def noted(self: aiosqlite.Connection, fn: Callable[..., Any], *a: Any, **k: Any) -> Any:
        sql = a[0] if a and isinstance(a[0], str) else ""
        name = "impacts" if "memory_id IN" in sql and "term IN" in sql else fn.__name__
        handed.append(name)
        if name == "impacts" and fail_expansion:

            def failing(*_: Any) -> Any:
                raise sqlite3.OperationalError("disk I/O error")

            fn = failing
        result = await execute(self, fn, *a, **k)
        handed.append(f"{name} done")
        return result

    monkeypatch.setattr(aiosqlite.Connection, "_execute", noted)


async def test_a_failed_expansion_statement_is_reported_and_the_connection_goes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstack.errors import BackendError

    store = await _hiking_store(tmp_path)
    handed: list[str] = []
    _noting_statements(monkeypatch, handed, fail_expansion=True)
    with pytest.raises(BackendError, match="disk I/O error"):
        await store.search("ana", "hiking with a friend", limit=5)
    assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    monkeypatch.undo()
    assert len(await store.search("ana", "hiking with a friend", limit=5)) == 5
    await store.close()


async def test_a_failed_embedding_is_reported_and_the_connection_goes_back(
    tmp_path: Path,
) -> None:
    store = await _hiking_store(tmp_path)
    embedder = store.semantic.embedder  # type: ignore[union-attr]

    class Broken(RuntimeError):
        pass

    def broken(texts: object) -> list[list[float]]:
        raise Broken("no model")

    embedder.embed = broken  # type: ignore[method-assign]
    with pytest.raises(Broken):
        await store.search("ana", "hiking with a friend", limit=5)
    assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    await store.close()


async def test_without_expansion_only_the_returned_memories_are_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstack.memory.recall_policy import RecallPolicy

    store = await _hiking_store(tmp_path, recall_policy=RecallPolicy(expansion=0))
    handed: list[str] = []
    _noting_statements(monkeypatch, handed)
    opened = _noting_decodes(monkeypatch)
    found = await store.search("ana", "hiking with a friend", limit=5)
    await store.close()
    assert "impacts" not in handed
    assert sorted(opened) == sorted(memory.id for memory, _ in found)
