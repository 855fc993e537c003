"""Store-wide operations on SQL stores, written once as plans for every SQL driver.

The plans (``memstack.backends.sql``'s generator style) run inside one transaction of
the store's own connection: the SDK SQLite sessions' write connection and lock, or the
SQLAlchemy engine. Side tables are created on first use with types every supported
database accepts.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from agents.memory import Session, SQLiteSession

from memstack.backends import sql
from memstack.backends.sql import Plan, Query
from memstack.backends.translate import store_errors
from memstack.backends.whole_base import AuditRow, SessionInfo, WholeStore, as_utc, chunks

__all__ = ["SqlWholeStore", "Tables", "sql_whole_store"]

AUDIT_COLUMNS = ("record_id", "at", "action", "actor", "scope", "counts", "digest")


@dataclass(frozen=True)
class Tables:
    """The SDK's two tables and memstack's side tables named after them.

    Side tables follow the sessions table (``agent_sessions_vault``, ``…_audit``), so two
    sets of session tables in one database keep their vaults and trails apart.
    """

    sessions: str
    messages: str

    @property
    def vault(self) -> str:
        return f"{self.sessions}_vault"

    @property
    def audit(self) -> str:
        return f"{self.sessions}_audit"

    @property
    def user_keys(self) -> str:
        return f"{self.sessions}_user_keys"


Runner = Callable[[Callable[[], Plan]], Awaitable[Any]]


def _in(column: str, values: Collection[Any], prefix: str = "v") -> tuple[str, dict[str, Any]]:
    names = {f"{prefix}{k}": value for k, value in enumerate(values)}
    return f"{column} IN ({', '.join(':' + name for name in names)})", names


def _create_side_tables(t: Tables) -> Plan:
    yield Query(
        f"CREATE TABLE IF NOT EXISTS {t.vault} ("
        "session_id VARCHAR(255) NOT NULL, token VARCHAR(64) NOT NULL, sealed TEXT NOT NULL, "
        "created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, PRIMARY KEY (session_id, token))"
    )
    yield Query(
        f"CREATE TABLE IF NOT EXISTS {t.audit} ("
        "record_id VARCHAR(32) NOT NULL PRIMARY KEY, at DOUBLE PRECISION NOT NULL, "
        "action VARCHAR(32) NOT NULL, actor VARCHAR(255) NOT NULL, scope VARCHAR(255) NOT NULL, "
        "counts TEXT NOT NULL, digest VARCHAR(64))"
    )
    yield Query(
        f"CREATE TABLE IF NOT EXISTS {t.user_keys} ("
        "user_ref VARCHAR(64) NOT NULL PRIMARY KEY, salt VARCHAR(64) NOT NULL, "
        "created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP)"
    )


def _list_sessions(t: Tables) -> Plan:
    sessions, messages = t.sessions, t.messages
    counted = yield Query(
        f"SELECT session_id, COUNT(*), MAX(created_at) FROM {messages} GROUP BY session_id"
    )
    known = yield Query(f"SELECT session_id, updated_at FROM {sessions}")
    last = {row[0]: as_utc(row[1]) for row in known}
    found = {row[0]: (int(row[1]), as_utc(row[2])) for row in counted}
    infos = []
    for session_id in sorted(set(last) | set(found)):
        items, newest = found.get(session_id, (0, None))
        times = [t for t in (last.get(session_id), newest) if t is not None]
        infos.append(SessionInfo(session_id, items, max(times) if times else None))
    return infos


def _delete_counted(
    table: str, column: str, values: list[str], *, also: tuple[str, ...] = ()
) -> Plan:
    """Delete the rows of ``table`` (and ``also``) whose ``column`` is one of ``values``;
    return how many rows of ``table`` went. Chunked, all in the caller's transaction."""
    total = 0
    for chunk in chunks(values):
        where, params = _in(column, chunk)
        rows = yield Query(f"SELECT COUNT(*) FROM {table} WHERE {where}", params)
        total += int(rows[0][0])
        for target in (table, *also):
            yield Query(f"DELETE FROM {target} WHERE {where}", params)
    return total


