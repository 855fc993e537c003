"""A ``MemoryStore`` on every SQL backend, with a fake clock; scopes unique per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memstack.memory import MemoryStore
from memstack.testing import FakeClock

from ..conftest import MYSQL_URL, POSTGRES_URL, require_service

MEMORY_BACKENDS = ["sqlite", "postgres", "mariadb"]


def memory_url(backend: str, tmp_path: Path) -> str:
    if backend == "postgres":
        require_service("PostgreSQL", POSTGRES_URL)
        return POSTGRES_URL
    if backend == "mariadb":
        require_service("MariaDB", MYSQL_URL)
        return MYSQL_URL
    return f"sqlite:///{tmp_path / 'memory.db'}"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000.0)


@pytest.fixture(params=MEMORY_BACKENDS)
async def memory(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[MemoryStore]:
    store = MemoryStore.from_url(memory_url(request.param, tmp_path), clock=clock)
    yield store
    await store.close()


@pytest.fixture
def scope() -> str:
    return f"user-{uuid.uuid4().hex[:12]}"
