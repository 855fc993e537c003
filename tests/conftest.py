"""Backends for the tests: real SQLite files and real servers on loopback.

``store_factory`` is parametrised over every backend. Service-backed ones skip with the
reason when their server is down, and fail instead when ``CI=true``. Override the
servers with MEMSTACK_TEST_POSTGRES_URL / _MYSQL_URL / _REDIS_URL.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlparse

import pytest
from agents import set_tracing_disabled
from agents.memory import Session

from memstack import cache
from memstack.backends import open_backend
from memstack.bench.transcripts import DATA_DIR, default_transcripts
from memstack.testing import InMemorySession
from memstack.testing.conversation import run_conversation

# Tests never export traces (and the SDK would warn without an API key).
set_tracing_disabled(True)


def pytest_configure(config: pytest.Config) -> None:
    # More than a hundred tests start a Python child (the CLI, kill -9 rounds, child pytests);
    # where PYTHONDONTWRITEBYTECODE is set, each compiled memstack's modules again (~0.15 s
    # of CPU each); the children may write __pycache__ (git-ignored) and reuse it.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        # pytest-xdist's controller, before any worker starts: the stores' default tables,
        # created once. Two workers creating them at one moment on a fresh database race
        # (PostgreSQL refuses the second CREATE with a unique violation on pg_type).
        asyncio.run(_create_default_tables())
    # The mutation check (tests/mutants.py) breaks one behaviour for a whole child run.
    if mutant := os.environ.get("MEMSTACK_MUTANT"):
        from hypothesis import Phase, settings

        from .mutants import apply

        apply(mutant, pytest.MonkeyPatch())
        # A failing example is all the check needs: none shrunk, none saved for later runs.
        settings.register_profile("mutant", phases=[Phase.explicit, Phase.generate], database=None)
        settings.load_profile("mutant")


POSTGRES_URL = os.environ.get(
    "MEMSTACK_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
MYSQL_URL = os.environ.get("MEMSTACK_TEST_MYSQL_URL", "mysql+aiomysql://root@127.0.0.1:3306/test")
REDIS_URL = os.environ.get("MEMSTACK_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
IN_CI = os.environ.get("CI", "").lower() == "true"

SessionFactory = Callable[[str], Session]


async def _create_default_tables() -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    for url in (POSTGRES_URL, MYSQL_URL):
        if _reachable(url):
            engine = create_async_engine(url)
            try:
                await open_backend(url, "tables", engine=engine).get_items(limit=1)
            finally:
                await engine.dispose()


@pytest.fixture(autouse=True)
def _default_cache_budget() -> Iterator[None]:
    """Each test starts at the default process cache budget: a shipped recipe sets its own
    (``[cache]``), and the budget would otherwise depend on which test ran before."""
    cache.configure(max_bytes=cache.DEFAULT_MAX_BYTES)
    yield


def _reachable(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 0), 1.0):
            return True
    except OSError:
        return False


def shared_data(name: str) -> Path:
    """A file of the team's data (``MEMSTACK_DATA``, default ``../shared/data``).

    The one locator the benchmarks use too. Skips when the file is absent (fails under
    ``CI=true``), so the suite runs wherever the data is, and says where it looked.
    """
    path = DATA_DIR / name
    if path.is_file():
        return path
    _missing(f"{path} not found")


def _missing(what: str) -> NoReturn:
    message = f"{what}; set MEMSTACK_DATA to the directory holding the shared data"
    if IN_CI:
        pytest.fail(f"CI=true: {message}")
    pytest.skip(message)


def shared_transcripts() -> list[Path]:
    """Every agent transcript of the team's data, through the same locator as ``shared_data``.

    For module-level parametrisation: when there are none, parametrise with ``[None]`` and
    call ``no_transcripts()`` on it, which skips (fails under ``CI=true``) saying why.
    """
    return default_transcripts()


def no_transcripts() -> NoReturn:
    _missing(f"{DATA_DIR}/*.jsonl: no transcripts")


def require_service(name: str, url: str) -> None:
    """Skip (or, under CI=true, fail) when the server behind ``url`` is not reachable."""
    if _reachable(url):
        return
    message = f"{name} is not reachable at {urlparse(url).netloc}; start it to run this test"
    if IN_CI:
        pytest.fail(f"CI=true: {message}")
    pytest.skip(message)


BACKENDS = [
    "memory",
    "sqlite-memory",
    "sqlite-file",
    "aiosqlite",
    "sqlalchemy-sqlite",
    "postgres",
    "mariadb",
    "redis",
]
# Stores that several sessions share (each in-memory session is a store of its own).
SHARED_BACKENDS = tuple(b for b in BACKENDS if b not in ("memory", "sqlite-memory"))
# Stores with their own per-item write time (the capability delete_written_before).
SQL_BACKENDS = tuple(backend for backend in BACKENDS if backend not in ("memory", "redis"))
SERVICES = {
    "postgres": ("PostgreSQL", POSTGRES_URL),
    "mariadb": ("MariaDB", MYSQL_URL),
    "redis": ("Redis", REDIS_URL),
}


class Store:
    """Opens sessions of one backend that share one store; closes what it opened."""

    def __init__(self, backend: str, tmp_path: Path) -> None:
        self.backend = backend
        self.url = {
            "sqlite-memory": "sqlite://:memory:",
            "sqlite-file": f"sqlite:///{tmp_path / 'store.db'}",
            "aiosqlite": f"aiosqlite:///{tmp_path / 'async.db'}",
            "sqlalchemy-sqlite": f"sqlite+aiosqlite:///{tmp_path / 'sa.db'}",
            "postgres": POSTGRES_URL,
            "mariadb": MYSQL_URL,
            "redis": REDIS_URL,
        }.get(backend, "memory://")
        self.opened: dict[str, Session] = {}
        self.all: list[Session] = []
        self.engine: Any = None
        # Each test gets its own Redis key prefix, so tests never see each other's keys.
        self.redis_prefix = f"memstack-test-{uuid.uuid4().hex[:8]}"

    def open(self, session_id: str) -> Session:
        # In-memory stores cannot be reopened; the same id returns the same session.
        if self.backend in ("memory", "sqlite-memory") and session_id in self.opened:
            return self.opened[session_id]
        session = self._open(session_id)
        self.opened.setdefault(session_id, session)
        self.all.append(session)
        return session

    def _open(self, session_id: str) -> Session:
        if self.backend == "memory":
            return InMemorySession(session_id)
        if self.backend == "redis":
            return open_backend(self.url, session_id, key_prefix=self.redis_prefix)
        if self.url.startswith(("sqlite+", "postgresql", "mysql")):
            if self.engine is None:
                from sqlalchemy.ext.asyncio import create_async_engine

                self.engine = create_async_engine(self.url)
            return open_backend(self.url, session_id, engine=self.engine)
        return open_backend(self.url, session_id)

    async def aclose(self) -> None:
        for session in self.all:
            close = getattr(session, "close", None)
            if close is not None:
                result = close()
                if hasattr(result, "__await__"):
                    await result
        if self.engine is not None:
            await self.engine.dispose()


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """One backend's store; parametrised over every backend."""
    backend = request.param
    if backend in SERVICES:
        require_service(*SERVICES[backend])
    opened = Store(backend, tmp_path)
    yield opened
    await opened.aclose()


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[Store]:
    """A file SQLite store, for tests that need one real backend but not all of them."""
    opened = Store("sqlite-file", tmp_path)
    yield opened
    await opened.aclose()


def runner_conversation(
    backend: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    wrap: Callable[[Session], Session],
) -> list[Any]:
    """The Runner conversation over ``wrap(store)`` on ``backend``; nothing may log a warning."""
    if backend in SERVICES:
        require_service(*SERVICES[backend])
    store = Store(backend, tmp_path)
    with caplog.at_level(logging.WARNING):
        remaining = run_conversation(
            lambda: wrap(store.open(f"runner-{uuid.uuid4().hex}")), cleanup=store.aclose
        )
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    # user, call, output, reply; user, call, output, reply: the third turn was undone.
    assert len(remaining) == 8
    return remaining