def _vault_put(t: Tables, session_id: str, sealed: Mapping[str, str]) -> Plan:
    for chunk in chunks(sorted(sealed)):  # an upsert: re-sealed entries replace the old
        where, params = _in("token", chunk, "t")
        yield Query(
            f"DELETE FROM {t.vault} WHERE session_id = :sid AND {where}",
            {"sid": session_id, **params},
        )
    for token, value in sealed.items():
        yield Query(
            f"INSERT INTO {t.vault} (session_id, token, sealed) VALUES (:sid, :token, :sealed)",
            {"sid": session_id, "token": token, "sealed": value},
        )


def _vault_get(t: Tables, session_id: str, tokens: list[str] | None) -> Plan:
    found: dict[str, str] = {}
    for chunk in chunks(tokens) if tokens is not None else [None]:
        where, params = ("1 = 1", {}) if chunk is None else _in("token", chunk, "t")
        rows = yield Query(
            f"SELECT token, sealed FROM {t.vault} WHERE session_id = :sid AND {where}",
            {"sid": session_id, **params},
        )
        found.update({row[0]: row[1] for row in rows})
    return found


def _vault_sessions(t: Tables) -> Plan:
    rows = yield Query(f"SELECT session_id, COUNT(*) FROM {t.vault} GROUP BY session_id")
    return {row[0]: int(row[1]) for row in rows}


def _user_salt(t: Tables, ref: str, new_salt: str) -> Plan:
    rows = yield Query(f"SELECT salt FROM {t.user_keys} WHERE user_ref = :ref", {"ref": ref})
    if rows:
        return str(rows[0][0])
    yield Query(
        f"INSERT INTO {t.user_keys} (user_ref, salt) VALUES (:ref, :salt)",
        {"ref": ref, "salt": new_salt},
    )
    return new_salt


def _audit_append(t: Tables, row: AuditRow) -> Plan:
    values = {column: row.get(column) for column in AUDIT_COLUMNS}
    values["counts"] = json.dumps(values["counts"] or {}, sort_keys=True)
    yield Query(
        f"INSERT INTO {t.audit} ({', '.join(AUDIT_COLUMNS)}) "
        f"VALUES ({', '.join(':' + column for column in AUDIT_COLUMNS)})",
        values,
    )


def _audit_read(t: Tables, limit: int) -> Plan:
    rows = yield Query(
        f"SELECT {', '.join(AUDIT_COLUMNS)} FROM {t.audit} "
        "ORDER BY at DESC, record_id DESC LIMIT :n",
        {"n": limit},
    )
    records = [dict(zip(AUDIT_COLUMNS, row, strict=True)) for row in reversed(rows)]
    for record in records:
        record["counts"] = json.loads(record["counts"])
        record["at"] = float(record["at"])
    return records


