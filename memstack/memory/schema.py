"""The memory tables, written once with SQLAlchemy Core for SQLite, PostgreSQL and MariaDB.

    >>> from memstack.memory.schema import SCHEMA_VERSION, tables
    >>> sorted(name.removeprefix("memstack_memor") for name in tables().metadata.tables)
    ['ies', 'y_events', 'y_meta', 'y_terms', 'y_vectors']
    >>> SCHEMA_VERSION
    1

``memories`` holds one row per memory: the fields precedence and filtering read stay in
columns; text, key name, structured data and provenance sit in ``payload`` (sealed when
the store has a key). ``terms`` is the search index: one row per (scope, term digest,
memory) with the term's BM25 impact, indexed in impact order (``ranked_index``; tables
made before it had ``ix_…_terms_impact`` instead, and get it when next opened).
``events`` is the audit trail; it never holds memory text. ``meta`` records the schema
version.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Double,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.dialects.mysql import LONGTEXT

__all__ = ["SCHEMA_VERSION", "Tables", "ranked_index", "tables"]

SCHEMA_VERSION = 1
_ID = 32
_SCOPE = 255


@dataclass(frozen=True)
class Tables:
    metadata: MetaData
    meta: Table
    memories: Table
    terms: Table
    events: Table
    vectors: Table


def tables(prefix: str = "memstack_memor") -> Tables:
    """The four tables; ``prefix`` lets several stores share one database."""
    metadata = MetaData()
    long_text = Text().with_variant(LONGTEXT(), "mysql", "mariadb")
    meta = Table(
        f"{prefix}y_meta",
        metadata,
        Column("name", String(64), primary_key=True),
        Column("value", String(255), nullable=False),
    )
    memories = Table(
        f"{prefix}ies",
        metadata,
        Column("id", String(_ID), primary_key=True),
        Column("scope", String(_SCOPE), nullable=False),
        Column("key_digest", String(16)),
        Column("kind", String(16), nullable=False),
        Column("source", String(16), nullable=False),
        Column("confidence", Double, nullable=False),
        Column("created_at", Double, nullable=False),
        Column("updated_at", Double, nullable=False),
        Column("valid_from", Double),
        Column("superseded_at", Double),
        Column("superseded_by", String(_ID)),
        Column("last_verified_at", Double),
        Column("expires_at", Double),
        Column("needs_review", Boolean, nullable=False, default=False),
        Column("length", Integer, nullable=False),
        Column("kid", String(64), nullable=False),
        Column("payload", long_text, nullable=False),
        Index(f"ix_{prefix}ies_scope_key", "scope", "key_digest"),
    )
    terms = Table(
        f"{prefix}y_terms",
        metadata,
        Column("scope", String(_SCOPE), primary_key=True),
        Column("term", BigInteger, primary_key=True, autoincrement=False),
        Column("memory_id", String(_ID), primary_key=True),
        Column("impact", Double, nullable=False),
        # Recall reads a term's best postings from this index alone: it holds the memory
        # id too, so no posting is looked up in the table (full-text CPU at 100,000
        # memories on SQLite: 3.0 -> 1.1 ms), and it orders ties at the cut by id.
        Index(f"ix_{prefix}y_terms_ranked", "scope", "term", "impact", "memory_id"),
        Index(f"ix_{prefix}y_terms_memory", "memory_id"),
    )
    events = Table(
        f"{prefix}y_events",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("memory_id", String(_ID), nullable=False),
        Column("scope", String(_SCOPE), nullable=False),
        Column("action", String(32), nullable=False),
        Column("actor", String(64), nullable=False),
        Column("at", Double, nullable=False),
        Column("detail", Text, nullable=False),
        Index(f"ix_{prefix}y_events_memory", "memory_id"),
    )
    vectors = Table(
        f"{prefix}y_vectors",
        metadata,
        Column("seq", Integer, primary_key=True, autoincrement=True),
        Column("scope", String(_SCOPE), nullable=False),
        Column("memory_id", String(_ID), nullable=False),
        Column("model", String(128), nullable=False),
        Column("kid", String(64), nullable=False),
        Column("vector", long_text, nullable=False),
        Index(f"ix_{prefix}y_vectors_scope", "scope", "model", "seq"),
        Index(f"ix_{prefix}y_vectors_memory", "memory_id"),
    )
    return Tables(metadata, meta, memories, terms, events, vectors)


def ranked_index(tables: Tables) -> Index:
    """The terms index recall ranks from; ``memstack.memory.database`` adds it to tables
    created before it (same schema version: the queries are right without it, slower)."""
    [index] = [i for i in tables.terms.indexes if i.name and i.name.endswith("_terms_ranked")]
    return index
