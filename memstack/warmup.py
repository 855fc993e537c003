"""Load at startup what a process's first read would load, so no request pays for it.

    >>> import asyncio, memstack
    >>> asyncio.run(memstack.warm_up())   # the default tokeniser's vocabulary

A new process reads its first session far slower than the next: it builds the tokeniser
(about 0.25 s of CPU for o200k), and imports and builds what the layers use on first use.
A server calls ``await memstack.warm_up(recipe)`` in its lifespan's startup, and its first
request then reads like the rest.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memstack.backends import open_backend
from memstack.recipes import Recipe, load_recipe
from memstack.tokens import DEFAULT_ENCODING
from memstack.vocab import load_encoding

__all__ = ["warm_up"]


async def warm_up(recipe: Recipe | str | Path | Mapping[str, Any] | None = None) -> None:
    """Load now what a process's first read would load: call it at startup, not per request.

    Loads the default tokeniser vocabulary; with a recipe, also runs its layers once over
    a throwaway in-memory store (a short history written and read back), so the modules,
    vocabularies and ciphers the first real read needs are in place, and loads the
    ``[memory]`` table's embedding model (~0.5 s and ~200 MB the first recall would
    otherwise pay), embedding one sentence. Memory layers are left out of the run: they
    read their own store. Nothing is written to the recipe's stores.
    """
    load_encoding(DEFAULT_ENCODING)
    if recipe is None:
        return
    loaded = recipe if isinstance(recipe, Recipe) else load_recipe(recipe)
    if loaded.memory:
        await _load_embedder(loaded.memory.get("embedder"))
    layers = tuple(spec for spec in loaded.layers if spec.layer != "memory")
    stack = dataclasses.replace(loaded, layers=layers).stack_over(
        open_backend("sqlite://:memory:", "memstack-warm-up")
    )
    await stack.add_items(_WARM_UP_HISTORY)
    await stack.get_items()
    await stack.get_items(limit=2)
    await stack.clear_session()


async def _load_embedder(name: str | None) -> None:
    """Load the model a memory store of this embedder name recalls with (process-shared)."""
    from memstack.memory.semantic import load_numpy
    from memstack.memory.vectors import DEFAULT_EMBEDDER, embedder_named

    embedder = embedder_named(DEFAULT_EMBEDDER if name is None else name)
    if embedder is not None:
        load_numpy()  # as a store does, before a worker thread embeds
        await asyncio.to_thread(embedder.embed, ["warm up"])


_WARM_UP_HISTORY: list[Any] = [
    {"role": "user", "content": "Where is my order 1042?"},
    {
        "type": "function_call",
        "call_id": "warm-1",
        "name": "find_order",
        "arguments": '{"order": 1042}',
    },
    {"type": "function_call_output", "call_id": "warm-1", "output": '{"status": "shipped"}'},
    {"role": "assistant", "content": "Order 1042 has shipped."},
]
