"""Recipe-bound whole-store jobs on every backend: list, purge, rotate, audit."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from memstack import CapabilityError
from memstack.crypto import generate_key
from memstack.governance import StoreJobs
from memstack.testing import FakeClock

from ..conftest import SHARED_BACKENDS, Store

PROVIDER = "memstack.crypto:keyring_from_env"


async def _close(session: Any) -> None:
    result = session.close() if hasattr(session, "close") else None
    if result is not None:
        await result


def _recipe(store: Store, clock: FakeClock, *kids: str) -> dict[str, Any]:
    backend: dict[str, Any] = {"url": store.url}
    if store.backend == "redis":
        backend["key_prefix"] = store.redis_prefix
    elif store.backend in ("postgres", "mariadb"):  # shared databases: tables of our own
        backend["sessions_table"] = f"{store.redis_prefix.replace('-', '_')}_sessions"
        backend["messages_table"] = f"{store.redis_prefix.replace('-', '_')}_messages"
    return {
        "backend": backend,
        "governance": {"user_sessions": "{user}:{thread}"},
        "layers": [
            {"layer": "ttl", "ttl": 60, "clock": clock},
            {
                "layer": "encrypted",
                "keyring": {"provider": PROVIDER, "active": kids[0], "older": kids[1:]},
            },
            {"layer": "redact", "strategies": {"email": "vault"}, "key": {"env": "JOBS_OLD"}},
        ],
    }


@pytest.mark.parametrize("store", SHARED_BACKENDS, indirect=True)
async def test_jobs_over_every_backend(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBS_OLD", generate_key())
    monkeypatch.setenv("JOBS_NEW", generate_key())
    clock = FakeClock()
    tag = uuid.uuid4().hex[:8]
    ids = [f"ann-{tag}:t1", f"bob-{tag}:t1"]
    async with StoreJobs(_recipe(store, clock, "JOBS_OLD"), actor="tests") as jobs:
        for session_id in ids:
            stack = jobs.recipe.stack_over(jobs.open_store(session_id))
            await stack.add_items([{"role": "user", "content": f"{session_id} is a@b.io"}])
            await _close(stack.backend)
        mine = await jobs.sessions(f"ann-{tag}")
        assert [(info.session_id, info.items) for info in mine] == [(ids[0], 1)]

    async with StoreJobs(_recipe(store, clock, "JOBS_NEW", "JOBS_OLD")) as jobs:
        rotated = await jobs.rotate_all()
        assert {sid: rotated.per_session[sid] for sid in ids} == {sid: 1 for sid in ids}
        if store.backend == "redis":
            with pytest.raises(CapabilityError, match="no per-item write time"):
                await jobs.purge_all(older_than=0)
        clock.tick(61)
        purged = await jobs.purge_all()
        assert {sid: purged.per_session[sid] for sid in ids} == {sid: 1 for sid in ids}
        assert purged.extra["vault_entries"] >= 2  # both sessions are empty now
        assert not {sid for sid in ids} & set(await jobs.store.vault_sessions())
        records = await jobs.audit(2)
        assert [r.action for r in records] == ["rotate", "purge"]
