"""``MemoryStore``: long-term memories per scope in SQLite, PostgreSQL or MariaDB.

    >>> import asyncio
    >>> from memstack.memory import MemoryStore
    >>> async def demo():
    ...     store = MemoryStore.from_url("sqlite://:memory:")
    ...     await store.remember("user-42", "Prefers answers in French", kind="preference")
    ...     found = await store.recall("user-42", "which language should I answer in?")
    ...     await store.close()
    ...     return [m.text for m in found]
    >>> asyncio.run(demo())
    ['Prefers answers in French']

The store is a thin owner of the engine and the transactions: every write runs in one
transaction that also writes the full-text postings (``memstack.memory.fulltext``), the
optional vectors (``memstack.memory.semantic``) and an audit event that never contains
memory text; recall ranks there, then fuses with the precedence rules and packs the
token budget (``memstack.memory.ranking``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Table, and_, delete, event, insert, or_, select, text, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from memstack.backends.translate import store_errors
from memstack.crypto.keys import KeyProvider
from memstack.errors import ConfigurationError
from memstack.memory.cipher import MemoryCipher, keys_from
from memstack.memory.consolidate import Change, ConsolidationPolicy, plan_consolidation
from memstack.memory.fulltext import FullTextIndex
from memstack.memory.models import (
    KINDS,
    SOURCES,
    Event,
    Memory,
    Provenance,
    check_choice,
    check_confidence,
)
from memstack.memory.ranking import BM25, Packed, pack, precedence
from memstack.memory.rows import memory_from_row, row_values
from memstack.memory.schema import SCHEMA_VERSION, Tables, tables
from memstack.memory.semantic import (
    SemanticIndex,
    delete_vectors,
    fuse_scores,
    reseal_vectors,
)
from memstack.memory.text import term_counts
from memstack.memory.vectors import Embedder, embedder_named

__all__ = ["MemoryStore", "Recall"]

_LAYER = "MemoryStore"
_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "mysql": "mysql+aiomysql",
    "mariadb": "mariadb+aiomysql",
}
_DEFAULT_CONFIDENCE = {"explicit": 1.0, "feedback": 0.9, "observed": 0.8, "inferred": 0.6}
# BM25 candidates fetched before precedence and budget decide: max_tokens / 20 (a memory
# line is rarely under 20 tokens), at most this many.
_CANDIDATES = 200
_BATCH = 500
# Standing preferences and facts considered for the profile part of a recall.
_PROFILE = 50
_TOKEN_CACHE = 50_000


@dataclass(frozen=True, slots=True)
class Recall:
    """Recalled memories in block order, the rendered block and its token count."""

    memories: tuple[Memory, ...]
    text: str
    tokens: int

    def __iter__(self) -> Iterator[Memory]:
        return iter(self.memories)

    def __len__(self) -> int:
        return len(self.memories)

    def __bool__(self) -> bool:
        return bool(self.memories)


def _engine_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigurationError(f"{url!r} is not a URL (expected scheme://…)", layer=_LAYER)
    scheme = scheme.lower()
    if scheme in ("sqlite", "aiosqlite"):
        if rest in ("", ":memory:", "/:memory:"):
            return "sqlite+aiosqlite://"
        if not rest.startswith("/"):
            raise ConfigurationError(
                f"{url!r}: write sqlite:///relative.db, sqlite:////absolute.db or "
                "sqlite://:memory:",
                layer=_LAYER,
            )
        return f"sqlite+aiosqlite://{rest}"
    if scheme in ("redis", "rediss", "unix"):
        raise ConfigurationError(
            "long-term memory needs a SQL database (SQLite, PostgreSQL or MariaDB), "
            f"not {scheme}://",
            layer=_LAYER,
        )
    return _DRIVERS.get(scheme, scheme) + "://" + rest


def _now_or(clock: Callable[[], float]) -> float:
    return float(clock())


class MemoryStore:
    """Long-term memories: remember, recall, forget, a key–value surface and an audit trail."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        key: bytes | str | None = None,
        keyring: KeyProvider | None = None,
        create_tables: bool = True,
        table_prefix: str = "memstack_memor",
        clock: Callable[[], float] = time.time,
        count_tokens: Callable[[str], int] | None = None,
        bm25: BM25 | None = None,
        embedder: Embedder | str | None = None,
    ) -> None:
        if not isinstance(engine, AsyncEngine):
            raise ConfigurationError(
                f"engine must be a SQLAlchemy AsyncEngine, not {type(engine).__name__}",
                layer=_LAYER,
            )
        self.engine = engine
        self.cipher = MemoryCipher(keys_from(key, keyring))
        self.cipher.check()
        self.tables: Tables = tables(table_prefix)
        self.create_tables = create_tables
        self.clock = clock
        self.bm25 = bm25 or BM25()
        self.index = FullTextIndex(self.tables, self.cipher, self.bm25)
        # Optional semantic recall, fused with full-text (memstack.memory.semantic).
        named = embedder_named(embedder)
        self.semantic = SemanticIndex(named, self.tables, self.cipher) if named else None
        self._count = count_tokens
        self._ready = False
        self._token_cache: dict[str, int] = {}
        if engine.dialect.name == "sqlite":
            # Deleted memories are overwritten with zeros in the file, not left in free pages.
            event.listen(engine.sync_engine, "connect", _sqlite_secure_delete)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        key: bytes | str | None = None,
        keyring: KeyProvider | None = None,
        engine_kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> MemoryStore:
        """Open ``sqlite:///file.db``, ``sqlite://:memory:``, ``postgresql://…``, ``mysql://…``."""
        target = _engine_url(url)
        kwargs = dict(engine_kwargs or {})
        if target == "sqlite+aiosqlite://":
            kwargs.setdefault("poolclass", StaticPool)
        with store_errors(None, layer=_LAYER, doing="opening the memory store"):
            try:
                engine = create_async_engine(target, **kwargs)
            except ImportError as exc:
                raise ConfigurationError(
                    f"cannot open {url.partition('://')[0]}:// URLs: {exc} (pip install "
                    "memstack[postgres] or memstack[mysql])",
                    layer=_LAYER,
                ) from exc
        return cls(engine, key=key, keyring=keyring, **options)

    def __repr__(self) -> str:
        url = self.engine.url.render_as_string(hide_password=True)
        return f"MemoryStore(url={url!r}, encrypted={self.cipher.encrypted})"

    async def close(self) -> None:
        await self.engine.dispose()

    # -- schema ----------------------------------------------------------------------------
    async def _prepare(self) -> None:
        if self._ready:
            return
        meta = self.tables.meta
        with store_errors(None, layer=_LAYER, doing="preparing the memory tables"):
            async with self.engine.begin() as conn:
                if self.create_tables:
                    await conn.run_sync(self.tables.metadata.create_all)
                found = (
                    await conn.execute(select(meta.c.value).where(meta.c.name == "schema_version"))
                ).scalar()
                if found is None:
                    await conn.execute(
                        insert(meta).values(name="schema_version", value=str(SCHEMA_VERSION))
                    )
                elif found != str(SCHEMA_VERSION):
                    raise ConfigurationError(
                        f"memory tables have schema version {found}; this memstack reads "
                        f"{SCHEMA_VERSION}",
                        layer=_LAYER,
                    )
        self._ready = True

    async def schema_version(self) -> int:
        await self._prepare()
        return SCHEMA_VERSION

    def _errors(self, doing: str) -> Any:
        return store_errors(None, layer=_LAYER, doing=doing)

    async def _log(
        self,
        conn: AsyncConnection,
        memories: Iterable[Memory] | Iterable[tuple[str, str]],
        action: str,
        actor: str,
        **detail: Any,
    ) -> None:
        now = _now_or(self.clock)
        rows = []
        for entry in memories:
            memory_id, scope = (entry.id, entry.scope) if isinstance(entry, Memory) else entry
            rows.append(
                {
                    "memory_id": memory_id,
                    "scope": scope,
                    "action": action,
                    "actor": actor,
                    "at": now,
                    "detail": json.dumps(detail, sort_keys=True),
                }
            )
        if rows:
            await conn.execute(insert(self.tables.events), rows)

    # -- writing ---------------------------------------------------------------------------
    async def remember(
        self,
        scope: str,
        text: str,
        *,
        kind: str = "note",
        source: str = "explicit",
        key: str | None = None,
        data: Mapping[str, Any] | None = None,
        confidence: float | None = None,
        valid_from: float | None = None,
        expires_at: float | None = None,
        verified: bool = False,
        provenance: Provenance | None = None,
        context: str | None = None,
        actor: str = "api",
    ) -> Memory:
        """Store one memory; an explicit one with a ``key`` supersedes that key's older ones.

        An inferred memory never supersedes an explicit one: it is stored beside it, and
        precedence puts the explicit statement first.
        """
        [memory] = await self.remember_many(
            [
                self.new_memory(
                    scope,
                    text,
                    kind=kind,
                    source=source,
                    key=key,
                    data=data,
                    confidence=confidence,
                    valid_from=valid_from,
                    expires_at=expires_at,
                    verified=verified,
                    provenance=provenance,
                    context=context,
                )
            ],
            actor=actor,
        )
        return memory

    def new_memory(
        self,
        scope: str,
        text: str,
        *,
        kind: str = "note",
        source: str = "explicit",
        key: str | None = None,
        data: Mapping[str, Any] | None = None,
        confidence: float | None = None,
        valid_from: float | None = None,
        expires_at: float | None = None,
        verified: bool = False,
        provenance: Provenance | None = None,
        context: str | None = None,
    ) -> Memory:
        """A validated, not yet stored memory (for ``remember_many``)."""
        _check_scope(scope)
        if not isinstance(text, str) or not text.strip():
            raise ConfigurationError("text must be a non-empty string", layer=_LAYER)
        if key is not None and (not isinstance(key, str) or not key.strip()):
            raise ConfigurationError("key must be a non-empty string or None", layer=_LAYER)
        check_choice("kind", kind, KINDS)
        check_choice("source", source, SOURCES)
        if confidence is None:
            confidence = _DEFAULT_CONFIDENCE[source]
        now = _now_or(self.clock)
        return Memory(
            id=uuid.uuid4().hex,
            scope=scope,
            text=text.strip(),
            kind=kind,
            source=source,
            key=key.strip() if key is not None else None,
            data=data,
            confidence=check_confidence(confidence),
            created_at=now,
            updated_at=now,
            valid_from=valid_from,
            expires_at=expires_at,
            last_verified_at=now if verified else None,
            provenance=provenance or Provenance(),
            context=context or None,
        )

    async def remember_many(
        self, memories: Sequence[Memory], *, actor: str = "api"
    ) -> list[Memory]:
        """Store several memories in one transaction (ingestion, distillation)."""
        await self._prepare()
        stored = list(memories)
        vectors = await self.semantic.embed([m.text for m in stored]) if self.semantic else []
        with self._errors("remembering"):
            async with self.engine.begin() as conn:
                for start in range(0, len(stored), _BATCH):
                    batch = stored[start : start + _BATCH]
                    await conn.execute(
                        insert(self.tables.memories), [row_values(self.cipher, m) for m in batch]
                    )
                    means = {
                        scope: await self.index.mean_length(
                            conn, scope, [m for m in batch if m.scope == scope]
                        )
                        for scope in {m.scope for m in batch}
                    }
                    postings = [p for m in batch for p in self.index.postings(m, means[m.scope])]
                    if postings:
                        await conn.execute(insert(self.tables.terms), postings)
                    if self.semantic is not None:
                        await self.semantic.write(conn, batch, vectors[start : start + _BATCH])
                    await self._log(conn, batch, "remembered", actor)
                for memory in stored:
                    if memory.key is not None and memory.source == "explicit":
                        await self._supersede_key(conn, memory, actor)
        for scope in {m.scope for m in stored}:
            self.index.invalidate(scope)
        return stored

    async def _supersede_key(self, conn: AsyncConnection, newer: Memory, actor: str) -> None:
        assert newer.key is not None
        m = self.tables.memories
        rows = (
            await conn.execute(
                select(m.c.id).where(
                    m.c.scope == newer.scope,
                    m.c.key_digest.in_(self.cipher.key_digests(newer.scope, newer.key)),
                    m.c.superseded_at.is_(None),
                    m.c.id != newer.id,
                    m.c.created_at <= newer.created_at,
                )
            )
        ).scalars()
        await self._mark_superseded(conn, newer.scope, list(rows), newer.id, actor, "same key")

    async def _mark_superseded(
        self,
        conn: AsyncConnection,
        scope: str,
        ids: Sequence[str],
        by: str,
        actor: str,
        reason: str,
    ) -> None:
        if not ids:
            return
        m, t = self.tables.memories, self.tables.terms
        now = _now_or(self.clock)
        await conn.execute(
            update(m)
            .where(m.c.id.in_(ids))
            .values(superseded_at=now, superseded_by=by, updated_at=now)
        )
        # Superseded memories are kept (non-destructive) but leave the search index.
        await conn.execute(delete(t).where(t.c.memory_id.in_(ids)))
        await self._log(
            conn, [(i, scope) for i in ids], "superseded", actor, superseded_by=by, reason=reason
        )
        self.index.invalidate(scope)

    async def verify(self, scope: str, memory_id: str, *, actor: str = "api") -> Memory:
        """Mark a memory as checked now (procedures re-validated, facts confirmed)."""
        memory = await self._require(scope, memory_id)
        now = _now_or(self.clock)
        m = self.tables.memories
        with self._errors("verifying a memory"):
            async with self.engine.begin() as conn:
                await conn.execute(
                    update(m)
                    .where(m.c.id == memory_id)
                    .values(last_verified_at=now, needs_review=False, updated_at=now)
                )
                await self._log(conn, [memory], "verified", actor)
        return memory.evolve(last_verified_at=now, needs_review=False, updated_at=now)

    # -- key–value surface -----------------------------------------------------------------
    async def write(self, scope: str, key: str, text: str, **options: Any) -> Memory:
        """Set ``key`` to ``text`` (an explicit memory that supersedes the key's older ones)."""
        options.setdefault("source", "explicit")
        return await self.remember(scope, text, key=key, **options)

    async def read(self, scope: str, key: str) -> Memory | None:
        """The current memory under ``key``: explicit before inferred, then the newest."""
        m = self.tables.memories
        found = await self._select(
            and_(
                m.c.scope == scope,
                m.c.key_digest.in_(self.cipher.key_digests(scope, key)),
            ),
            live=True,
        )
        found = [memory for memory in found if memory.key == key]
        if not found:
            return None
        return min(found, key=lambda x: (x.source != "explicit", -x.created_at, x.id))

    async def keys(self, scope: str) -> list[str]:
        """Keys with a live memory in ``scope``, sorted."""
        m = self.tables.memories
        found = await self._select(and_(m.c.scope == scope, m.c.key_digest.is_not(None)), live=True)
        return sorted({memory.key for memory in found if memory.key is not None})

    async def delete(self, scope: str, key: str, *, actor: str = "api") -> int:
        """Forget every memory under ``key`` (current and superseded)."""
        return await self.forget(scope, key=key, actor=actor)

    # -- reading ---------------------------------------------------------------------------
    async def _select(self, where: Any, *, live: bool, newest: int | None = None) -> list[Memory]:
        """Matching memories oldest first; with ``newest``, only that many most recent ones."""
        await self._prepare()
        m = self.tables.memories
        query = select(m).where(where)
        if newest is not None:
            query = query.order_by(m.c.updated_at.desc(), m.c.id).limit(newest)
        if live:
            now = _now_or(self.clock)
            query = query.where(_live(m, now))
        with self._errors("reading memories"):
            async with self.engine.connect() as conn:
                if newest is None:
                    query = query.order_by(m.c.created_at, m.c.id)
                rows = (await conn.execute(query)).all()
        return [memory_from_row(self.cipher, row) for row in rows]

    async def get(self, scope: str, memory_id: str) -> Memory | None:
        m = self.tables.memories
        found = await self._select(and_(m.c.scope == scope, m.c.id == memory_id), live=False)
        return found[0] if found else None

    async def _require(self, scope: str, memory_id: str) -> Memory:
        memory = await self.get(scope, memory_id)
        if memory is None:
            raise ConfigurationError(f"no memory {memory_id!r} in scope {scope!r}", layer=_LAYER)
        return memory

    async def list_memories(
        self, scope: str, *, kind: str | None = None, include_inactive: bool = False
    ) -> list[Memory]:
        """Memories of ``scope``, oldest first; superseded and expired ones only on request."""
        m = self.tables.memories
        where = m.c.scope == scope
        if kind is not None:
            where = and_(where, m.c.kind == check_choice("kind", kind, KINDS))
        return await self._select(where, live=not include_inactive)

    async def scopes(self) -> list[str]:
        await self._prepare()
        m = self.tables.memories
        with self._errors("listing scopes"):
            async with self.engine.connect() as conn:
                rows = await conn.execute(select(m.c.scope).distinct().order_by(m.c.scope))
                return [row[0] for row in rows]

    async def history(self, memory_id: str) -> list[Event]:
        """Every change to ``memory_id``, oldest first: action, actor, time; never text."""
        await self._prepare()
        e = self.tables.events
        with self._errors("reading the audit trail"):
            async with self.engine.connect() as conn:
                rows = (
                    await conn.execute(select(e).where(e.c.memory_id == memory_id).order_by(e.c.id))
                ).all()
        return [
            Event(row.memory_id, row.scope, row.action, row.actor, row.at, json.loads(row.detail))
            for row in rows
        ]

    # -- search ----------------------------------------------------------------------------
    async def search(
        self, scope: str, query: str, *, limit: int = 10, kinds: Sequence[str] | None = None
    ) -> list[tuple[Memory, float]]:
        """Live memories matching ``query``, best first, with their fused scores.

        Full-text (BM25) ranks by shared words; with an embedder, the nearest vectors form
        a second ranking, and the two scores are fused (``fuse_scores``). Either way the score
        is then weighed by precedence (source, confidence, verification, age).
        """
        _check_scope(scope)
        await self._prepare()
        query_terms = term_counts(query) if isinstance(query, str) else {}
        semantic = self.semantic if isinstance(query, str) and query.strip() else None
        if not query_terms and semantic is None:
            return []
        query_vector = (await semantic.embed([query]))[0] if semantic is not None else None
        now = _now_or(self.clock)
        with self._errors("searching memories"):
            async with self.engine.connect() as conn:
                by_words: list[Row[Any]] = []
                if query_terms:
                    by_words = list(await self.index.ranked(conn, scope, query_terms, limit, now))
                    by_words.sort(key=lambda row: -float(row.total))
                near: list[tuple[str, float]] = []
                by_meaning: list[Row[Any]] = []
                if semantic is not None and query_vector is not None:
                    near = await semantic.nearest(conn, scope, query_vector, 2 * limit)
                    near_ids = [memory_id for memory_id, _ in near]
                    by_meaning = await self._live_rows(conn, scope, near_ids, by_words, now)
        rows = [*by_words, *by_meaning]
        if not rows:
            return []
        memories = {row.id: memory_from_row(self.cipher, row) for row in rows}
        if semantic is None:
            best = float(by_words[0].total)
            relevance = {row.id: float(row.total) / best for row in by_words}
        else:
            fused = fuse_scores(
                {row.id: float(row.total) for row in by_words},
                [(i, cosine) for i, cosine in near if i in memories],
            )
            top = max(fused.values()) or 1.0
            relevance = {memory_id: score / top for memory_id, score in fused.items()}
        wanted = set(kinds) if kinds else None
        scored = [
            (memory, relevance[memory_id] * precedence(memory, now=now))
            for memory_id, memory in memories.items()
            if wanted is None or memory.kind in wanted
        ]
        scored.sort(key=lambda pair: (-pair[1], -pair[0].created_at, pair[0].id))
        return scored[:limit]

    async def _live_rows(
        self,
        conn: AsyncConnection,
        scope: str,
        ids: Sequence[str],
        known: Sequence[Row[Any]],
        now: float,
    ) -> list[Row[Any]]:
        """The live rows of ``ids`` not already in ``known`` (vector hits may be stale)."""
        have = {row.id for row in known}
        missing = [memory_id for memory_id in ids if memory_id not in have]
        if not missing:
            return []
        m = self.tables.memories
        query = select(m).where(
            m.c.scope == scope,
            m.c.id.in_(missing),
            _live(m, now),
        )
        return list((await conn.execute(query)).all())

    async def recall(
        self,
        scope: str,
        query: str,
        *,
        max_tokens: int = 500,
        kinds: Sequence[str] | None = None,
        header: str | None = None,
        profile: bool = False,
    ) -> Recall:
        """Memories relevant to ``query`` whose rendered block fits ``max_tokens``.

        With ``profile=True`` the budget left over is filled with the scope's standing
        preferences and facts (explicit first), so a turn with no matching words still
        sees who the user is.
        """
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ConfigurationError(
                f"max_tokens must be an int >= 1, not {max_tokens!r}", layer=_LAYER
            )
        # Enough candidates to fill the budget with short memories, and no more to decode.
        limit = min(_CANDIDATES, max(20, max_tokens // 20))
        ranked = [m for m, _ in await self.search(scope, query, limit=limit, kinds=kinds)]
        if profile:
            ranked += await self._profile(scope, exclude={m.id for m in ranked})
        packed = self._pack(ranked, max_tokens, header)
        return Recall(packed.memories, packed.text, packed.tokens)

    async def _profile(self, scope: str, *, exclude: set[str]) -> list[Memory]:
        m = self.tables.memories
        # The most recently updated standing memories; a scope of thousands stays cheap.
        standing = await self._select(
            and_(m.c.scope == scope, m.c.kind.in_(("preference", "fact"))),
            live=True,
            newest=2 * _PROFILE,
        )
        now = _now_or(self.clock)
        standing = [memory for memory in standing if memory.id not in exclude]
        standing.sort(key=lambda x: (-precedence(x, now=now), x.id))
        return standing[:_PROFILE]

    def _count_tokens(self, text: str) -> int:
        # Memories are recalled again and again; counting each text once pays off.
        cached = self._token_cache.get(text)
        if cached is None:
            if self._count is None:
                from memstack.tokens import TokenCounter

                self._count = TokenCounter().count_text
            if len(self._token_cache) >= _TOKEN_CACHE:
                self._token_cache.clear()
            cached = self._token_cache[text] = self._count(text)
        return cached

    def _pack(self, ranked: Sequence[Memory], max_tokens: int, header: str | None) -> Packed:
        if header is None:
            return pack(ranked, max_tokens=max_tokens, count=self._count_tokens)
        return pack(ranked, max_tokens=max_tokens, count=self._count_tokens, header=header)

    # -- forgetting ------------------------------------------------------------------------
    async def forget(
        self,
        scope: str,
        memory_id: str | None = None,
        *,
        key: str | None = None,
        actor: str = "api",
    ) -> int:
        """Delete one memory, every memory under a key, or (neither given) the whole scope.

        Deleted rows leave no text behind: SQLite overwrites freed pages
        (``secure_delete``) and PostgreSQL is vacuumed after a whole-scope forget. The
        audit trail records each deletion without the text. Returns how many were deleted.
        """
        _check_scope(scope)
        if memory_id is not None and key is not None:
            raise ConfigurationError("give memory_id or key, not both", layer=_LAYER)
        await self._prepare()
        m, t = self.tables.memories, self.tables.terms
        where = m.c.scope == scope
        if memory_id is not None:
            where = and_(where, m.c.id == memory_id)
        elif key is not None:
            where = and_(where, m.c.key_digest.in_(self.cipher.key_digests(scope, key)))
        with self._errors("forgetting memories"):
            async with self.engine.begin() as conn:
                ids = list((await conn.execute(select(m.c.id).where(where))).scalars())
                for start in range(0, len(ids), _BATCH):
                    batch = ids[start : start + _BATCH]
                    await conn.execute(
                        delete(t).where(t.c.scope == scope, t.c.memory_id.in_(batch))
                    )
                    await delete_vectors(conn, self.tables, scope, batch)
                    await conn.execute(delete(m).where(m.c.id.in_(batch)))
                whole = memory_id is None and key is None
                await self._log(
                    conn,
                    [(i, scope) for i in ids],
                    "forgotten",
                    actor,
                    **({"whole_scope": True} if whole else {}),
                )
            if ids and memory_id is None and key is None:
                await self.scrub()
        if self.semantic is not None and memory_id is None and key is None:
            self.semantic.drop(scope)
        self.index.invalidate(scope)
        return len(ids)

    async def erase(self, scope: str, *, actor: str = "governance") -> int:
        """Forget the whole scope and its audit events: nothing of it stays (forget a user).

        ``forget(scope)`` keeps an event per deleted memory, which names the scope; a user
        erased everywhere (``memstack forget --user``) must not stay named even there. The
        fact of the erasure is kept by the caller's trail (``memstack.audit``), under a
        pseudonym. Returns how many memories were deleted.
        """
        count = await self.forget(scope, actor=actor)
        events = self.tables.events
        with self._errors("erasing the scope's memory events"):
            async with self.engine.begin() as conn:
                await conn.execute(delete(events).where(events.c.scope == scope))
            if self.engine.dialect.name == "postgresql":  # dead tuples keep the scope's bytes
                async with self.engine.connect() as conn:
                    auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
                    await auto.execute(text(f"VACUUM FULL {events.name}"))
        return count

    async def scrub(self) -> None:
        """Make deleted rows' bytes unrecoverable where the database keeps them around.

        PostgreSQL's plain VACUUM frees dead tuples without zeroing them, so the memories
        table (the only one holding text) is rewritten with VACUUM FULL; the index table
        holds digests only and gets a plain VACUUM. A rewrite must keep rows that a
        still-running transaction may see, so under long transactions call this again
        later (a whole-scope ``forget`` calls it once). SQLite needs nothing here: it
        runs with ``secure_delete``.
        """
        if self.engine.dialect.name == "postgresql":
            async with self.engine.connect() as conn:
                auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
                await auto.execute(text(f"VACUUM FULL {self.tables.memories.name}"))
                # Vectors leak meaning (and are plaintext when the store has no key).
                await auto.execute(text(f"VACUUM FULL {self.tables.vectors.name}"))
                await auto.execute(text(f"VACUUM {self.tables.terms.name}"))

    async def purge_expired(self, scope: str, *, actor: str = "expiry") -> int:
        """Hard-delete memories whose expiry has passed (the other way rows leave)."""
        await self._prepare()
        m, t = self.tables.memories, self.tables.terms
        now = _now_or(self.clock)
        with self._errors("purging expired memories"):
            async with self.engine.begin() as conn:
                ids = list(
                    (
                        await conn.execute(
                            select(m.c.id).where(m.c.scope == scope, m.c.expires_at <= now)
                        )
                    ).scalars()
                )
                if ids:
                    await conn.execute(delete(t).where(t.c.memory_id.in_(ids)))
                    await delete_vectors(conn, self.tables, scope, ids)
                    await conn.execute(delete(m).where(m.c.id.in_(ids)))
                    await self._log(conn, [(i, scope) for i in ids], "expired", actor)
        self.index.invalidate(scope)
        return len(ids)

    # -- vectors ---------------------------------------------------------------------------
    async def embed_missing(self, scope: str, *, batch_size: int = 256) -> int:
        """Embed the scope's live memories that have no vector from this store's embedder.

        Memories written before an embedder was configured (or under another model) are
        found by full-text only until then. Returns how many were embedded.
        """
        _check_scope(scope)
        if self.semantic is None:
            raise ConfigurationError("embed_missing needs a store with an embedder", layer=_LAYER)
        await self._prepare()
        m, v = self.tables.memories, self.tables.vectors
        embedded = select(v.c.memory_id).where(
            v.c.scope == scope, v.c.model == self.semantic.embedder.name
        )
        now = _now_or(self.clock)
        query = (
            select(m)
            .where(
                m.c.scope == scope,
                m.c.id.not_in(embedded),
                _live(m, now),
            )
            .order_by(m.c.created_at, m.c.id)
        )
        with self._errors("reading memories to embed"):
            async with self.engine.connect() as conn:
                missing = [memory_from_row(self.cipher, row) for row in await conn.execute(query)]
        for start in range(0, len(missing), batch_size):
            chunk = missing[start : start + batch_size]
            vectors = await self.semantic.embed([memory.text for memory in chunk])
            with self._errors("storing vectors"):
                async with self.engine.begin() as conn:
                    await self.semantic.write(conn, chunk, vectors)
        return len(missing)

    # -- consolidation ---------------------------------------------------------------------
    async def consolidate(
        self,
        scope: str,
        *,
        dry_run: bool = False,
        policy: ConsolidationPolicy | None = None,
        actor: str = "consolidation",
    ) -> list[Change]:
        """Plan (and unless ``dry_run``, apply) merges, supersessions, expiries and flags.

        Nothing is deleted: merged and superseded memories keep their rows with
        ``superseded_by``; low-value ones get an expiry; stale procedures a review flag.
        """
        memories = await self.list_memories(scope)
        changes = plan_consolidation(
            memories, now=_now_or(self.clock), policy=policy or ConsolidationPolicy()
        )
        if dry_run or not changes:
            return changes
        m = self.tables.memories
        now = _now_or(self.clock)
        with self._errors("consolidating memories"):
            async with self.engine.begin() as conn:
                for change in changes:
                    if change.action in ("merge", "supersede"):
                        assert change.by is not None
                        await self._mark_superseded(
                            conn, scope, [change.memory_id], change.by, actor, change.reason
                        )
                    elif change.action == "expire":
                        await conn.execute(
                            update(m).where(m.c.id == change.memory_id).values(expires_at=now)
                        )
                        await self._log(
                            conn,
                            [(change.memory_id, scope)],
                            "expired",
                            actor,
                            reason=change.reason,
                        )
                    elif change.action == "flag":
                        await conn.execute(
                            update(m).where(m.c.id == change.memory_id).values(needs_review=True)
                        )
                        await self._log(
                            conn,
                            [(change.memory_id, scope)],
                            "flagged",
                            actor,
                            reason=change.reason,
                        )
        self.index.invalidate(scope)
        return changes

    # -- keys ------------------------------------------------------------------------------
    async def rotate(self, scope: str | None = None, *, actor: str = "rotation") -> int:
        """Re-seal and re-index memories written under older keys with the active key."""
        if not self.cipher.encrypted:
            raise ConfigurationError("rotate needs a store opened with a key", layer=_LAYER)
        await self._prepare()
        m, t = self.tables.memories, self.tables.terms
        where = m.c.kid != self.cipher.active_kid
        if scope is not None:
            where = and_(where, m.c.scope == scope)
        rotated = 0
        with self._errors("rotating memory keys"):
            async with self.engine.begin() as conn:
                rows = (await conn.execute(select(m).where(where))).all()
                for row in rows:
                    memory = memory_from_row(self.cipher, row)
                    values = row_values(self.cipher, memory)
                    await conn.execute(
                        update(m)
                        .where(m.c.id == memory.id)
                        .values(
                            kid=values["kid"],
                            payload=values["payload"],
                            key_digest=values["key_digest"],
                        )
                    )
                    await conn.execute(delete(t).where(t.c.memory_id == memory.id))
                    if memory.superseded_at is None:
                        mean = await self.index.mean_length(conn, memory.scope, [memory])
                        await conn.execute(insert(t), self.index.postings(memory, mean))
                    rotated += 1
                await self._log(conn, [(r.id, r.scope) for r in rows], "rotated", actor)
                await reseal_vectors(conn, self.tables, self.cipher, scope)
        return rotated


def _live(m: Table, now: float) -> ColumnElement[bool]:
    """Neither superseded nor expired at ``now``: what recall may return."""
    return and_(m.c.superseded_at.is_(None), or_(m.c.expires_at.is_(None), m.c.expires_at > now))


def _sqlite_secure_delete(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA secure_delete = ON")
    cursor.close()


def _check_scope(scope: object) -> None:
    if not isinstance(scope, str) or not scope or len(scope) > 255:
        raise ConfigurationError(
            f"scope must be a non-empty string of at most 255 characters, not {scope!r}",
            layer=_LAYER,
        )
