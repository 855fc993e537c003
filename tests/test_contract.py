"""The Session contract over every backend: bare, through one layer, through a stack."""

from __future__ import annotations

import pytest

from memstack import LayerSpec, build_stack
from memstack.testing import CONTRACT_CHECKS

from .conftest import Store

STACKS = {
    "bare": [],
    "passthrough": [LayerSpec("passthrough")],
    "passthrough x3": [LayerSpec("passthrough")] * 3,
}


@pytest.mark.parametrize("stack", list(STACKS))
@pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda check: check.__name__)
async def test_contract(store: Store, stack: str, check) -> None:
    await check(lambda session_id: build_stack(store.open(session_id), STACKS[stack]))
