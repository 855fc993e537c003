"""SDK SQL sessions over a shared engine, made by copying one built per configuration.

    >>> import asyncio
    >>> from agents.extensions.memory import SQLAlchemySession
    >>> from memstack import resources
    >>> from memstack.backends.prototypes import sdk_session
    >>> engine = resources.engine("sqlite+aiosqlite:///proto.db")
    >>> a = sdk_session(SQLAlchemySession, "a", engine=engine, create_tables=True)
    >>> b = sdk_session(SQLAlchemySession, "b", engine=engine, create_tables=True)
    >>> (a.session_id, b.session_id), a._messages is b._messages
    (('a', 'b'), True)

The SDK's ``SQLAlchemySession`` declares its tables, indexes and session factory in its
constructor: about as long as the rest of a stack's build together, and the same for every
session id of one engine and table names. A server builds a store per request, so the
first one built is kept as a prototype and the others are shallow copies of it with their
own ``session_id`` (and their own settings object). Once any copy has created the tables,
later copies skip that check: it is a few round trips per request otherwise.

Only sessions over the process's engines (``memstack.resources``) are made this way: a
prototype lives as long as its engine, which for those is the process.
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import Hashable
from typing import Any, TypeVar

from agents.extensions.memory import SQLAlchemySession

from memstack.resources import options_key

__all__ = ["sdk_session"]

S = TypeVar("S", bound=SQLAlchemySession)


class _Prototype:
    """One configuration's first session, and the last copy made (to learn tables exist)."""

    def __init__(self, session: SQLAlchemySession) -> None:
        self.session = session
        self.ready = _tables_ready(session)
        self.last: weakref.ref[SQLAlchemySession] | None = None


_PROTOTYPES: dict[Hashable, _Prototype] = {}
_LOCK = threading.Lock()


def _tables_ready(session: SQLAlchemySession) -> bool:
    # SQLAlchemySession clears _create_tables once it created them; memstack's MySQL
    # subclass sets _tables_ready (memstack.backends.sqlalchemy_store).
    if hasattr(session, "_tables_ready"):
        return bool(session._tables_ready)
    return not session._create_tables


def _mark_ready(session: SQLAlchemySession) -> None:
    if hasattr(session, "_tables_ready"):
        session._tables_ready = True
    else:
        session._create_tables = False


def sdk_session(cls: type[S], session_id: str, *, engine: Any, **options: Any) -> S:
    """``cls(session_id, engine=engine, **options)``, copied from this configuration's first."""
    key = (cls, engine, options_key(options))
    with _LOCK:
        found = _PROTOTYPES.get(key)
        if found is None:
            found = _PROTOTYPES[key] = _Prototype(cls(session_id, engine=engine, **options))
            found.last = weakref.ref(found.session)
            return found.session  # type: ignore[return-value]
        last = found.last() if found.last is not None else None
        if not found.ready and last is not None and _tables_ready(last):
            found.ready = True
        made = copy.copy(found.session)
        made.session_id = session_id
        made.session_settings = copy.copy(found.session.session_settings)
        if found.ready:
            _mark_ready(made)
        found.last = weakref.ref(made)
        return made  # type: ignore[return-value]
