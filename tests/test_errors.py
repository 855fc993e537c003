"""The error tree: what each memstack error also is, for code that catches builtins."""

from __future__ import annotations

import json

import pytest

from memstack import ItemValidationError, MemstackError
from memstack.history import validate_items
from memstack.layers import PassthroughSession
from memstack.testing import InMemorySession


def test_item_validation_error_is_also_a_type_error_like_the_sdks():
    # The SDK's own stores raise TypeError for an item json.dumps cannot serialise.
    with pytest.raises(TypeError) as sdk:
        json.dumps({"role": "user", "content": object()})
    with pytest.raises(TypeError) as ours:
        validate_items([{"role": "user", "content": object()}])
    assert isinstance(ours.value, ItemValidationError)
    assert isinstance(ours.value, MemstackError)
    assert isinstance(ours.value, ValueError)  # kept: code written against 0.x catches this
    assert type(sdk.value) is TypeError


async def test_code_catching_type_error_catches_a_refused_item_from_a_stack():
    stack = PassthroughSession(InMemorySession("s"))
    try:
        await stack.add_items(["not a dict"])  # type: ignore[list-item]
    except TypeError as exc:
        assert "item 0" in str(exc)
    else:  # pragma: no cover - the refusal is what is under test
        pytest.fail("a non-dict item was accepted")