class SqlWholeStore(WholeStore):
    """Store-wide operations on one SQL database, through the store's own connections."""

    def __init__(self, session: Session, run: Runner, sessions: str, messages: str) -> None:
        super().__init__(session)
        self._run = run
        self.tables = Tables(sessions, messages)
        self._side_tables_ready = False

    async def run(self, make_plan: Callable[[], Plan]) -> Any:
        with store_errors(self.session, doing=f"{self.where} failed"):
            return await self._run(make_plan)

    async def side(self, make_plan: Callable[[], Plan]) -> Any:
        """Run a plan on the side tables, creating them first in this process."""
        if not self._side_tables_ready:
            await self.run(lambda: _create_side_tables(self.tables))
            self._side_tables_ready = True
        return await self.run(make_plan)

    async def list_sessions(self) -> list[SessionInfo]:
        result: list[SessionInfo] = await self.run(lambda: _list_sessions(self.tables))
        return result

    async def delete_sessions(self, session_ids: Collection[str]) -> int:
        ids = sorted(set(session_ids))
        if not ids:
            return 0
        return int(
            await self.run(
                lambda: _delete_counted(
                    self.tables.messages, "session_id", ids, also=(self.tables.sessions,)
                )
            )
        )

    async def vault_put(self, session_id: str, sealed: Mapping[str, str]) -> None:
        if sealed:
            await self.side(lambda: _vault_put(self.tables, session_id, dict(sealed)))

    async def vault_get(self, session_id: str, tokens: Collection[str]) -> dict[str, str]:
        wanted = sorted(set(tokens))
        if not wanted:
            return {}
        return dict(await self.side(lambda: _vault_get(self.tables, session_id, wanted)))

    async def vault_all(self, session_id: str) -> dict[str, str]:
        return dict(await self.side(lambda: _vault_get(self.tables, session_id, None)))

    async def vault_sessions(self) -> dict[str, int]:
        return dict(await self.side(lambda: _vault_sessions(self.tables)))

    async def vault_delete(self, session_ids: Collection[str]) -> int:
        ids = sorted(set(session_ids))
        return (
            int(await self.side(lambda: _delete_counted(self.tables.vault, "session_id", ids)))
            if ids
            else 0
        )

    async def user_salt(self, user_ref: str, new_salt: str) -> str:
        return str(await self.side(lambda: _user_salt(self.tables, user_ref, new_salt)))

    async def user_salt_delete(self, user_refs: Collection[str]) -> int:
        refs = sorted(set(user_refs))
        return (
            int(await self.side(lambda: _delete_counted(self.tables.user_keys, "user_ref", refs)))
            if refs
            else 0
        )

    async def audit_append(self, row: AuditRow) -> None:
        await self.side(lambda: _audit_append(self.tables, row))

    async def audit_read(self, limit: int) -> list[AuditRow]:
        return list(await self.side(lambda: _audit_read(self.tables, limit)))


def sql_whole_store(store: Session) -> SqlWholeStore | None:
    """The SQL adapter for an SDK SQL session (exact types), or None."""
    from agents.extensions.memory.async_sqlite_session import AsyncSQLiteSession

    from memstack.backends.sqlite import AsyncSQLiteCapabilities, SQLiteCapabilities

    if type(store) is SQLiteSession:
        run: Runner = SQLiteCapabilities(store).run
        return SqlWholeStore(store, run, store.sessions_table, store.messages_table)
    if type(store) is AsyncSQLiteSession:
        run = AsyncSQLiteCapabilities(store).run
        return SqlWholeStore(store, run, store.sessions_table, store.messages_table)
    try:
        from agents.extensions.memory import SQLAlchemySession

        from memstack.backends.sqlalchemy_store import MySQLSQLAlchemySession
    except ImportError:  # pragma: no cover - sqlalchemy is a runtime dependency
        return None
    if type(store) in (SQLAlchemySession, MySQLSQLAlchemySession):
        assert isinstance(store, SQLAlchemySession)
        return SqlWholeStore(
            store, _sqlalchemy_runner(store), store._sessions.name, store._messages.name
        )
    return None


def _sqlalchemy_runner(store: Any) -> Runner:
    from sqlalchemy import text

    from memstack.backends.sqlalchemy_store import SQLAlchemyCapabilities

    retrying = SQLAlchemyCapabilities(store)  # each plan is one transaction: rerun if rolled back

    async def run(make_plan: Callable[[], Plan]) -> Any:
        async def attempt() -> Any:
            async with store.engine.begin() as conn:

                async def execute(statement: str, params: dict[str, Any]) -> list[Any]:
                    result = await conn.execute(text(statement), params)
                    return list(result.all()) if result.returns_rows else []

                return await sql.run_async(execute, make_plan())

        await store._ensure_tables()
        return await retrying.transaction(lambda: store._run_sqlite_write_with_retry(attempt))

    return run
