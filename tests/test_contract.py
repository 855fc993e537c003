"""The Session contract over every backend: bare, through one layer, through stacks."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from memstack import LayerSpec, build_stack
from memstack.crypto import generate_key
from memstack.memory import MemoryStore
from memstack.testing import CONTRACT_CHECKS
from memstack.testing.contract import tool_turn

from .conftest import Store

_KEY = generate_key()

# Stacks whose layers change nothing for the contract's histories (nothing expires, the
# window's budget holds them, no output is long enough to mask, nothing to summarise): each
# must answer exactly as the store itself does.
STACKS = {
    "bare": [],
    "passthrough": [LayerSpec("passthrough")],
    "passthrough x3": [LayerSpec("passthrough")] * 3,
    "ttl": [LayerSpec("ttl", {"ttl": "1d"})],
    "encrypted": [LayerSpec("encrypted", {"key": _KEY})],
    "window": [LayerSpec("window", {"max_tokens": 100_000})],
    "production order": [
        LayerSpec("ttl", {"ttl": "30d", "idle_ttl": "14d"}),
        LayerSpec("encrypted", {"key": _KEY}),
        LayerSpec(
            "compaction",
            {
                "keep_last_turns": 2,
                "trigger": {"tokens": 60_000, "target": 30_000},
                "strategy": [
                    {"mask": {"keep_last_turns": 2, "keep_last_outputs": 4, "min_chars": 400}},
                    {"summarize": {"max_tokens": 1500, "summarizer": "extractive"}},
                ],
            },
        ),
        LayerSpec("window", {"max_tokens": 100_000, "low_watermark": 0.7}),
    ],
}


@pytest.mark.parametrize("stack", list(STACKS))
@pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda check: check.__name__)
async def test_contract(store: Store, stack: str, check) -> None:
    await check(lambda session_id: build_stack(store.open(session_id), STACKS[stack]))


async def test_an_injected_block_counts_toward_limit(store: Store, tmp_path: Path) -> None:
    """The memory block is the oldest item of the view: ``limit=n`` is still n items."""
    memories = MemoryStore.from_url(f"sqlite:///{tmp_path / 'memories.db'}")
    await memories.remember("ana", "Ana is vegetarian", kind="preference")
    session = build_stack(
        store.open(f"memory-{uuid.uuid4().hex[:12]}"),
        [LayerSpec("memory", {"store": memories, "scope": "ana"}), LayerSpec("passthrough")],
    )
    history = tool_turn()
    await session.add_items(history)
    view = await session.get_items()
    assert view[0]["role"] == "developer" and "vegetarian" in view[0]["content"]
    assert view[1:] == history
    for n in range(len(view) + 2):
        expected = view[-n:] if n else []
        assert await session.get_items(limit=n) == expected, f"limit={n}"
        # Below the top too, where nothing repairs the view again.
        assert await session.inner.get_items(limit=n) == expected, f"limit={n}, below"
    await session.clear_session()
    await memories.close()
