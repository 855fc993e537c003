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

The store is a thin facade: it builds the engine, the cipher, the indexes and the clock
into one ``StoreParts`` (``memstack.memory.parts``), and each method checks its arguments
and hands those parts to one function of the module that does the work:
``writing`` (remember, supersede, verify), ``reading`` (select, search, profile),
``forgetting`` (forget, erase, scrub, expiry), ``maintenance`` (consolidate, rotate,
embed), with ``events`` writing the audit trail (never memory text) in the same
transaction as each change. Recall ranks there, then packs the token budget
(``memstack.memory.ranking``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_
from sqlalchemy.ext.asyncio import AsyncEngine

import memstack.memory.forgetting as forgetting
import memstack.memory.maintenance as maintenance
import memstack.memory.reading as reading
import memstack.memory.writing as writing
from memstack.backends.retry import DEFAULT_RETRY, Retry
from memstack.crypto.keys import KeyProvider
from memstack.errors import ConfigurationError, MemoryTooLargeError
from memstack.memory.cipher import MemoryCipher, keys_from
from memstack.memory.consolidate import Change, ConsolidationPolicy, plan_consolidation
from memstack.memory.database import check_scope_keys, open_engine, prepare, sqlite_settings
from memstack.memory.events import read_history
from memstack.memory.fulltext import FullTextIndex
from memstack.memory.models import KINDS, Event, Memory, Provenance, check_choice, check_scope
from memstack.memory.parts import LAYER, StoreParts
from memstack.memory.ranking import BM25, HEADER, CachedCount, pack
from memstack.memory.recall_policy import RecallPolicy
from memstack.memory.schema import SCHEMA_VERSION, Tables, tables
from memstack.memory.semantic import SemanticIndex
from memstack.memory.vectors import DEFAULT_EMBEDDER, Embedder, embedder_named

__all__ = ["MemoryStore", "Recall"]

_CHECKED_SCOPES = 100_000  # scopes remembered as checked, per store


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
        embedder: Embedder | str | None = DEFAULT_EMBEDDER,
        recall_policy: RecallPolicy | None = None,
        retry: Retry = DEFAULT_RETRY,
        max_memory_tokens: int | None = 1000,
    ) -> None:
        if not isinstance(engine, AsyncEngine):
            raise ConfigurationError(
                f"engine must be a SQLAlchemy AsyncEngine, not {type(engine).__name__}",
                layer=LAYER,
            )
        if not isinstance(retry, Retry):
            raise ConfigurationError(
                f"retry must be a memstack.backends.retry.Retry, not {type(retry).__name__}",
                layer=LAYER,
            )
        if max_memory_tokens is not None and (
            isinstance(max_memory_tokens, bool)
            or not isinstance(max_memory_tokens, int)
            or max_memory_tokens < 1
        ):
            raise ConfigurationError(
                f"max_memory_tokens must be None or an int >= 1, not {max_memory_tokens!r}",
                layer=LAYER,
            )
        self.engine = engine
        # Longer memories are refused (MemoryTooLargeError): recall packs whole memories
        # into its token budget, so one longer than any budget would never be returned.
        self.max_memory_tokens = max_memory_tokens
        self.cipher = MemoryCipher(keys_from(key, keyring))
        self.cipher.check()
        self.tables: Tables = tables(table_prefix)
        self.create_tables = create_tables
        self.clock = clock
        self.bm25 = bm25 or BM25()
        self.index = FullTextIndex(self.tables, self.cipher, self.bm25)
        # Semantic recall fused with full-text (memstack.memory.semantic): the shipped
        # ONNX MiniLM unless another embedder, or None for full-text only, is given.
        named = embedder_named(embedder)
        self.semantic = SemanticIndex(named, self.tables, self.cipher) if named else None
        if recall_policy is not None and not isinstance(recall_policy, RecallPolicy):
            raise ConfigurationError(
                f"recall_policy must be a RecallPolicy, not {type(recall_policy).__name__}",
                layer=LAYER,
            )
        self.recall_policy = recall_policy or RecallPolicy()
        self._count_tokens = CachedCount(count_tokens)
        # What every module function works on, built once (memstack.memory.parts).
        # Transactions the database rolled back (deadlocks) are rerun under ``retry``.
        self.parts = StoreParts(
            engine, self.tables, self.cipher, self.index, self.semantic, clock, retry
        )
        self._ready = False
        self._keys_checked: set[str] = set()  # scopes whose stored key ids were checked
        sqlite_settings(engine)

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
        return cls(open_engine(url, engine_kwargs), key=key, keyring=keyring, **options)

    def __repr__(self) -> str:
        url = self.engine.url.render_as_string(hide_password=True)
        return f"MemoryStore(url={url!r}, encrypted={self.cipher.encrypted})"

    async def close(self) -> None:
        await self.engine.dispose()

    # -- schema ----------------------------------------------------------------------------
    async def _prepare(self, *scopes: str) -> None:
        """Tables ready; and each scope's stored key ids readable, checked once per scope."""
        if not self._ready:
            await prepare(self.engine, self.tables, create_tables=self.create_tables)
            self._ready = True
        for scope in scopes:
            if scope not in self._keys_checked:
                await check_scope_keys(self.engine, self.tables, self.cipher, scope)
                if len(self._keys_checked) >= _CHECKED_SCOPES:
                    self._keys_checked.clear()
                self._keys_checked.add(scope)

    async def schema_version(self) -> int:
        await self._prepare()
        return SCHEMA_VERSION

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
        return writing.build_memory(
            scope,
            text,
            now=self.parts.now(),
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

    async def remember_many(
        self, memories: Sequence[Memory], *, actor: str = "api"
    ) -> list[Memory]:
        """Store several memories in one transaction (ingestion, distillation)."""
        stored = list(memories)
        for memory in stored:
            self._check_size(memory.text)
        await self._prepare(*{memory.scope for memory in stored})
        await writing.insert_memories(self.parts, stored, actor=actor)
        return stored

    def count_tokens(self, text: str) -> int:
        """``text``'s length in tokens, as recall counts it against its budget."""
        return self._count_tokens(text)

    def _check_size(self, text: str) -> None:
        limit = self.max_memory_tokens
        # A token spans at least one UTF-8 byte (at most four per character): a text this
        # short cannot be over, and most are, so they are not counted here.
        if limit is None or 4 * len(text) <= limit:
            return
        tokens = self._count_tokens(text)
        if tokens > limit:
            raise MemoryTooLargeError(
                f"a memory of {tokens} tokens is longer than max_memory_tokens={limit}, so "
                "no recall could return it; store a shorter summary, or split it",
                tokens=tokens,
                limit=limit,
                layer=LAYER,
            )

    async def verify(self, scope: str, memory_id: str, *, actor: str = "api") -> Memory:
        """Mark a memory as checked now (procedures re-validated, facts confirmed)."""
        memory = await self._require(scope, memory_id)
        return await writing.verify(self.parts, memory, actor=actor)

    # -- key–value surface -----------------------------------------------------------------
    async def write(self, scope: str, key: str, text: str, **options: Any) -> Memory:
        """Set ``key`` to ``text`` (an explicit memory that supersedes the key's older ones).

        A keyed value is a standing fact by default (``kind="fact"``): the standing block
        of recall (``profile=True``, the memory layer) shows it without a matching query.
        """
        options.setdefault("source", "explicit")
        options.setdefault("kind", "fact")
        return await self.remember(scope, text, key=key, **options)

    async def read(self, scope: str, key: str) -> Memory | None:
        """The current memory under ``key``: explicit before inferred, then the newest."""
        m = self.tables.memories
        found = await self._select(
            scope,
            and_(m.c.scope == scope, m.c.key_digest.in_(self.cipher.key_digests(scope, key))),
            live=True,
        )
        found = [memory for memory in found if memory.key == key]
        if not found:
            return None
        return min(found, key=lambda x: (x.source != "explicit", -x.created_at, x.id))

    async def keys(self, scope: str) -> list[str]:
        """Keys with a live memory in ``scope``, sorted."""
        m = self.tables.memories
        found = await self._select(
            scope, and_(m.c.scope == scope, m.c.key_digest.is_not(None)), live=True
        )
        return sorted({memory.key for memory in found if memory.key is not None})

    async def delete(self, scope: str, key: str, *, actor: str = "api") -> int:
        """Forget every memory under ``key`` (current and superseded)."""
        return await self.forget(scope, key=key, actor=actor)

    # -- reading ---------------------------------------------------------------------------
    async def _select(self, scope: str, where: Any, *, live: bool) -> list[Memory]:
        await self._prepare(scope)
        now = self.parts.now() if live else None
        return await reading.select_memories(self.parts, where, now=now)

    async def get(self, scope: str, memory_id: str) -> Memory | None:
        m = self.tables.memories
        found = await self._select(scope, and_(m.c.scope == scope, m.c.id == memory_id), live=False)
        return found[0] if found else None

    async def _require(self, scope: str, memory_id: str) -> Memory:
        memory = await self.get(scope, memory_id)
        if memory is None:
            raise ConfigurationError(f"no memory {memory_id!r} in scope {scope!r}", layer=LAYER)
        return memory

    async def list_memories(
        self, scope: str, *, kind: str | None = None, include_inactive: bool = False
    ) -> list[Memory]:
        """Memories of ``scope``, oldest first; superseded and expired ones only on request."""
        m = self.tables.memories
        where = m.c.scope == scope
        if kind is not None:
            where = and_(where, m.c.kind == check_choice("kind", kind, KINDS))
        return await self._select(scope, where, live=not include_inactive)

    async def scopes(self) -> list[str]:
        await self._prepare()
        return await reading.scopes(self.parts)

    async def history(self, memory_id: str) -> list[Event]:
        """Every change to ``memory_id``, oldest first: action, actor, time; never text."""
        await self._prepare()
        async with self.parts.connect("reading the audit trail") as conn:
            return await read_history(conn, self.tables, memory_id)

    # -- search ----------------------------------------------------------------------------
    async def search(
        self, scope: str, query: str, *, limit: int = 10, kinds: Sequence[str] | None = None
    ) -> list[tuple[Memory, float]]:
        """Live memories matching ``query``, best first, with their fused scores.

        Full-text (BM25) ranks by shared words; with an embedder, the nearest vectors form
        a second ranking, and the two scores are fused (``fuse_scores``). Either way the score
        is then weighed by precedence (source, confidence, verification, age).
        """
        check_scope(scope)
        await self._prepare(scope)
        return await reading.search(
            self.parts, scope, query, limit=limit, kinds=kinds, policy=self.recall_policy
        )

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
                f"max_tokens must be an int >= 1, not {max_tokens!r}", layer=LAYER
            )
        limit = self.recall_policy.candidates(max_tokens)
        ranked = [m for m, _ in await self.search(scope, query, limit=limit, kinds=kinds)]
        if profile:
            await self._prepare()
            ranked += await reading.profile(self.parts, scope, exclude={m.id for m in ranked})
        header = HEADER if header is None else header  # "" asks for no header
        packed = pack(ranked, max_tokens=max_tokens, count=self._count_tokens, header=header)
        return Recall(packed.memories, packed.text, packed.tokens)

    # -- forgetting (memstack.memory.forgetting) --------------------------------------------
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
        chosen = forgetting.target(self.parts, scope, memory_id, key=key)
        # By key needs the key's digest: a wrong key would forget nothing and say so quietly.
        await (self._prepare(scope) if key is not None else self._prepare())
        return await forgetting.forget(self.parts, chosen, actor=actor)

    async def erase(self, scope: str, *, actor: str = "governance") -> int:
        """Forget the whole scope and its audit events: nothing of it stays (forget a user).

        ``forget(scope)`` keeps an event per deleted memory, which names the scope; a user
        erased everywhere (``memstack forget --user``) must not stay named even there. The
        fact of the erasure is kept by the caller's trail (``memstack.audit``), under a
        pseudonym. Returns how many memories were deleted.
        """
        chosen = forgetting.target(self.parts, scope)
        await self._prepare()
        return await forgetting.erase(self.parts, chosen, actor=actor)

    async def scrub(self) -> None:
        """Make deleted rows' bytes unrecoverable where the database keeps them around.

        PostgreSQL's plain VACUUM frees dead tuples without zeroing them, so the memories
        table (the only one holding text) is rewritten with VACUUM FULL; the index table
        holds digests only and gets a plain VACUUM. A rewrite must keep rows that a
        still-running transaction may see, so under long transactions call this again
        later (a whole-scope ``forget`` calls it once). SQLite needs nothing here: it
        runs with ``secure_delete``.
        """
        await forgetting.scrub(self.parts)

    async def purge_expired(self, scope: str, *, actor: str = "expiry") -> int:
        """Hard-delete memories whose expiry has passed (the other way rows leave)."""
        await self._prepare()
        return await forgetting.purge_expired(self.parts, scope, actor=actor)

    # -- maintenance (memstack.memory.maintenance) ------------------------------------------
    async def embed_missing(self, scope: str, *, batch_size: int = 256) -> int:
        """Embed the scope's live memories that have no vector from this store's embedder.

        Memories written before an embedder was configured (or under another model) are
        found by full-text only until then. Returns how many were embedded.
        """
        check_scope(scope)
        if self.semantic is None:
            raise ConfigurationError("embed_missing needs a store with an embedder", layer=LAYER)
        await self._prepare(scope)
        return await maintenance.embed_missing(self.parts, scope, batch_size=batch_size)

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
            memories, now=self.parts.now(), policy=policy or ConsolidationPolicy()
        )
        if not dry_run and changes:
            await maintenance.apply_consolidation(self.parts, scope, changes, actor=actor)
        return changes

    async def rotate(self, scope: str | None = None, *, actor: str = "rotation") -> int:
        """Re-seal and re-index memories written under older keys with the active key."""
        if not self.cipher.encrypted:
            raise ConfigurationError("rotate needs a store opened with a key", layer=LAYER)
        await self._prepare()
        return await maintenance.rotate(self.parts, scope, actor=actor)
