"""Store-wide operations on Redis: the SDK's keys under one prefix, and memstack's own.

The SDK keeps a session in ``<prefix>:<id>`` (a hash), ``<prefix>:<id>:messages`` (a
list) and ``<prefix>:<id>:counter``. Sessions are found by scanning for the message
lists; memstack's side data lives under ``<prefix>::memstack:`` (a session id would
have to start with ``:memstack:`` to collide): ``vault:<id>`` hashes, the ``audit``
list and the ``user_keys`` hash.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Any, TypeGuard

from agents.extensions.memory import RedisSession
from agents.memory import Session

from memstack.backends.translate import store_errors
from memstack.backends.whole_base import AuditRow, SessionInfo, WholeStore, as_utc

__all__ = ["RedisWholeStore", "is_redis_session"]

_GLOB = re.compile(r"([*?\[\]\\])")


def is_redis_session(session: Session) -> TypeGuard[RedisSession]:
    return type(session) is RedisSession


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


class RedisWholeStore(WholeStore):
    """Store-wide operations on the keys of one ``key_prefix``."""

    session: RedisSession

    def __init__(self, session: RedisSession) -> None:
        super().__init__(session)
        self.client: Any = session._redis
        self.prefix: str = session._key_prefix
        self.own = f"{self.prefix}::memstack:"

    def _pattern(self, head: str, tail: str = "") -> str:
        escaped = _GLOB.sub(r"\\\1", head)
        return f"{escaped}*{tail}"

    def _keys_of(self, session_id: str) -> tuple[str, str, str]:
        base = f"{self.prefix}:{session_id}"
        return base, f"{base}:messages", f"{base}:counter"

    def _vault_key(self, session_id: str) -> str:
        return f"{self.own}vault:{session_id}"

    async def list_sessions(self) -> list[SessionInfo]:
        with store_errors(self.session, doing=f"{self.where} failed"):
            head = f"{self.prefix}:"
            ids = [
                _text(key)[len(head) : -len(":messages")]
                async for key in self.client.scan_iter(
                    match=self._pattern(head, ":messages"), _type="list"
                )
            ]
            ids = sorted(i for i in set(ids) if not i.startswith(":memstack:"))
            pipe = self.client.pipeline(transaction=False)
            for session_id in ids:
                base, messages, _ = self._keys_of(session_id)
                pipe.llen(messages)
                pipe.hget(base, "updated_at")
            replies = await pipe.execute() if ids else []
        return [
            SessionInfo(session_id, int(replies[2 * n]), as_utc(replies[2 * n + 1]))
            for n, session_id in enumerate(ids)
        ]

    async def delete_sessions(self, session_ids: Collection[str]) -> int:
        ids = sorted(set(session_ids))
        counted = [("llen", self._keys_of(session_id)[1]) for session_id in ids]
        doomed = [key for session_id in ids for key in self._keys_of(session_id)]
        return await self._count_and_delete(counted, doomed)

    async def vault_put(self, session_id: str, sealed: Mapping[str, str]) -> None:
        if sealed:
            with store_errors(self.session, doing=f"{self.where} failed"):
                await self.client.hset(self._vault_key(session_id), mapping=dict(sealed))

    async def vault_get(self, session_id: str, tokens: Collection[str]) -> dict[str, str]:
        wanted = sorted(set(tokens))
        if not wanted:
            return {}
        with store_errors(self.session, doing=f"{self.where} failed"):
            values = await self.client.hmget(self._vault_key(session_id), wanted)
        return {t: _text(v) for t, v in zip(wanted, values, strict=True) if v is not None}

    async def vault_all(self, session_id: str) -> dict[str, str]:
        with store_errors(self.session, doing=f"{self.where} failed"):
            values = await self.client.hgetall(self._vault_key(session_id))
        return {_text(k): _text(v) for k, v in values.items()}

    async def vault_sessions(self) -> dict[str, int]:
        head = f"{self.own}vault:"
        with store_errors(self.session, doing=f"{self.where} failed"):
            keys = [_text(k) async for k in self.client.scan_iter(match=self._pattern(head))]
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.hlen(key)
            counts = await pipe.execute() if keys else []
        return {key[len(head) :]: int(n) for key, n in zip(keys, counts, strict=True)}

    async def vault_delete(self, session_ids: Collection[str]) -> int:
        keys = [self._vault_key(session_id) for session_id in sorted(set(session_ids))]
        return await self._count_and_delete([("hlen", key) for key in keys], keys)

    async def _count_and_delete(self, counted: list[tuple[str, str]], doomed: list[str]) -> int:
        """Sum of the counts (``llen``/``hlen``) of ``counted``, then ``doomed`` deleted, in
        one MULTI: the count is of exactly what went."""
        if not doomed:
            return 0
        with store_errors(self.session, doing=f"{self.where} failed"):
            pipe = self.client.pipeline(transaction=True)
            for command, key in counted:
                getattr(pipe, command)(key)
            pipe.delete(*doomed)
            replies = await pipe.execute()
        return sum(int(count) for count in replies[: len(counted)])

    async def user_salt(self, user_ref: str, new_salt: str) -> str:
        key = f"{self.own}user_keys"
        with store_errors(self.session, doing=f"{self.where} failed"):
            await self.client.hsetnx(key, user_ref, new_salt)
            return _text(await self.client.hget(key, user_ref))

    async def user_salt_delete(self, user_refs: Collection[str]) -> int:
        refs = sorted(set(user_refs))
        if not refs:
            return 0
        with store_errors(self.session, doing=f"{self.where} failed"):
            return int(await self.client.hdel(f"{self.own}user_keys", *refs))

    async def audit_append(self, row: AuditRow) -> None:
        with store_errors(self.session, doing=f"{self.where} failed"):
            await self.client.rpush(f"{self.own}audit", json.dumps(row, sort_keys=True))

    async def audit_read(self, limit: int) -> list[AuditRow]:
        with store_errors(self.session, doing=f"{self.where} failed"):
            raw = await self.client.lrange(f"{self.own}audit", -limit, -1) if limit > 0 else []
        return [json.loads(_text(value)) for value in raw]
