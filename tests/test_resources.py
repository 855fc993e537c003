"""Process-wide resources: engines, model clients and vocabularies shared, and disposed of once.

A server builds a stack per request (``from_recipe(…, session_id=…)``). What a stack
needs from outside (a database pool, an HTTP client for the summariser, a tokeniser)
must be the process's, not the stack's, and a dropped stack must leave nothing behind.
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import tracemalloc
import uuid
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

import memstack
from memstack import from_recipe, open_backend, resources
from memstack.compaction.summarizer import OpenAIChatSummarizer
from memstack.memory import MemoryStore
from tests.conftest import MYSQL_URL, POSTGRES_URL, REDIS_URL, require_service

API_KEY = "sk-res21-test-secret"


def summarising_recipe(url: str, **backend: Any) -> dict[str, Any]:
    """A stack like the production recipe's: TTL, compaction with a model summariser, window."""
    return {
        "backend": {"url": url, **backend},
        "layers": [
            {"layer": "ttl", "ttl": "30d"},
            {
                "layer": "compaction",
                "trigger": {"tokens": 60000, "target": 30000},
                "strategy": [
                    {"mask": {"keep_last_turns": 2}},
                    {
                        "summarize": {
                            "max_tokens": 1500,
                            "summarizer": {
                                "openai": {
                                    "model": "gpt-4.1-mini",
                                    "base_url": "http://127.0.0.1:9/v1",
                                    "api_key": {"env": "RES21_TEST_KEY"},
                                }
                            },
                        }
                    },
                ],
            },
            {"layer": "window", "max_tokens": 100000, "model": "gpt-4.1"},
        ],
    }


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RES21_TEST_KEY", API_KEY)


@pytest.fixture
async def fresh() -> AsyncIterator[None]:
    """Each test starts and ends with no process resources."""
    await memstack.dispose()
    yield
    await memstack.dispose()


def live(kind: type) -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if type(obj) is kind)


def summarizers_of(stack: Any) -> list[OpenAIChatSummarizer]:
    found = []
    for layer in memstack.iter_chain(stack):
        compactor = getattr(layer, "compactor", None)
        summarizer = getattr(compactor, "summarizer", None)
        if isinstance(summarizer, OpenAIChatSummarizer):
            found.append(summarizer)
    return found


# -- summarisers and model clients ---------------------------------------------------------


async def test_a_dropped_stack_frees_its_summariser(fresh: None, tmp_path: Path) -> None:
    recipe = summarising_recipe(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}")
    stack = from_recipe(recipe, session_id="s1")
    [summarizer] = summarizers_of(stack)
    gone = weakref.ref(summarizer)
    del stack, summarizer
    gc.collect()
    assert gone() is None


async def test_thirty_stacks_leave_no_summariser_alive(fresh: None, tmp_path: Path) -> None:
    recipe = summarising_recipe(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}")
    before = live(OpenAIChatSummarizer)
    stacks = [from_recipe(recipe, session_id=f"s{n}") for n in range(30)]
    assert live(OpenAIChatSummarizer) == before + 30
    del stacks
    assert live(OpenAIChatSummarizer) == before


async def test_summarisers_of_one_endpoint_share_one_client(fresh: None, tmp_path: Path) -> None:
    recipe = summarising_recipe(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}")
    first = summarizers_of(from_recipe(recipe, session_id="a"))[0]
    second = summarizers_of(from_recipe(recipe, session_id="b"))[0]
    assert first is not second
    assert first.client is second.client
    other = OpenAIChatSummarizer(model="m", base_url="http://127.0.0.1:9/v1", api_key="sk-other")
    assert other.client is not first.client
    assert resources.stats().model_clients == 2


async def test_the_api_key_is_in_no_repr(fresh: None) -> None:
    summarizer = OpenAIChatSummarizer(model="m", base_url="http://127.0.0.1:9/v1", api_key=API_KEY)
    assert summarizer.client.api_key == API_KEY
    shown = repr(summarizer) + repr(resources.stats()) + repr(resources.PROCESS)
    assert API_KEY not in shown


async def test_a_client_passed_in_is_used_as_is(fresh: None) -> None:
    from openai import AsyncOpenAI

    mine = AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-mine")
    summarizer = OpenAIChatSummarizer(model="m", client=mine)
    assert summarizer.client is mine
    assert resources.stats().model_clients == 0
    await mine.close()


# -- engines --------------------------------------------------------------------------------


