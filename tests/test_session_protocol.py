"""A stack stands in for the SDK session it wraps: close(), how limits are passed, empty
writes on a closed store, and the SDK's Responses compaction protocol."""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from agents.memory import (
    OpenAIResponsesCompactionSession,
    Session,
    SQLiteSession,
    is_openai_responses_compaction_aware_session,
)

from memstack import ConfigurationError, LayerSpec, build_stack
from memstack.compaction import Mask
from memstack.crypto import generate_key
from memstack.layers import (
    CompactionSession,
    EncryptedSession,
    PassthroughSession,
    SlidingWindowSession,
    TTLSession,
)
from memstack.testing import InMemorySession, sample_items

from .conftest import REDIS_URL, Store, require_service

KEY = generate_key()

# Every layer, alone, with the options it needs.
LAYERS: dict[str, Callable[[Session], Session]] = {
    "passthrough": PassthroughSession,
    "ttl": lambda inner: TTLSession(inner, ttl=3600),
    "encrypted": lambda inner: EncryptedSession(inner, key=KEY),
    "window": lambda inner: SlidingWindowSession(inner, max_items=50),
    "compaction": lambda inner: CompactionSession(inner, strategy=Mask()),
}
ALL_LAYERS = [
    LayerSpec("ttl", {"ttl": 3600}),
    LayerSpec("encrypted", {"key": KEY}),
    LayerSpec("compaction", {"strategy": Mask()}),
    LayerSpec("window", {"max_items": 50}),
]


# -- close() -------------------------------------------------------------------------------
def test_a_stack_over_sqlite_closes_like_sqlite_synchronously(tmp_path):
    store = SQLiteSession("s", db_path=tmp_path / "s.db")
    stack = build_stack(store, ALL_LAYERS)
    assert stack.close() is None  # type: ignore[attr-defined]  # sync, as SQLiteSession's
    with pytest.raises(RuntimeError, match="closed"):
        store._check_not_closed()


async def test_a_stack_over_redis_closes_like_redis_asynchronously():
    require_service("Redis", REDIS_URL)
    from agents.extensions.memory import RedisSession

    from memstack.backends import open_backend

    store = open_backend(REDIS_URL, "close-test", key_prefix="memstack-close-test")
    stack = build_stack(store, ALL_LAYERS)
    closing = stack.close()  # type: ignore[attr-defined]
    assert inspect.isawaitable(closing)
    await closing
    # Its client is the process's (memstack.resources), as a SQL store's engine is: the
    # SDK's close() leaves a client it was given open, and memstack.dispose() closes it.
    assert await store.get_items() == []

    own = RedisSession.from_url("close-test", url=REDIS_URL, key_prefix="memstack-close-test")
    await build_stack(own, ALL_LAYERS).close()  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError):
        await own.get_items()  # a store that owns its client is closed through the stack


async def test_every_store_closes_through_every_layer(store: Store):
    for name, wrap in LAYERS.items():
        bare = store.open(f"close-{name}-{uuid.uuid4().hex}")
        stack = wrap(bare)
        await stack.add_items(sample_items(2))
        result = stack.close()  # type: ignore[attr-defined]
        if not callable(getattr(bare, "close", None)):
            # SQLAlchemySession has no close(): its engine's owner disposes of it.
            assert result is None
            assert len(await stack.get_items()) == 2
            continue
        if inspect.isawaitable(result):
            await result
        # The in-memory double keeps working after close(), and so does a Redis store
        # opened by URL: its client is the process's (closed by memstack.dispose()).
        if store.backend not in ("memory", "redis"):
            with pytest.raises(RuntimeError, match="closed"):
                await stack.get_items()


def test_a_store_without_close_gives_a_stack_whose_close_does_nothing():
    stack = PassthroughSession(_NoLimitSession())
    assert stack.close() is None  # type: ignore[attr-defined]


# -- how get_items passes limit ------------------------------------------------------------
class _KeywordLimitSession(InMemorySession):
    """A user's session whose limit is keyword-only, as some custom stores declare it."""

    async def get_items(self, *, limit: int | None = None) -> list[Any]:  # type: ignore[override]
        self.calls.append(limit)
        return await super().get_items(limit)

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.calls: list[int | None] = []


class _NoLimitSession:
    """A minimal session with no limit at all: it always returns everything."""

    def __init__(self) -> None:
        self.session_id, self.session_settings, self.items = "nolimit", None, []

    async def get_items(self) -> list[Any]:
        return list(self.items)

    async def add_items(self, items: list[Any]) -> None:
        self.items.extend(items)

    async def pop_item(self) -> Any:
        return self.items.pop() if self.items else None

    async def clear_session(self) -> None:
        self.items.clear()


@pytest.mark.parametrize("layer", list(LAYERS))
async def test_every_layer_passes_limit_by_keyword(layer):
    store = _KeywordLimitSession("kw")
    stack = LAYERS[layer](store)
    items = sample_items(6)
    await stack.add_items(items)
    assert await stack.get_items(limit=2) == items[-2:]
    assert await stack.get_items() == items
    assert await stack.pop_item() == items[-1]


@pytest.mark.parametrize("layer", ["passthrough", "encrypted"])
async def test_a_read_without_limit_passes_no_limit(layer):
    # Layers that do not need a bounded read call get_items() exactly as the SDK does.
    store = _NoLimitSession()
    stack = LAYERS[layer](store)  # type: ignore[arg-type]
    await stack.add_items(sample_items(3))
    assert len(await stack.get_items()) == 3


# -- empty writes on a closed store ----------------------------------------------------------
@pytest.mark.parametrize("layer", list(LAYERS))
async def test_an_empty_write_to_a_closed_store_fails_as_the_store_does(layer, tmp_path):
    store = SQLiteSession("closed", db_path=tmp_path / "c.db")
    stack = LAYERS[layer](store)
    store.close()
    with pytest.raises(RuntimeError, match="closed") as bare:
        await store.add_items([])
    with pytest.raises(type(bare.value), match="closed"):
        await stack.add_items([])


# -- the SDK's Responses compaction session -------------------------------------------------
@pytest.mark.parametrize("layer", list(LAYERS))
def test_wrapping_the_sdks_compaction_session_is_refused(layer):
    sdk = OpenAIResponsesCompactionSession("c", underlying_session=InMemorySession("c"))
    assert is_openai_responses_compaction_aware_session(sdk)
    with pytest.raises(ConfigurationError, match="ResponsesCompact") as refused:
        LAYERS[layer](sdk)
    assert "OpenAIResponsesCompactionSession" in str(refused.value)


def test_a_stack_does_not_claim_the_sdks_compaction_protocol():
    # memstack compacts inside its own layer; the Runner must not call run_compaction on it.
    stack = build_stack(InMemorySession("c"), ALL_LAYERS)
    assert not is_openai_responses_compaction_aware_session(stack)


def test_sample_items_round_trip_json():  # the items above are what the stores hold
    assert json.loads(json.dumps(sample_items(3))) == sample_items(3)
