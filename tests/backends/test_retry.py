"""The retry policy (memstack.backends.retry): which errors it reruns, how long it waits, what it
says when it gives up. Waits go to an injected sleep; errors are the drivers' own classes,
wrapped as SQLAlchemy raises them (real ones, from real databases: test_retry_databases.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pymysql
import pytest
from sqlalchemy import exc as sa_exc

from memstack.backends.retry import DEFAULT_RETRY, NO_RETRY, Retry, transient_cause
from memstack.errors import BackendError, ConfigurationError, TransientError


def mysql_error(number: int, message: str) -> sa_exc.OperationalError:
    orig = pymysql.err.OperationalError(number, message)
    return sa_exc.OperationalError("INSERT INTO agent_messages …", {}, orig)


def postgres_error(kind: type[Exception], message: str) -> sa_exc.DBAPIError:
    raw = kind(message)
    try:  # as SQLAlchemy raises it: the driver's error is the cause
        raise sa_exc.DBAPIError("INSERT INTO agent_messages …", {}, raw) from raw
    except sa_exc.DBAPIError as wrapped:
        return wrapped


class Sleeps:
    """An injected sleep that records each wait instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def failing(errors: list[BaseException], result: str = "stored") -> Callable[[], Awaitable[str]]:
    """An operation that raises ``errors`` in turn, then returns ``result``; counts its calls."""
    calls: list[int] = []

    async def operation() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return result

    operation.calls = calls  # type: ignore[attr-defined]
    return operation


DEADLOCK = mysql_error(1213, "Deadlock found when trying to get lock; try restarting transaction")


def test_rolled_back_codes_are_transient() -> None:
    assert transient_cause(DEADLOCK) == "deadlock (MySQL 1213)"
    assert transient_cause(mysql_error(1205, "Lock wait timeout exceeded")) == (
        "lock wait timeout (MySQL 1205)"
    )
    serial = postgres_error(asyncpg.exceptions.SerializationError, "could not serialize")
    assert transient_cause(serial) == "serialization failure (SQLSTATE 40001)"
    dead = postgres_error(asyncpg.exceptions.DeadlockDetectedError, "deadlock detected")
    assert transient_cause(dead) == "deadlock (SQLSTATE 40P01)"


def test_outcome_unknown_and_other_errors_are_not_transient() -> None:
    # A connection lost mid-commit: the commit may have happened.
    assert transient_cause(mysql_error(2013, "Lost connection to server during query")) is None
    assert transient_cause(mysql_error(2006, "MySQL server has gone away")) is None
    lost = postgres_error(asyncpg.exceptions.ConnectionDoesNotExistError, "connection closed")
    assert transient_cause(lost) is None
    assert transient_cause(mysql_error(1062, "Duplicate entry")) is None
    assert transient_cause(postgres_error(asyncpg.exceptions.UniqueViolationError, "dup")) is None
    assert transient_cause(OSError(1213, "an errno, not MySQL's")) is None
    assert transient_cause(ValueError("40001")) is None


async def test_reruns_until_the_transaction_goes_through() -> None:
    sleeps = Sleeps()
    policy = Retry(attempts=4, backoff=0.1, max_backoff=10, sleep=sleeps, random=lambda: 0.5)
    operation = failing([DEADLOCK, DEADLOCK])
    assert await policy.call(operation, store="SQLAlchemySession(mysql://…)") == "stored"
    assert len(operation.calls) == 3  # type: ignore[attr-defined]
    assert sleeps.waits == [0.05, 0.1]  # full jitter: half of 0.1, then of 0.2


async def test_other_errors_propagate_at_once() -> None:
    sleeps = Sleeps()
    lost = mysql_error(2013, "Lost connection to server during query")
    operation = failing([lost])
    with pytest.raises(sa_exc.OperationalError) as raised:
        await Retry(sleep=sleeps).call(operation, store="s")
    assert raised.value is lost
    assert len(operation.calls) == 1  # type: ignore[attr-defined]
    assert sleeps.waits == []


async def test_gives_up_with_a_typed_error_naming_store_cause_and_retries() -> None:
    sleeps = Sleeps()
    operation = failing([DEADLOCK] * 5)
    policy = Retry(attempts=3, sleep=sleeps)
    with pytest.raises(TransientError) as raised:
        await policy.call(operation, store="SQLAlchemySession(mysql://db)", session_id="s1")
    error = raised.value
    assert isinstance(error, BackendError)
    assert (error.attempts, error.cause, error.session_id) == (3, "deadlock (MySQL 1213)", "s1")
    assert "SQLAlchemySession(mysql://db): deadlock (MySQL 1213); retried 2 times" in str(error)
    assert error.__cause__ is DEADLOCK
    assert len(operation.calls) == 3  # type: ignore[attr-defined]
    assert len(sleeps.waits) == 2


async def test_one_attempt_never_retries() -> None:
    operation = failing([DEADLOCK])
    with pytest.raises(TransientError, match="retried 0 times"):
        await Retry(attempts=1).call(operation, store="s")
    assert NO_RETRY.attempts == 1


def test_waits_double_up_to_the_bound() -> None:
    policy = Retry(attempts=6, backoff=0.1, max_backoff=0.5, jitter=False)
    assert policy.delays() == (0.1, 0.2, 0.4, 0.5, 0.5)
    assert Retry(attempts=3, backoff=0.1).delays(random=lambda: 0.0) == (0.0, 0.0)
    assert len(DEFAULT_RETRY.delays()) == DEFAULT_RETRY.attempts - 1


def test_is_immutable_and_shows_its_options() -> None:
    policy = Retry(attempts=3)
    with pytest.raises(AttributeError):
        policy.attempts = 9  # type: ignore[misc]
    assert repr(policy) == "Retry(attempts=3, backoff=0.02, max_backoff=1.0, jitter=True)"
    with pytest.raises(TypeError):
        Retry(3)  # type: ignore[misc]  # options are keyword-only


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"attempts": 0}, "attempts"),
        ({"attempts": 2.5}, "attempts"),
        ({"attempts": True}, "attempts"),
        ({"backoff": -1}, "backoff"),
        ({"max_backoff": "1s"}, "max_backoff"),
        ({"backoff": 2, "max_backoff": 1}, "max_backoff"),
    ],
)
def test_options_are_checked(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigurationError, match=field):
        Retry(**options)


def test_the_memory_store_takes_a_policy() -> None:
    from memstack.memory import MemoryStore

    policy = Retry(attempts=2)
    assert MemoryStore.from_url("sqlite://:memory:", retry=policy).parts.retry is policy
    assert MemoryStore.from_url("sqlite://:memory:").parts.retry is DEFAULT_RETRY
    with pytest.raises(ConfigurationError, match="retry must be"):
        MemoryStore.from_url("sqlite://:memory:", retry=3)  # type: ignore[arg-type]
