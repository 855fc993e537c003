"""Translate a store's own exceptions into ``BackendError`` at the boundary."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

from memstack.errors import BackendError, MemstackError, TransientError


@cache
def store_exception_types() -> tuple[type[BaseException], ...]:
    """Exception families that mean "the store failed", for the drivers installed."""
    types: list[type[BaseException]] = [OSError, sqlite3.Error, TimeoutError]
    try:
        from sqlalchemy.exc import SQLAlchemyError

        types.append(SQLAlchemyError)
    except ImportError:  # pragma: no cover - sqlalchemy is a runtime dependency
        pass
    try:
        from redis.exceptions import RedisError

        types.append(RedisError)
    except ImportError:
        pass
    return tuple(types)


@contextmanager
def store_errors(
    store: object, *, layer: str | None = None, doing: str | None = None
) -> Iterator[None]:
    """Re-raise store failures as ``BackendError`` naming the store (or ``doing``) and cause."""
    try:
        yield
    except BackendError as exc:
        if layer is not None and exc.layer is None and type(exc) in (BackendError, TransientError):
            # Translated below by an adapter (a raw read, ``read_values``), which knew the
            # store but not the layer whose call failed: name it as if caught here. In
            # place, so what else the error carries (``unsaved_items``) stays with it.
            BackendError.__init__(exc, exc.reason, layer=layer, session_id=exc.session_id)
        raise
    except MemstackError:
        raise
    except store_exception_types() as exc:
        session_id = getattr(store, "session_id", None)
        what = doing or f"{type(store).__name__} failed"
        raise BackendError(
            f"{what}: {type(exc).__name__}: {exc}".strip(),
            layer=layer,
            session_id=session_id if isinstance(session_id, str) else None,
        ) from exc


def without_password(url: str) -> str:
    """``url`` with its password shown as ``***``: for messages and reprs."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)
