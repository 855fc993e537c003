"""The recall queries as SQL text, built once per number of query terms.

    >>> from memstack.memory.queries import RecallQueries
    >>> from memstack.memory.schema import tables
    >>> sql = RecallQueries(tables()).ranked(2)
    >>> sql.count("UNION ALL"), ":w1" in sql, ":t1" in sql
    (1, True, True)

Recall runs on every turn, so its statements skip the expression builder: the same
portable SQL (SQLite, PostgreSQL, MariaDB) with named parameters, cached per term or id
count, read by ``memstack.memory.fetch`` (one hand-off to SQLite's thread each) into
``memory_row`` / ``ranked_row`` tuples. ``ranked`` reads each term's best postings in
impact order, sums them per memory, keeps the best ``:limit`` and joins them to their
live rows, in one round trip; ``live_by_ids`` reads the live rows of the memories found
by meaning. Postings of equal impact at a
term's cut are taken by memory id, highest first: the order the ``(scope, term, impact,
memory_id)`` index holds them in (``memstack.memory.schema``), so a database with or
without that index, on any backend, keeps the same ones. ``live`` is the same liveness
condition as an expression, for the queries built with SQLAlchemy: the two sit side by
side so they change together.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Sequence
from functools import lru_cache, partial
from typing import Any

from sqlalchemy import ColumnElement, Table, and_, or_

from memstack.memory.schema import Tables

__all__ = ["RecallQueries", "live"]

# ``live`` as SQL text, for the memories table under the alias ``m``.
_LIVE = "m.superseded_at IS NULL AND (m.expires_at IS NULL OR m.expires_at > :now)"


def live(memories: Table, now: float) -> ColumnElement[bool]:
    """Neither superseded nor expired at ``now``: what recall may return."""
    m = memories
    return and_(m.c.superseded_at.is_(None), or_(m.c.expires_at.is_(None), m.c.expires_at > now))


class RecallQueries:
    """SQL text for document frequencies and ranked recall over one set of tables."""

    def __init__(self, tables: Tables) -> None:
        self.terms = tables.terms.name
        self.memories = tables.memories.name
        names = [column.name for column in tables.memories.columns]
        self.columns = ", ".join(f"m.{name}" for name in names)
        # Rows read by column name (``row.kind``), as SQLAlchemy's are, on every driver.
        make: Any = namedtuple  # of names known at run time
        memory_row, ranked_row = make("MemoryRow", names), make("RankedRow", [*names, "total"])
        # ``tuple.__new__(cls, values)`` is what a named tuple's ``_make`` does.
        self.memory_row: Callable[[Sequence[Any]], Any] = partial(tuple.__new__, memory_row)
        self.ranked_row: Callable[[Sequence[Any]], Any] = partial(tuple.__new__, ranked_row)
        self.frequencies = lru_cache(maxsize=64)(self._frequencies)
        self.ranked = lru_cache(maxsize=64)(self._ranked)
        self.live_by_ids = lru_cache(maxsize=256)(self._live_by_ids)

        self.impacts = lru_cache(maxsize=256)(self._impacts)

    def _frequencies(self, count: int) -> str:
        """``(term, df)`` of terms ``:t0…``, each counted up to ``:cap`` postings."""
        parts = [
            f"SELECT :t{i} AS term, COUNT(*) AS df FROM (SELECT memory_id FROM {self.terms} "
            f"WHERE scope = :scope AND term = :t{i} LIMIT :cap) AS c{i}"
            for i in range(count)
        ]
        return " UNION ALL ".join(parts)

    def _live_by_ids(self, count: int) -> str:
        """Live rows of the memories ``:i0…``."""
        # By primary key only: with ``scope = :scope`` here SQLite walks the scope's
        # (scope, key) index instead, every row of the scope (45 ms a recall at 100,000).
        ids = ", ".join(f":i{i}" for i in range(count))
        return f"SELECT {self.columns} FROM {self.memories} AS m WHERE m.id IN ({ids}) AND {_LIVE}"

    def _impacts(self, ids: int, terms: int, counted: int = 0) -> str:
        """``(scope, memory_id, term, impact)`` of terms ``:t0…`` in memories ``:i0…``;
        first, with ``counted``, ``(NULL, NULL, term, df)`` of terms ``:f0…`` (as
        ``frequencies``): query expansion's terms are new to the frequency cache, and
        counted here they cost no round trip of their own.

        Query expansion scores the candidates it has. By memory id only, as above: with
        ``scope = :scope`` SQLite reads every posting of each term through the ranked
        index (a common term's thousands); the caller checks the scope on the rows.
        """
        in_ids = ", ".join(f":i{i}" for i in range(ids))
        in_terms = ", ".join(f":t{i}" for i in range(terms))
        parts = [
            f"SELECT NULL AS scope, NULL AS memory_id, :f{i} AS term, COUNT(*) AS impact "
            f"FROM (SELECT memory_id FROM {self.terms} WHERE scope = :scope AND term = :f{i} "
            f"LIMIT :cap) AS c{i}"
            for i in range(counted)
        ]
        parts.append(
            f"SELECT scope, memory_id, term, impact FROM {self.terms} "
            f"WHERE memory_id IN ({in_ids}) AND term IN ({in_terms})"
        )
        return " UNION ALL ".join(parts)

    def _ranked(self, count: int) -> str:
        """Live rows of the best ``:limit`` memories for terms ``:t0…`` weighted ``:w0…``."""
        parts = [
            f"SELECT memory_id, score FROM (SELECT memory_id, impact * :w{i} AS score "
            f"FROM {self.terms} WHERE scope = :scope AND term = :t{i} "
            f"ORDER BY impact DESC, memory_id DESC LIMIT :per_term) AS p{i}"
            for i in range(count)
        ]
        return (
            f"SELECT {self.columns}, s.total AS total FROM {self.memories} AS m JOIN ("
            f"SELECT memory_id, SUM(score) AS total FROM ({' UNION ALL '.join(parts)}) AS postings "
            "GROUP BY memory_id ORDER BY total DESC, memory_id LIMIT :limit"
            f") AS s ON s.memory_id = m.id WHERE {_LIVE}"
        )
