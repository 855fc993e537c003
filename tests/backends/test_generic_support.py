"""A minimal third-party Session, as a user might write one."""

from __future__ import annotations

from typing import Any

from memstack.testing.contract import run_contract

from ..sessions import PlainSession


async def test_contract_helper_accepts_a_users_session():
    stores: dict[str, PlainSession] = {}
    await run_contract(lambda sid: stores.setdefault(sid, PlainSession(sid)))


async def test_contract_helper_catches_a_broken_session():
    class Broken(PlainSession):
        async def pop_item(self) -> Any:
            return self.items.pop(0) if self.items else None  # pops the oldest

    import pytest

    stores: dict[str, PlainSession] = {}
    with pytest.raises(AssertionError, match="check_pop_item"):
        await run_contract(lambda sid: stores.setdefault(sid, Broken(sid)))
