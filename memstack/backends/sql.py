"""Capability operations as SQL plans, written once for every SQL driver.

A plan is a generator that yields ``Query`` objects and receives each query's rows; it
holds the logic, a driver (sqlite3, aiosqlite, SQLAlchemy) only runs statements inside
one transaction. Parameters use the ``:name`` style that all three drivers accept.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from memstack.backends.capabilities import (
    Item,
    Predicate,
    StorageCapabilities,
    check_replacement,
)

Rows = list[tuple[Any, ...]]
Plan = Generator["Query", Rows, Any]

# Bound on ids per IN (...) list: under SQLite's and every server's parameter limits.
_CHUNK = 500


@dataclass(frozen=True)
class Query:
    sql: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Table:
    """Where one session's rows live and how the SDK backend orders them."""

    name: str
    session_id: str
    order: Sequence[str] = ("id",)

    def ordered(self, direction: str = "ASC") -> str:
        return ", ".join(f"{column} {direction}" for column in self.order)


def _encode(item: Item) -> str:
    return json.dumps(item, separators=(",", ":"))


def _decode(raw: Any) -> Item | None:
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def count(table: Table) -> Plan:
    rows = yield Query(
        f"SELECT COUNT(*) FROM {table.name} WHERE session_id = :sid", {"sid": table.session_id}
    )
    return int(rows[0][0])


def _oldest(table: Table, n: int, after: Any = None) -> Query:
    # ``after`` is an id; SDK stores never update ids, and ordering by (created_at, id)
    # agrees with id order for rows one process appended in sequence.
    params = {"sid": table.session_id, "n": n}
    where = "session_id = :sid"
    if after is not None:
        where += " AND id > :after"
        params["after"] = after
    return Query(
        f"SELECT id, message_data FROM {table.name} WHERE {where} "
        f"ORDER BY {table.ordered()} LIMIT :n",
        params,
    )


def _delete_ids(table: Table, ids: Sequence[Any]) -> Plan:
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        names = {f"i{k}": value for k, value in enumerate(chunk)}
        yield Query(
            f"DELETE FROM {table.name} WHERE id IN ({', '.join(':' + k for k in names)})",
            names,
        )


def delete_oldest(table: Table, n: int) -> Plan:
    if n <= 0:
        return 0
    rows = yield _oldest(table, n)
    yield from _delete_ids(table, [row[0] for row in rows])
    return len(rows)


def replace_oldest(
    table: Table, n: int, items: Sequence[Item], expect: Sequence[Item] | None
) -> Plan:
    check_replacement(n, items)
    if n == 0:
        return True
    rows = yield _oldest(table, n)
    if len(rows) < n:
        return False
    if expect is not None and [_decode(row[1]) for row in rows] != list(expect):
        return False
    # Rewriting rows in place keeps their ids and timestamps, hence their position.
    for (row_id, _), item in zip(rows, items, strict=False):
        yield Query(
            f"UPDATE {table.name} SET message_data = :data WHERE id = :id",
            {"data": _encode(item), "id": row_id},
        )
    yield from _delete_ids(table, [row[0] for row in rows[len(items) :]])
    return True


def delete_where_batch(
    table: Table, predicate: Predicate, batch_size: int, after: Any, prefix_only: bool
) -> Plan:
    """One batch of ``delete_where``; returns ``(deleted, last id seen or None, stop)``."""
    rows = yield _oldest(table, batch_size, after)
    doomed: list[Any] = []
    stop = len(rows) < batch_size
    for row_id, raw in rows:
        item = _decode(raw)
        if item is not None and predicate(item):
            doomed.append(row_id)
        elif prefix_only:
            stop = True
            break
    yield from _delete_ids(table, doomed)
    return len(doomed), (rows[-1][0] if rows else None), stop


