"""Retrying a transaction the database refused and rolled back: deadlocks, serialisation failures.

    >>> import asyncio
    >>> from memstack.backends.retry import Retry
    >>> async def no_wait(seconds): pass
    >>> policy = Retry(attempts=3, backoff=0.01, sleep=no_wait)
    >>> policy.delays(random=lambda: 1.0)
    (0.01, 0.02)
    >>> asyncio.run(policy.call(lambda: asyncio.sleep(0, "stored"), store="demo"))
    'stored'

Concurrent writers to one session make MySQL/MariaDB pick a deadlock victim, and
PostgreSQL abort one of two transactions that wait on each other. The database rolls the
victim back whole and says so by its code, so running the same transaction again stores
each item once. A policy retries only those codes (``transient_cause``), and only around
a call that is one transaction: the caller knows that (a store's adapter, the memory
store), the policy does not. A lost connection is never retried, whatever it interrupted:
during a commit nobody knows whether the commit happened, and a second write could
store everything twice.
"""

from __future__ import annotations

import asyncio
import random as _random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from memstack.errors import ConfigurationError, TransientError

__all__ = ["DEFAULT_RETRY", "NO_RETRY", "Retry", "transient_cause"]

T = TypeVar("T")

# SQLSTATEs after which the server has aborted the whole transaction (PostgreSQL's codes).
_SQLSTATES = {"40001": "serialization failure", "40P01": "deadlock"}
# MySQL/MariaDB error numbers. 1213: InnoDB rolled the whole transaction back. 1205: only
# the waiting statement (unless innodb_rollback_on_timeout); the caller's transaction
# block rolls back the rest before it re-raises, and COMMIT never waits on a row lock, so
# the transaction cannot have committed.
_MYSQL = {1213: "deadlock", 1205: "lock wait timeout"}
_MYSQL_DRIVERS = ("pymysql", "aiomysql", "asyncmy", "MySQLdb", "mysql", "mariadb")


def transient_cause(exc: BaseException) -> str | None:
    """What made the database roll back the transaction behind ``exc``, or None if it may not
    have: ``"deadlock (MySQL 1213)"``, ``"serialization failure (SQLSTATE 40001)"``.

    Looks through SQLAlchemy's wrapper (``.orig``) and the cause chain for the driver's code;
    a MySQL error number first, since MySQL reports its deadlock as SQLSTATE 40001 too.
    """
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else current.__cause__
    for link in chain:
        if type(link).__module__.split(".")[0] in _MYSQL_DRIVERS and link.args:
            number = link.args[0]
            if isinstance(number, int) and number in _MYSQL:
                return f"{_MYSQL[number]} (MySQL {number})"
    for link in chain:
        for attribute in ("sqlstate", "pgcode"):
            state = getattr(link, attribute, None)
            if isinstance(state, str) and state in _SQLSTATES:
                return f"{_SQLSTATES[state]} (SQLSTATE {state})"
    return None


@dataclass(frozen=True, kw_only=True)
class Retry:
    """How often and how patiently to rerun a transaction the database rolled back."""

    #: Tries in all, the first included; 1 never retries.
    attempts: int = 6
    #: The longest wait before the first retry, in seconds; doubled for each next one.
    backoff: float = 0.02
    #: No wait is longer than this.
    max_backoff: float = 1.0
    #: Full jitter: each wait is uniform between 0 and its bound, so writers that
    #: deadlocked together do not meet again at the same instant.
    jitter: bool = True
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, repr=False)
    random: Callable[[], float] = field(default=_random.random, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or isinstance(self.attempts, bool):
            raise ConfigurationError(f"attempts must be an int ≥ 1, not {self.attempts!r}")
        if self.attempts < 1:
            raise ConfigurationError(f"attempts must be ≥ 1, not {self.attempts}")
        for name in ("backoff", "max_backoff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigurationError(f"{name} must be a number of seconds ≥ 0, not {value!r}")
        if self.max_backoff < self.backoff:
            raise ConfigurationError(
                f"max_backoff ({self.max_backoff}) must be ≥ backoff ({self.backoff})"
            )

    def delays(self, *, random: Callable[[], float] | None = None) -> tuple[float, ...]:
        """The wait before each retry, in order (``attempts - 1`` of them)."""
        draw = random or self.random
        bounds = (min(self.max_backoff, self.backoff * 2**n) for n in range(self.attempts - 1))
        return tuple(bound * draw() if self.jitter else bound for bound in bounds)

    async def call(
        self,
        operation: Callable[[], Awaitable[T]],
        *,
        store: str,
        session_id: str | None = None,
    ) -> T:
        """``await operation()``, rerun after a rollback the database reports, up to ``attempts``
        times; then ``TransientError`` naming ``store``, the cause and the retries.

        ``operation`` must be one transaction, begun and ended inside it; any other
        failure propagates unchanged on the first occurrence.
        """
        waits = self.delays()
        for retry in range(self.attempts):
            try:
                return await operation()
            except Exception as exc:
                cause = transient_cause(exc)
                if cause is None:
                    raise
                if retry == self.attempts - 1:
                    raise TransientError(
                        f"{store}: {cause}; retried {retry} "
                        f"{'time' if retry == 1 else 'times'}, rolled back each time, "
                        f"nothing stored: {type(exc).__name__}: {exc}",
                        attempts=self.attempts,
                        cause=cause,
                        session_id=session_id,
                    ) from exc
            await self.sleep(waits[retry])
        raise AssertionError("unreachable: the last attempt returns or raises")


#: What memstack's SQL stores and the memory store use unless given another policy.
DEFAULT_RETRY = Retry()
#: Never retry (one attempt).
NO_RETRY = Retry(attempts=1)