async def test_stacks_of_one_url_share_one_engine(fresh: None, tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'a.db'}"
    first = open_backend(url, "a")
    second = open_backend(url, "b")
    assert first.engine.sync_engine is second.engine.sync_engine  # type: ignore[attr-defined]
    await second.add_items([{"role": "user", "content": "hi"}])
    assert await first.get_items() == []
    assert resources.stats().engines == 1
    other = open_backend(url, "c", engine_kwargs={"pool_size": 2})
    assert other.engine.sync_engine is not first.engine.sync_engine  # type: ignore[attr-defined]
    assert resources.stats().engines == 2


async def test_in_memory_sqlite_stays_private_to_each_store(fresh: None) -> None:
    first = MemoryStore.from_url("sqlite://:memory:")
    second = MemoryStore.from_url("sqlite://:memory:")
    await first.remember("u", "Prefers tea")
    assert not await second.recall("u", "tea")
    assert resources.stats().engines == 0
    await first.close()
    await second.close()


async def test_long_term_memory_shares_the_stores_pool(fresh: None, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    store = open_backend(f"sqlite+aiosqlite:///{tmp_path / 'm.db'}", "a")
    memory = MemoryStore.from_url(url)
    assert memory.engine.sync_engine is store.engine.sync_engine  # type: ignore[attr-defined]
    await memory.remember("u", "Prefers tea")
    assert [m.text for m in await memory.recall("u", "tea")] == ["Prefers tea"]


def test_opening_a_memory_store_outside_a_loop_opens_no_engine() -> None:
    """``memstack serve`` checks its recipe before uvicorn starts its loop: that check
    must not leave a pool behind on no loop (``/stats`` then showed two engines)."""
    asyncio.run(memstack.dispose())
    url = postgres()
    memory = MemoryStore.from_url(url)
    assert resources.stats().engines == 0

    async def recall() -> int:
        await memory.recall("res21-nobody", "tea")
        engines = resources.stats().engines
        await memory.close()
        await memstack.dispose()
        return engines

    assert asyncio.run(recall()) == 1


def run_in_thread(work: Any) -> Any:
    """``asyncio.run(work())`` in a new thread: a loop of its own."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(work()))
        except BaseException as exc:  # reported in the calling thread
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(60)
    if errors:
        raise errors[0]
    return result[0]


def postgres() -> str:
    require_service("PostgreSQL", POSTGRES_URL)
    return POSTGRES_URL


async def test_each_loop_gets_its_own_engine_and_both_work(fresh: None) -> None:
    url = postgres()
    stack = from_recipe(summarising_recipe(url), session_id=f"loops-{uuid.uuid4().hex}")
    engine = resources.engine(url)

    async def use() -> Any:
        await stack.add_items([{"role": "user", "content": "from a thread"}])
        await stack.get_items()
        return engine.sync_engine

    here = await use()
    there = run_in_thread(use)
    elsewhere = run_in_thread(use)
    assert len({id(here), id(there), id(elsewhere)}) == 3
    assert len(await stack.get_items()) == 3
    gc.collect()
    # The two threads' loops are gone, and their engines with them.
    assert resources.stats().engines == 1


# -- PostgreSQL connections --------------------------------------------------------------------


async def backend_connections(app: str) -> int:
    probe = create_async_engine(POSTGRES_URL)
    try:
        async with probe.connect() as conn:
            found = await conn.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :app"),
                {"app": app},
            )
            return int(found.scalar_one())
    finally:
        await probe.dispose()


def tagged(app: str) -> dict[str, Any]:
    return {"engine_kwargs": {"connect_args": {"server_settings": {"application_name": app}}}}


async def test_200_stacks_per_request_stay_within_one_pool(fresh: None) -> None:
    url = postgres()
    app = f"res21-{uuid.uuid4().hex[:8]}"
    recipe = summarising_recipe(url, **tagged(app))
    most = 0

    async def request(n: int) -> None:
        nonlocal most
        stack = from_recipe(recipe, session_id=f"{app}-{n % 20}")
        await stack.get_items()
        await stack.add_items([{"role": "user", "content": f"turn {n}"}])
        if n % 25 == 0:
            most = max(most, await backend_connections(app))

    await asyncio.gather(*(request(n) for n in range(200)))
    most = max(most, await backend_connections(app))
    # SQLAlchemy's default pool: 5 kept, 10 more under load.
    assert 0 < most <= 15
    assert resources.stats().engines == 1
    await memstack.dispose()
    assert await backend_connections(app) == 0


async def test_dispose_closes_every_connection_and_the_next_build_works(fresh: None) -> None:
    url = postgres()
    app = f"res21-{uuid.uuid4().hex[:8]}"
    recipe = summarising_recipe(url, **tagged(app))
    stack = from_recipe(recipe, session_id=app)
    await stack.add_items([{"role": "user", "content": "before"}])
    assert await backend_connections(app) == 1
    await memstack.dispose()
    assert await backend_connections(app) == 0
    assert resources.stats().engines == 0
    again = from_recipe(recipe, session_id=app)
    assert [item["content"] for item in await again.get_items()] == ["before"]  # type: ignore[index]
    # A stack built before dispose() works too: it finds the new pool.
    await stack.add_items([{"role": "user", "content": "after"}])
    assert len(await again.get_items()) == 2


async def test_mariadb_stores_share_one_engine(fresh: None) -> None:
    require_service("MariaDB", MYSQL_URL)
    first = open_backend(MYSQL_URL, f"res21-{uuid.uuid4().hex}")
    second = open_backend(MYSQL_URL, f"res21-{uuid.uuid4().hex}")
    await first.add_items([{"role": "user", "content": "hi"}])
    assert await second.get_items() == []
    assert first.engine.sync_engine is second.engine.sync_engine  # type: ignore[attr-defined]
    assert resources.stats().engines == 1


# -- Redis clients ----------------------------------------------------------------------------


async def redis_connections(name: str) -> int:
    import redis.asyncio as redis

    probe = redis.from_url(REDIS_URL)
    try:
        return sum(1 for client in await probe.client_list() if client.get("name") == name)
    finally:
        await probe.aclose()


async def test_redis_stacks_per_request_share_one_client(fresh: None) -> None:
    """Each RedisSession.from_url opened a client, a pool and a connection per stack."""
    require_service("Redis", REDIS_URL)
    name = f"res21-{uuid.uuid4().hex[:8]}"
    recipe = {
        "backend": {
            "url": REDIS_URL,
            "key_prefix": f"memstack-test:{name}",
            "redis_kwargs": {"client_name": name},
        },
        "layers": [{"layer": "ttl", "ttl": "30d"}],
    }

    async def request(n: int) -> None:
        stack = from_recipe(recipe, session_id=f"{name}-{n % 10}")
        await stack.get_items()
        await stack.add_items([{"role": "user", "content": f"turn {n}"}])

    for start in range(0, 100, 20):
        await asyncio.gather(*(request(n) for n in range(start, start + 20)))
    gc.collect()
    assert 0 < await redis_connections(name) <= 20  # one pool: at most one per request at once
    assert resources.stats().redis_clients == 1
    stack = from_recipe(recipe, session_id=f"{name}-3")
    turns = {f"turn {n}" for n in range(3, 100, 10)}
    assert {item["content"] for item in await stack.get_items()} == turns  # type: ignore[index]
    await memstack.dispose()
    assert await redis_connections(name) == 0
    assert resources.stats().redis_clients == 0
    assert len(await stack.get_items()) == 10  # a stack built before dispose() reopens


async def test_each_loop_gets_its_own_redis_client(fresh: None) -> None:
    require_service("Redis", REDIS_URL)
    name = f"res21-{uuid.uuid4().hex[:8]}"
    store = open_backend(REDIS_URL, name, key_prefix=f"memstack-test:{name}")
    client = resources.redis_client(REDIS_URL)

    async def use() -> Any:
        await store.add_items([{"role": "user", "content": "from a loop"}])
        await store.get_items()
        return client.clients.get()

    here = await use()
    there = run_in_thread(use)
    assert here is not there
    assert len(await store.get_items()) == 2
    await store.clear_session()


# -- memory stays flat -----------------------------------------------------------------------


def engines_alive() -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if type(obj) is AsyncEngine)


async def test_ten_thousand_stacks_built_and_dropped_leave_nothing(
    fresh: None, tmp_path: Path
) -> None:
    recipe = memstack.load_recipe(summarising_recipe(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}"))
    recipe.build("warm-up")  # the first build imports and loads what every build shares
    summarizers, engines = live(OpenAIChatSummarizer), engines_alive()
    tracemalloc.start()
    try:
        first = tracemalloc.take_snapshot()
        for n in range(10_000):
            stack = recipe.build(f"s{n}")
            if n % 100 == 0:  # as a request that summarises would
                assert summarizers_of(stack)[0].client is not None
        del stack
        gc.collect()
        grown = sum(
            stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(first, "filename")
        )
    finally:
        tracemalloc.stop()
    assert live(OpenAIChatSummarizer) == summarizers
    assert engines_alive() == engines
    assert resources.stats().engines == 1
    assert resources.stats().model_clients == 1
    # Flat: under a hundred bytes per stack (the issue measured ~0.8 MB per request).
    assert grown < 1 << 20, grown
    print(f"tracemalloc growth over 10,000 stacks: {grown} bytes")


def test_from_recipe_parses_a_file_once_while_it_is_unchanged(tmp_path: Path) -> None:
    from memstack import recipes

    path = tmp_path / "r.toml"
    path.write_text(
        '[backend]\nurl = "sqlite://:memory:"\n[[layers]]\nlayer = "window"\nmax_items = 5\n'
    )
    before = recipes._parsed.cache_info().misses
    first = from_recipe(str(path), session_id="a")
    from_recipe(str(path), session_id="b")
    assert recipes._parsed.cache_info().misses == before + 1
    path.write_text(path.read_text().replace("max_items = 5", "max_items = 7"))
    os.utime(path, ns=(1, 1))  # a new modification time whatever the clock's resolution
    second = from_recipe(str(path), session_id="c")
    assert "max_items=5" in repr(first) and "max_items=7" in repr(second)


# -- tokenisers and vocabularies -------------------------------------------------------------


def test_vocabularies_load_once_per_process() -> None:
    from memstack.tokens import TokenCounter
    from memstack.vocab import load_encoding

    first, second = TokenCounter("gpt-4.1"), TokenCounter("gpt-4.1")
    assert first.encoding is second.encoding is load_encoding("o200k_base")


WARM_UP_CHILD = """
import asyncio, json, os, sys
import memstack
import memstack.vocab as vocab
builds = []
build = vocab._build
vocab._build = lambda name, directory: builds.append(name) or build(name, directory)
os.chdir(sys.argv[1])
os.environ["ASSISTANT_KEY"] = memstack.crypto.generate_key()
before = len(vocab._SHIPPED)
asyncio.run(memstack.warm_up(sys.argv[2]))
loaded, misses = len(vocab._SHIPPED), len(builds)
modules = set(sys.modules)
from memstack.memory import minilm
models = dict(minilm._SHARED)

async def first_read():
    session = memstack.from_recipe(sys.argv[2], session_id="ana:t1")
    await session.add_items([{"role": "user", "content": "hello"}])
    await session.get_items()
    await memstack.dispose()

asyncio.run(first_read())
print(json.dumps({
    "before": before, "after": loaded, "misses": misses, "misses_after_read": len(builds),
    "new_memstack_modules": sorted(m for m in set(sys.modules) - modules if "memstack" in m),
    "models_after_warm_up": len(models),
    "same_models_after_read": all(minilm._SHARED[k] is v for k, v in models.items())
    and len(minilm._SHARED) == len(models),
}))
"""


def test_warm_up_loads_what_a_first_read_needs_and_writes_nothing(tmp_path: Path) -> None:
    """A server calls ``warm_up(recipe)`` at startup, so its first request reads like the rest.

    In a new process: the vocabulary is loaded by the warm-up, not by the first read, and
    the recipe's stores (the session file and the memory database) are not touched by it.
    """
    import json
    import subprocess
    import sys

    recipe = Path(__file__).resolve().parents[1] / "recipes" / "personal-assistant.toml"
    probe = subprocess.run(
        [sys.executable, "-c", WARM_UP_CHILD, str(tmp_path), str(recipe)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-2000:]
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    assert (found["before"], found["after"]) == (0, 1)  # loaded by the warm-up
    assert found["misses_after_read"] == found["misses"]  # not loaded again by the read
    left = ("memstack.memory", "memstack.governance")  # the memory layer's own, and its scope
    assert [m for m in found["new_memstack_modules"] if not m.startswith(left)] == []
    # The embedding model the first recall uses was loaded by the warm-up, not by the read.
    assert found["models_after_warm_up"] == 1 and found["same_models_after_read"]


async def test_warm_up_writes_nothing_to_the_recipes_stores(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    recipe = {
        "backend": {"url": f"sqlite:///{db}"},
        "layers": [{"layer": "ttl", "ttl": "30d"}, {"layer": "window", "max_tokens": 500}],
    }
    await memstack.warm_up(recipe)
    assert not db.exists()
    await memstack.warm_up()  # no recipe: the vocabulary only