def delete_written_before_batch(
    table: Table, cutoff: str, params: dict[str, Any], batch_size: int
) -> Plan:
    """One batch of ``delete_written_before``: rows whose ``created_at`` is below ``cutoff``.

    ``cutoff`` is a dialect's SQL expression for "the store's clock minus the age"; the
    comparison happens in the database, so neither the item nor the caller's clock counts.
    """
    rows = yield Query(
        f"SELECT id FROM {table.name} WHERE session_id = :sid AND created_at < {cutoff} "
        f"ORDER BY {table.ordered()} LIMIT :n",
        {"sid": table.session_id, "n": batch_size, **params},
    )
    yield from _delete_ids(table, [row[0] for row in rows])
    return len(rows)


def write_ages(table: Table, n: int, age: str) -> Plan:
    """Seconds since the store wrote each of the ``n`` oldest rows; ``age`` is the dialect's SQL."""
    rows = yield Query(
        f"SELECT {age} FROM {table.name} WHERE session_id = :sid "
        f"ORDER BY {table.ordered()} LIMIT :n",
        {"sid": table.session_id, "n": n},
    )
    return [max(0.0, float(row[0])) for row in rows]


def run_sync(cursor_execute: Any, plan: Plan) -> Any:
    """Drive ``plan`` with a blocking ``execute(sql, params) -> rows`` function."""
    try:
        query = next(plan)
        while True:
            query = plan.send(cursor_execute(query.sql, query.params))
    except StopIteration as done:
        return done.value


async def run_async(execute: Any, plan: Plan) -> Any:
    """Drive ``plan`` with an ``async execute(sql, params) -> rows`` function."""
    try:
        query = next(plan)
        while True:
            query = plan.send(await execute(query.sql, query.params))
    except StopIteration as done:
        return done.value


class PlanCapabilities(StorageCapabilities):
    """Capabilities of a SQL store: each operation is a plan run in one transaction."""

    def table(self) -> Table:
        raise NotImplementedError

    async def run(self, make_plan: Callable[[], Plan]) -> Any:
        """Run a fresh plan in one transaction of the store's own connection and lock.

        Takes a factory so a driver may retry a transaction that hit a busy store.
        """
        raise NotImplementedError

    def written_before(self, older_than: float) -> tuple[str, dict[str, Any]]:
        """SQL for "the store's clock minus ``older_than`` seconds", and its parameters."""
        raise NotImplementedError

    def write_age(self) -> str:
        """SQL for a row's age in seconds: the store's clock minus its ``created_at``."""
        raise NotImplementedError

    async def query(self, make_plan: Callable[[], Plan]) -> Any:
        """Run a plan that only reads: no write lock (``run`` by default)."""
        return await self.run(make_plan)

    async def count(self) -> int:
        return int(await self.query(lambda: count(self.table())))

    async def write_ages(self, n: int) -> list[float] | None:
        if n <= 0:
            return []
        ages: list[float] = await self.run(lambda: write_ages(self.table(), n, self.write_age()))
        return ages

    async def delete_oldest(self, n: int) -> int:
        return int(await self.run(lambda: delete_oldest(self.table(), n)))

    async def replace_oldest(
        self, n: int, items: Sequence[Item], *, expect: Sequence[Item] | None = None
    ) -> bool:
        check_replacement(n, items)
        plan = lambda: replace_oldest(self.table(), n, list(items), expect)  # noqa: E731
        return bool(await self.run(plan))

    async def delete_where(
        self, predicate: Predicate, *, batch_size: int = 500, prefix_only: bool = False
    ) -> int:
        total: int = 0
        after: Any = None
        while True:

            def batch(start: Any = after) -> Plan:
                return delete_where_batch(self.table(), predicate, batch_size, start, prefix_only)

            deleted, after, stop = await self.run(batch)
            total += int(deleted)
            if stop or after is None:
                return total

    async def delete_written_before(self, older_than: float, *, batch_size: int = 500) -> int:
        cutoff, params = self.written_before(older_than)
        total = 0
        while True:
            deleted = int(
                await self.run(
                    lambda: delete_written_before_batch(self.table(), cutoff, params, batch_size)
                )
            )
            total += deleted
            if deleted < batch_size:
                return total
