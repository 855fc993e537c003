"""Bad input, whichever layer is on top: refused whole, named, and the session stays usable.

And values in a store that are not items (written around memstack): a typed error naming
them, and ``memstack repair`` to show and remove them.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from agents import SQLiteSession

from memstack import (
    ItemValidationError,
    LayerSpec,
    StoredItemError,
    TTLSession,
    build_stack,
)
from memstack.compaction import Mask
from memstack.crypto import generate_key

from .conftest import Store
from .test_cli import memstack

KEY = generate_key()
TOPS: dict[str, dict[str, Any]] = {
    "passthrough": {},
    "window": {"max_items": 50},
    "ttl": {"ttl": 3600},
    "encrypted": {"key": KEY},
    "compaction": {"strategy": Mask()},
}
GOOD = {"role": "user", "content": "hello"}
BAD_BATCHES: list[tuple[Any, str]] = [
    ([GOOD, None], "item 1 must be a dict, not NoneType"),
    ([GOOD, "not a dict"], "item 1 must be a dict, not str"),
    ([GOOD, {"role": "user", "content": float("nan")}], r"item 1 \(message\), field content"),
    ([GOOD, {"role": "user", "content": object()}], "a object is not JSON-serialisable"),
    (
        [GOOD, {"role": "user", "content": [{"type": "input_text", "text": "cut \ud83d"}]}],
        r"field content\[0\]\.text: '\\ud83d' at 4 is a lone surrogate",
    ),
    (
        [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "\udc00"}],
        r"item 0 \(function_call\), field arguments",
    ),
    ({"role": "user", "content": "a dict, not a list"}, "items must be a list, not dict"),
    ("text", "items must be a list, not str"),
]


@pytest.mark.parametrize("top", TOPS)
async def test_bad_input_is_refused_whole_on_every_top_and_backend(store: Store, top: str) -> None:
    # The top layer over a pass-through below, so validation is the top's, not the store's.
    stack = build_stack(
        store.open(f"bad-{uuid.uuid4().hex[:10]}"),
        [LayerSpec("passthrough"), LayerSpec(top, TOPS[top])],
    )
    await stack.add_items([GOOD])
    for batch, message in BAD_BATCHES:
        with pytest.raises(ItemValidationError, match=message) as caught:
            await stack.add_items(batch)
        assert caught.value.layer == type(stack).__name__
        assert await stack.get_items() == [GOOD]  # nothing of the batch was stored
    await stack.add_items([{"role": "assistant", "content": "still usable 🙂"}])
    assert len(await stack.get_items()) == 2
    await stack.clear_session()


async def _store_with_non_items(path: Path) -> SQLiteSession:
    store = SQLiteSession("s1", db_path=path)
    await store.add_items(
        [GOOD, None, "not a dict", {"role": "assistant", "content": "hi"}]  # type: ignore[list-item]
    )
    return store


@pytest.mark.parametrize("top", ["window", "compaction"])
async def test_a_stored_non_item_raises_a_typed_error_naming_it(top: str, tmp_path: Path) -> None:
    store = await _store_with_non_items(tmp_path / "s.db")
    stack = build_stack(store, [LayerSpec(top, TOPS[top])])
    with pytest.raises(
        StoredItemError, match="stored value 3 from the newest is a NoneType"
    ) as caught:
        await stack.get_items()
    assert caught.value.position == 3 and caught.value.session_id == "s1"
    store.close()


def test_repair_shows_then_removes_stored_non_items(tmp_path: Path) -> None:
    import asyncio

    db = tmp_path / "s.db"
    asyncio.run(_store_with_non_items(db)).close()
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        f'[backend]\nurl = "sqlite:///{db}"\n\n[[layers]]\nlayer = "window"\nmax_items = 9\n'
    )
    shown = memstack("repair", str(recipe), "--session", "s1")
    assert shown.returncode == 0, shown.stderr
    assert "NoneType" in shown.stdout and "'not a dict'" in shown.stdout
    assert "2 of 4 stored values are not items" in shown.stdout
    removed = memstack("repair", str(recipe), "--session", "s1", "--remove")
    assert removed.returncode == 0, removed.stderr
    assert "removed 2" in removed.stdout
    store = SQLiteSession("s1", db_path=db)
    stack = build_stack(store, [LayerSpec("window", {"max_items": 9})])
    assert asyncio.run(stack.get_items()) == [GOOD, {"role": "assistant", "content": "hi"}]
    store.close()


async def test_ttl_on_top_refuses_an_empty_batch_of_the_wrong_type(tmp_path: Path) -> None:
    stack = TTLSession(SQLiteSession("s", db_path=tmp_path / "t.db"), ttl=60)
    with pytest.raises(ItemValidationError, match="must be a list, not tuple"):
        await stack.add_items(())  # type: ignore[arg-type]
