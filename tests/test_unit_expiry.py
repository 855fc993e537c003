"""Half a unit expires: in every order of the four layers, on every backend, and in every
shipped recipe with a TTL layer, no view the API would refuse, and what expired is gone.

A tool call written in one batch and its output in the next expire at different times when
TTL sits below encryption (it sees only envelopes). Whatever the order, the top of the stack
must never return the output without its call.
"""

from __future__ import annotations

import itertools
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest

from memstack import LayerSpec, TTLSession, build_stack
from memstack.compaction import Mask
from memstack.crypto import generate_key
from memstack.history import history_problems
from memstack.recipes import load_recipe
from memstack.testing import FakeClock

from .conftest import Store
from .test_shipped_recipes import (
    CONTRACT_OVERRIDES,
    SHIPPED,
    _dispose,
    _test_memory,
    _test_url,
)

HOUR = 3600.0
KEY = generate_key()
LAYER_NAMES = ("ttl", "encrypted", "compaction", "window")
ORDERS = list(itertools.permutations(LAYER_NAMES))


def _batches() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    tag = uuid.uuid4().hex[:6]
    first = [
        {"role": "user", "content": "what is the weather?"},
        {"type": "function_call", "call_id": f"c-{tag}", "name": "weather", "arguments": "{}"},
    ]
    second = [
        {"type": "function_call_output", "call_id": f"c-{tag}", "output": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
    ]
    third = [{"role": "user", "content": "and tomorrow?"}]
    return first, second, third


async def _expire_half_a_unit(session: Any, clock: FakeClock, ttl: TTLSession | None) -> int:
    """Write a call, later its output, keep the session busy past the call's ttl; check the
    views; return how many items were written."""
    first, second, third = _batches()
    written_items = len(first) + len(second)
    lifetime = (ttl.ttl if ttl else None) or HOUR
    step = min(lifetime, (ttl.idle_ttl if ttl else None) or lifetime) / 3
    written = clock.now
    await session.add_items(first)
    clock.tick(step)
    await session.add_items(second)  # the output joins its call later (an approval, say)
    while clock.now < written + lifetime:
        await session.add_items(third)  # activity, so that no idle expiry hides it all
        written_items += len(third)
        clock.tick(min(step, written + lifetime + 1 - clock.now))
    # Now the call has expired and its output has not.
    call_id = first[1]["call_id"]
    for _ in range(2):
        view = await session.get_items()
        assert history_problems(view) == [], (session, view)
        assert second[1] in view and third[0] in view  # what is live is still shown
        # ... and what expired is not: the first question, the call, and so its output.
        assert first[0] not in view, (session, view)
        assert all(item.get("call_id") != call_id for item in view), (session, view)
        await session.add_items([{"role": "assistant", "content": "Also sunny."}])
        written_items += 1
    return written_items


def _options(name: str, clock: FakeClock) -> dict[str, Any]:
    return {
        "ttl": {"ttl": HOUR, "clock": clock, "purge_every": 0},  # purge after every write
        "encrypted": {"key": KEY},
        "compaction": {"strategy": Mask(keep_last_turns=1, min_chars=0)},
        "window": {"max_items": 50},
    }[name]


@pytest.mark.parametrize("order", ORDERS, ids=lambda order: "-".join(order))
async def test_every_layer_order_on_every_backend(store: Store, order: tuple[str, ...]) -> None:
    clock = FakeClock()
    specs = [LayerSpec(name, _options(name, clock)) for name in order]
    raw = store.open(f"half-{uuid.uuid4().hex[:10]}")
    session = build_stack(raw, specs)
    written = await _expire_half_a_unit(session, clock, session.find(TTLSession))
    if order.index("ttl") < order.index("compaction"):
        # purge_every=0: the writes after the call expired purged it and the question
        # before it. (Above compaction, which cannot delete atomically, TTL only skips.)
        assert len(await raw.get_items()) <= written - 2, await raw.get_items()
    await session.clear_session()


def _has_ttl(path: Path) -> bool:
    return any(layer.get("layer") == "ttl" for layer in tomllib.loads(path.read_text())["layers"])


WITH_TTL = [path for path in SHIPPED if _has_ttl(path)]


def test_the_recipes_without_ttl_are_the_ones_that_promise_no_retention() -> None:
    # The expiry test below runs only recipes with a TTL layer (in the others nothing can
    # expire, and the test would check nothing); this names the others, so a recipe that
    # loses its TTL layer shows up here.
    without = sorted(path.stem for path in SHIPPED if not _has_ttl(path))
    assert without == ["coding-agent", "dev-sqlite", "personal-assistant"]


@pytest.mark.parametrize("path", WITH_TTL, ids=lambda path: path.stem)
async def test_every_shipped_recipe(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = ("SUPPORT_KEY", "CHAT_KEY_CURRENT", "PII_KEY_CURRENT", "PII_KEY_PREVIOUS")
    for name in (*keys, "PII_AUDIT_KEY", "ASSISTANT_KEY"):
        monkeypatch.setenv(name, generate_key())
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-used-the-trigger-never-fires-in-these-tests")
    base = load_recipe(path)
    recipe = load_recipe(
        path, url=_test_url(base.url, tmp_path), **CONTRACT_OVERRIDES.get(path.stem, {})
    )
    recipe = _test_memory(recipe, tmp_path)
    session = recipe.build(f"half-{uuid.uuid4().hex[:10]}")
    clock, ttl = FakeClock(), session.find(TTLSession)
    assert ttl is not None
    ttl.clock = clock  # the recipe's retention, on a clock the test drives
    try:
        await _expire_half_a_unit(session, clock, ttl)
    finally:
        await session.clear_session()
        await _dispose(session)
