"""The layer base: one place where delegation to the wrapped session is written.

    >>> from memstack.base import SessionLayer
    >>> from memstack.testing import InMemorySession
    >>> class Shouting(SessionLayer):
    ...     async def add_items(self, items, *, wrapper=None):
    ...         loud = [{**i, "content": i["content"].upper()} for i in items]
    ...         await self.inner.add_items(loud, **self.forward(wrapper))
    >>> stack = Shouting(InMemorySession("s1"))
    >>> stack.session_id
    's1'

A layer is ``XSession(inner, *, option=…)``. It overrides only what it changes; the rest
is delegated here. ``repr(stack)`` shows the chain bottom to top; ``stack.inner``,
``iter(stack)`` and ``stack.find(SomeType)`` walk it, so a backend's own extras stay
reachable without attribute forwarding.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from agents.memory import Session, SessionSettings, is_openai_responses_compaction_aware_session
from agents.memory.session_settings import resolve_session_limit

from memstack.backends.capabilities import forward_wrapper
from memstack.backends.translate import store_errors
from memstack.content_keys import known_keys
from memstack.errors import ConfigurationError
from memstack.history import (
    newest_valid,
    reading_as_stored,
    stored_history,
    valid_view,
    validate_items,
)

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.run_context import RunContextWrapper

    from memstack.backends.capabilities import StorageCapabilities

__all__ = [
    "SessionLayer",
    "describe",
    "find",
    "full_history_layer",
    "iter_chain",
    "limit_arg",
    "stored_history",
]

T = TypeVar("T")

_SESSION_METHODS = ("get_items", "add_items", "pop_item", "clear_session")


def limit_arg(limit: int | None) -> dict[str, int]:
    """``limit`` as the SDK passes it: by keyword, and not at all when there is none.

    Some sessions declare ``limit`` keyword-only, or not at all; every one accepts this.
    """
    return {} if limit is None else {"limit": limit}


def _refuse_compaction_aware(inner: Session, layer: str) -> None:
    """The Runner calls ``run_compaction`` only on the top session: below a layer it never runs."""
    if is_openai_responses_compaction_aware_session(inner):
        raise ConfigurationError(
            f"{type(inner).__name__} compacts only as the top session (the Runner calls its "
            "run_compaction there), so under a memstack layer its compaction would silently "
            "stop; wrap the store itself and compact with memstack's layer instead: "
            "CompactionSession(store, strategy=ResponsesCompact(model=...))",
            layer=layer,
        )


def _translating(
    method: Callable[..., Coroutine[Any, Any, T]],
) -> Callable[..., Coroutine[Any, Any, T]]:
    """Turn the store's own exceptions into ``BackendError`` naming this layer; on top of
    a stack, also refuse items stores cannot keep and views the API would reject."""
    name = method.__name__

    @functools.wraps(method)
    async def call(self: SessionLayer, *args: Any, **kwargs: Any) -> T:
        with store_errors(self.inner, layer=type(self).__name__):
            if name == "add_items" and self.on_top:
                batch = args[0] if args else kwargs.get("items")
                validate_items(batch, layer=type(self).__name__)
            if name == "get_items" and self.on_top and not reading_as_stored():
                if self.reads_unaltered():
                    with known_keys():  # items built during this read may come with their keys
                        return cast(T, await _valid_newest(self, method, *args, **kwargs))
                return cast(T, await _valid_newest(self, method, *args, **kwargs))
            return await method(self, *args, **kwargs)

    return call


async def _valid_newest(
    layer: SessionLayer,
    method: Callable[..., Coroutine[Any, Any, Any]],
    limit: int | None = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """What the top of a stack returns: the layer's view, without what would make the API
    reject it; with ``limit``, the newest ``limit`` items of that, as the SDK's stores do.

    Only what a layer left out makes an item an orphan: a limit cut keeps the output whose
    call lies before it, so the read goes back until that is known. It reads no further
    than that: an unreadable item beyond the limit must not fail the read.
    """
    limit = resolve_session_limit(limit, layer.session_settings)
    if limit is None:
        return valid_view(await method(layer, None, **kwargs))
    if limit <= 0:
        await method(layer, 0, **kwargs)  # still the store's call: a broken store says so
        return []
    size = limit
    while True:
        items = await method(layer, size, **kwargs)
        newest = newest_valid(items, limit, whole=len(items) < size)
        if newest is not None:
            return newest
        size *= 2


def _overrides_io(cls: type[SessionLayer]) -> bool:
    """True when a layer class (or any base of it, a mixin too) has its own reads or writes."""
    return (
        cls.get_items is not SessionLayer.get_items or cls.add_items is not SessionLayer.add_items
    )


class SessionLayer:
    """Base of every memstack layer: a Session that wraps another Session."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Every layer's Session methods translate store failures, overridden or not.
        super().__init_subclass__(**kwargs)
        for name in _SESSION_METHODS:
            if name in cls.__dict__:
                setattr(cls, name, _translating(cls.__dict__[name]))

    #: Name used by the stack builder and recipes; set by each concrete layer.
    layer_name: ClassVar[str] = ""
    #: True when this layer stores items in another form than it returns them
    #: (encryption, TTL stamps); the store's raw capabilities then do not apply as-is.
    transforms_items: ClassVar[bool] = False
    #: True when ``get_items`` returns a view (a window, a summary) rather than the whole
    #: stored history; export, import and maintenance work below such layers.
    view_only: ClassVar[bool] = False
    #: False when this layer never alters, in place, an item it reads from below (every
    #: memstack layer). A layer of your own keeps True unless it makes the same promise.
    #: A promise of the class that sets it, not inherited: a subclass may alter items.
    alters_what_it_reads: ClassVar[bool] = True

    def __init__(self, inner: Session) -> None:
        if not isinstance(inner, Session):
            raise ConfigurationError(
                f"inner must be an Agents SDK Session, not {type(inner).__name__}",
                layer=type(self).__name__,
            )
        _refuse_compaction_aware(inner, type(self).__name__)
        self.inner = inner
        # The top of a stack is the one place that validates what comes in and repairs
        # what goes out, whatever the order of the layers below it.
        self.on_top = True
        self._reads_unaltered: bool | None = None
        if isinstance(inner, SessionLayer):
            inner.on_top = False
        # Read once from the store: a stack has one session id, never passed twice.
        self.session_id: str = inner.session_id

    # -- identity -----------------------------------------------------------------------
    @property
    def session_settings(self) -> SessionSettings | None:
        return self.inner.session_settings

    @session_settings.setter
    def session_settings(self, value: SessionSettings | None) -> None:
        self.inner.session_settings = value

    # -- delegation ---------------------------------------------------------------------
    def forward(self, wrapper: RunContextWrapper[Any] | None) -> dict[str, Any]:
        """Keyword arguments that pass ``wrapper`` on only to an inner that declares it."""
        return forward_wrapper(self.inner, wrapper)

    @_translating
    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        return await self.inner.get_items(**limit_arg(limit), **self.forward(wrapper))

    @_translating
    async def add_items(
        self, items: list[TResponseInputItem], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        await self.inner.add_items(items, **self.forward(wrapper))

    @_translating
    async def pop_item(
        self, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> TResponseInputItem | None:
        return await self.inner.pop_item(**self.forward(wrapper))

    @_translating
    async def clear_session(self, *, wrapper: RunContextWrapper[Any] | None = None) -> None:
        await self.inner.clear_session(**self.forward(wrapper))

    def close(self) -> Awaitable[None] | None:
        """Close the store below the way its own ``close()`` does: sync, or awaitable.

        ``SQLiteSession.close()`` is sync, ``RedisSession.close()`` a coroutine, so code that
        closed its store closes the stack unchanged. A store without ``close()`` (the SDK's
        ``SQLAlchemySession``: whoever made its engine disposes it) has nothing to close.
        """
        close = getattr(self.inner, "close", None)
        return close() if callable(close) else None

    def storage_capabilities(self) -> StorageCapabilities:
        """What the store below can do, as seen through this layer.

        A layer that keeps items unchanged shares the store's capabilities (a view reads
        its tail through itself); one that transforms them falls back to the generic
        adapter over its own Session methods unless it provides a translating adapter.
        """
        from memstack.backends.adapters import capabilities_of
        from memstack.backends.capabilities import GenericCapabilities, ViewCapabilities

        if self.transforms_items:
            return GenericCapabilities(self)
        if self.view_only or _overrides_io(type(self)):
            # Reads and derived writes from above must cross what this layer does.
            return ViewCapabilities(self, capabilities_of(self.inner))
        return capabilities_of(self.inner)

    def reads_unaltered(self) -> bool:
        """True when no layer of this stack alters what it reads (see ``known_keys``)."""
        if self._reads_unaltered is None:
            self._reads_unaltered = all(
                not isinstance(layer, SessionLayer)
                or vars(type(layer)).get("alters_what_it_reads", True) is False
                for layer in iter_chain(self)
            )
        return self._reads_unaltered

    # -- walking the chain --------------------------------------------------------------
    def __iter__(self) -> Iterator[Session]:
        """This layer, then each session below it, down to the backend."""
        return iter_chain(self)

    @property
    def backend(self) -> Session:
        """The bottom session: the store itself."""
        *_, bottom = iter_chain(self)
        return bottom

    def find(self, kind: type[T]) -> T | None:
        """The nearest session of ``kind`` at or below this layer, or None."""
        return find(self, kind)

    def repr_options(self) -> dict[str, object]:
        """Key options shown by ``repr``; never secrets."""
        return {}

    def __repr__(self) -> str:
        return " → ".join(describe(session) for session in reversed(list(iter_chain(self))))


def iter_chain(session: Session) -> Iterator[Session]:
    """Walk from ``session`` down through ``.inner`` to the backend."""
    current: Session | None = session
    while current is not None:
        yield current
        current = current.inner if isinstance(current, SessionLayer) else None


def full_history_layer(session: Session) -> Session:
    """The highest session in the chain whose ``get_items`` is the whole history."""
    for candidate in iter_chain(session):
        if not (isinstance(candidate, SessionLayer) and candidate.view_only):
            return candidate
    raise AssertionError("unreachable: the backend is never a view")


def find(session: Session, kind: type[T]) -> T | None:
    for candidate in iter_chain(session):
        if isinstance(candidate, kind):
            return candidate
    return None


def describe(session: Session) -> str:
    """One chain element: ``Name(option=value, …)``."""
    name = type(session).__name__
    if isinstance(session, SessionLayer):
        options = session.repr_options()
    else:
        options = {"session_id": session.session_id}
        for attribute in ("db_path", "url"):
            value = getattr(session, attribute, None)
            if value is not None:
                options[attribute] = str(value)
        engine = getattr(session, "engine", None)
        if engine is not None:
            options["url"] = engine.url.render_as_string(hide_password=True)
    return f"{name}({', '.join(f'{key}={value!r}' for key, value in options.items())})"
