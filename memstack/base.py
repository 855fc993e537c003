"""The layer base: one place where delegation to the wrapped session is written.

    >>> from memstack.base import SessionLayer
    >>> from memstack.testing import InMemorySession
    >>> class Shouting(SessionLayer):
    ...     async def write(self, items, wrapper):
    ...         loud = [{**i, "content": i["content"].upper()} for i in items]
    ...         await self.write_below(loud, wrapper)
    >>> stack = Shouting(InMemorySession("s1"))
    >>> stack.session_id
    's1'

A layer is ``XSession(inner, *, option=…)``. Callers use the Session methods, which this
base writes once for every layer: ``add_items`` checks the batch whole, then hands it to
the layer's ``write``; ``get_items`` reads through the whole stack in one loop
(``memstack.pipeline``: each layer's ``shape`` turns the tail below into its view), then
leaves out what the API would refuse and hands the caller its own copies. Between layers
only these internal calls travel (``shape``, ``write``, ``pop``, ``clear``), so nothing is
checked or copied twice, and whichever layer a caller holds is the top of its stack.

A layer overrides only what it changes. A class of your own that overrides a Session
method itself (``get_items``, say) is still a layer: layers above then call that method,
and read what it returns. ``repr(stack)`` shows the chain bottom to top; ``stack.inner``,
``iter(stack)`` and ``stack.find(SomeType)`` walk it.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from agents.memory import Session, SessionSettings, is_openai_responses_compaction_aware_session
from agents.memory.session_settings import resolve_session_limit

import memstack.incremental as incremental
from memstack.backends.adapters import capabilities_of
from memstack.backends.capabilities import Tail, forward_wrapper
from memstack.backends.translate import store_errors
from memstack.errors import ConfigurationError
from memstack.history import (
    Fact,
    fact_weight,
    item_fact,
    newest_valid,
    reading_as_stored,
    stored_history,
    stored_items,
    valid_view,
    validate_items,
)
from memstack.pipeline import Need, Newest, fresh, read

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.run_context import RunContextWrapper

    from memstack.backends.capabilities import StorageCapabilities

__all__ = [
    "SessionLayer",
    "chain_below",
    "describe",
    "find",
    "fresh",
    "full_history_layer",
    "iter_chain",
    "limit_arg",
    "read_view",
    "stored_history",
    "stored_values",
]

T = TypeVar("T")
Item = dict[str, Any]


# Session method -> the class flag saying a layer class does it its own way.
_OWN_WAY = {
    "get_items": "reads_its_own_way",
    "add_items": "writes_its_own_way",
    "pop_item": "pops_its_own_way",
    "clear_session": "clears_its_own_way",
}


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


def _own_way(
    method: Callable[..., Coroutine[Any, Any, T]],
) -> Callable[..., Coroutine[Any, Any, T]]:
    """A Session method a layer class of your own overrides: its store's failures become
    ``BackendError`` naming the layer, its input is checked whole, its views repaired."""
    name = method.__name__

    @functools.wraps(method)
    async def call(self: SessionLayer, *args: Any, **kwargs: Any) -> T:
        with store_errors(self.inner, layer=type(self).__name__):
            if name == "add_items":
                validate_items(args[0] if args else kwargs.get("items"), layer=type(self).__name__)
            result = await method(self, *args, **kwargs)
        if name == "get_items" and not reading_as_stored():
            return cast(T, valid_view(cast("list[Item]", result)))
        return result

    call._own_way = True  # type: ignore[attr-defined]
    return call


class SessionLayer:
    """Base of every memstack layer: a Session that wraps another Session."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, flag in _OWN_WAY.items():
            method = getattr(cls, name)
            if method is getattr(SessionLayer, name):
                continue
            setattr(cls, flag, True)  # its own, or a mixin's (anywhere in the class)
            if not getattr(method, "_own_way", False):
                setattr(cls, name, _own_way(method))

    #: Name used by the stack builder and recipes; set by each concrete layer.
    layer_name: ClassVar[str] = ""
    #: True when this layer stores items in another form than it returns them
    #: (encryption, TTL stamps); the store's raw capabilities then do not apply as-is.
    transforms_items: ClassVar[bool] = False
    #: True when the view is a part of the stored history (a window, a summary) rather
    #: than all of it; export, import and maintenance work below such layers.
    view_only: ClassVar[bool] = False
    #: The fewest stored items a read of this layer can decide on (a first read's size).
    min_read: int = 0
    #: Set on a class that overrides that Session method (see the module docstring).
    reads_its_own_way: ClassVar[bool] = False
    writes_its_own_way: ClassVar[bool] = False
    pops_its_own_way: ClassVar[bool] = False
    clears_its_own_way: ClassVar[bool] = False

    def __init__(self, inner: Session) -> None:
        if not isinstance(inner, Session):
            raise ConfigurationError(
                f"inner must be an Agents SDK Session, not {type(inner).__name__}",
                layer=type(self).__name__,
            )
        _refuse_compaction_aware(inner, type(self).__name__)
        self.inner = inner
        # Read once from the store: a stack has one session id, never passed twice.
        self.session_id: str = inner.session_id

    # -- identity -----------------------------------------------------------------------
    @property
    def session_settings(self) -> SessionSettings | None:
        return self.inner.session_settings

    @session_settings.setter
    def session_settings(self, value: SessionSettings | None) -> None:
        self.inner.session_settings = value

    # -- the Session protocol, for callers ------------------------------------------------
    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        """The view without what the API would refuse; with ``limit``, its newest items.

        A limit cut keeps an output whose call lies before it, as the SDK's stores do:
        only what a layer left out (expired, unreadable, outside a window) makes an orphan
        that is left out, so a read goes back until that is known.
        """
        with store_errors(self.inner, layer=type(self).__name__):
            return await self._caller_view(limit, wrapper)

    async def _caller_view(
        self, limit: int | None, wrapper: RunContextWrapper[Any] | None
    ) -> list[TResponseInputItem]:
        limit = resolve_session_limit(limit, self.session_settings)
        if reading_as_stored():  # export and rewrites: what is stored, unrepaired
            tail = await read_view(self, want=limit, wrapper=wrapper)
            shown = tail.items if limit is None else tail.items[len(tail.items) - limit :]
            return fresh(shown if limit is None or limit > 0 else [])
        if limit is None:
            tail = await read_view(self, want=None, wrapper=wrapper)
            return fresh(valid_view(tail.items, _view_facts(tail, self.session_id)))
        want = max(limit, 1)  # a limit of 0 still asks the store: a broken one says so
        while True:
            tail = await read_view(self, want=want, wrapper=wrapper)
            newest = newest_valid(tail.items, limit, whole=tail.complete)
            if newest is not None:
                return fresh(newest)
            want *= 2

    async def add_items(
        self, items: list[TResponseInputItem], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        validate_items(items, layer=type(self).__name__)
        with store_errors(self.inner, layer=type(self).__name__):
            await self.write(items, wrapper)

    async def pop_item(
        self, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> TResponseInputItem | None:
        with store_errors(self.inner, layer=type(self).__name__):
            popped = await self.pop(wrapper)
        return None if popped is None else fresh([popped])[0]

    async def clear_session(self, *, wrapper: RunContextWrapper[Any] | None = None) -> None:
        with store_errors(self.inner, layer=type(self).__name__):
            await self.clear(wrapper)

    # -- the layer protocol: what layers call on each other ----------------------------------
    async def shape(self, below: Tail, wrapper: RunContextWrapper[Any] | None) -> Tail | Need:
        """This layer's view of ``below`` (the newest items of the layer under it).

        ``Need.MORE`` when the view may begin before ``below`` does (never when ``below``
        is complete); an incomplete result holds only the newest items it is sure of.
        """
        return below

    async def write(self, items: Sequence[Any], wrapper: RunContextWrapper[Any] | None) -> None:
        """Store a batch already checked whole by the top of the stack."""
        await self.write_below(items, wrapper)

    async def pop(self, wrapper: RunContextWrapper[Any] | None) -> Any:
        """Remove and return the newest item, as this layer shows it (shared: read-only)."""
        return await self.pop_below(wrapper)

    async def clear(self, wrapper: RunContextWrapper[Any] | None) -> None:
        await self.clear_below(wrapper)

    # -- reaching the layer below ---------------------------------------------------------
    async def write_below(
        self, items: Sequence[Any], wrapper: RunContextWrapper[Any] | None
    ) -> None:
        inner = self.inner
        if isinstance(inner, SessionLayer) and not inner.writes_its_own_way:
            await inner.write(items, wrapper)
            return
        with store_errors(inner):  # named by the layer whose method was called
            # The store's own write: its adapter reruns it if the database rolled it back.
            await capabilities_of(inner).transaction(
                lambda: inner.add_items(list(items), **forward_wrapper(inner, wrapper))
            )

    async def pop_below(self, wrapper: RunContextWrapper[Any] | None) -> Any:
        inner = self.inner
        if isinstance(inner, SessionLayer) and not inner.pops_its_own_way:
            return await inner.pop(wrapper)
        with store_errors(inner):
            return await capabilities_of(inner).transaction(
                lambda: inner.pop_item(**forward_wrapper(inner, wrapper))
            )

    async def clear_below(self, wrapper: RunContextWrapper[Any] | None) -> None:
        inner = self.inner
        if isinstance(inner, SessionLayer) and not inner.clears_its_own_way:
            await inner.clear(wrapper)
            return
        with store_errors(inner):
            await capabilities_of(inner).transaction(
                lambda: inner.clear_session(**forward_wrapper(inner, wrapper))
            )

    async def read_below(
        self,
        decide: Callable[[Tail], Awaitable[T | Need | None]],
        wrapper: RunContextWrapper[Any] | None,
        *,
        first: int = 128,
        hinted: bool = True,
        reach_of: Callable[[T, Tail], int] | None = None,
    ) -> T:
        """Read what the layer below shows, longer and longer, until ``decide`` answers
        (``memstack.pipeline.read``; ``hinted=False`` for a read of a few newest items)."""
        layers, source = chain_below(self.inner)
        newest = _source_reader(source, wrapper, layers)
        return await read(
            layers, source, newest, decide, wrapper, first=first, hinted=hinted, reach_of=reach_of
        )

    async def newest_below(self, n: int, wrapper: RunContextWrapper[Any] | None) -> Tail:
        """At least the newest ``n`` items the layer below shows (all, when it holds fewer)."""

        async def enough(tail: Tail) -> Tail | None:
            return tail if tail.complete or len(tail.items) >= n else None

        return await self.read_below(enough, wrapper, first=max(n, 1), hinted=False)

    async def view_tail(self, n: int, wrapper: RunContextWrapper[Any] | None) -> Tail:
        """The newest ``n`` items of this layer's view, the caller's own, with write times
        (what capability adapters answer ``read_tail`` with)."""
        tail = (await read_view(self, want=n, wrapper=wrapper)).newest(n)
        return Tail(fresh(tail.items), tail.written_at, tail.keys, tail.complete, tail.reach)

    def forward(self, wrapper: RunContextWrapper[Any] | None) -> dict[str, Any]:
        """Keyword arguments that pass ``wrapper`` on only to an inner that declares it."""
        return forward_wrapper(self.inner, wrapper)

    def close(self) -> Awaitable[None] | None:
        """Close the store below the way its own ``close()`` does: sync, or awaitable.

        ``SQLiteSession.close()`` is sync, ``RedisSession.close()`` a coroutine, so code that
        closed its store closes the stack unchanged. A store without ``close()`` (the SDK's
        ``SQLAlchemySession``: whoever made its engine disposes it) has nothing to close.
        """
        close = getattr(self.inner, "close", None)
        return close() if callable(close) else None

    _capabilities: StorageCapabilities | None = None

    @property
    def capabilities(self) -> StorageCapabilities:
        """``storage_capabilities()``, built once for this layer: the stack below it never
        changes, so neither does its adapter chain (``capabilities_of`` answers with it)."""
        # An attribute, not functools.cached_property: that writes the instance's
        # __dict__, which makes CPython give every layer of every live stack a dict.
        built = self._capabilities
        if built is None:
            built = self._capabilities = self.storage_capabilities()
        return built

    def storage_capabilities(self) -> StorageCapabilities:
        """What the store below can do, as seen through this layer.

        A layer that keeps items unchanged shares the store's capabilities (a view reads
        its tail through itself); one that transforms them falls back to the generic
        adapter over its own Session methods unless it provides a translating adapter.
        """
        from memstack.backends.capabilities import GenericCapabilities, ViewCapabilities

        if self.transforms_items:
            return GenericCapabilities(self)
        if self.view_only or self.reads_its_own_way or self.writes_its_own_way:
            # Reads and derived writes from above must cross what this layer does.
            return ViewCapabilities(self, capabilities_of(self.inner))
        return capabilities_of(self.inner)

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


def _view_facts(tail: Tail, session_id: str) -> list[Fact]:
    """The ``item_fact`` of each item of a view, as this session's last view kept them
    by content key (``memstack.incremental``): only new items are classified."""
    slot = ("view facts", session_id)
    known = incremental.previous(slot, tail.keys)
    if incremental.MISSING in known:
        items = tail.items
        for index, found in enumerate(known):
            if found is incremental.MISSING:
                known[index] = item_fact(items[index])
    incremental.keep(slot, tail.keys, known, shared=True, weight=fact_weight(known))
    return known


def chain_below(session: Session, *, own: bool = False) -> tuple[list[SessionLayer], Session]:
    """The layers a read of ``session`` passes through, bottom first, and its source.

    A layer that reads its own way is the source for the layers above it; ``own``: the
    read is that layer's own (its ``get_items`` asked the base), so it takes part.
    """
    layers: list[SessionLayer] = []
    current = session
    while isinstance(current, SessionLayer) and (own or not current.reads_its_own_way):
        layers.append(current)
        current, own = current.inner, False
    layers.reverse()
    return layers, current


def _source_reader(
    source: Session, wrapper: RunContextWrapper[Any] | None, layers: Sequence[SessionLayer]
) -> Newest:
    """``n -> the newest n values of source``: a store read raw where its adapter can, a
    layer asked as a caller would; checked to be items (``StoredItemError`` otherwise)."""
    name = type(layers[0]).__name__ if layers else None

    async def newest(n: int, *, whole_up_to: int = 0) -> Tail:
        with store_errors(source):  # named by the layer whose method was called
            if isinstance(source, SessionLayer):
                # Unrepaired, as the layer returns them: the top of this stack repairs the
                # view, and a repair here (an output whose call the cut left out) would
                # make the read look shorter than asked, so taken for the whole history.
                with stored_history():
                    items = await source.get_items(limit=n, **forward_wrapper(source, wrapper))
                tail = Tail.undated(items, complete=len(items) < n)
            else:
                caps = capabilities_of(source)
                if whole_up_to and caps.reads_whole_up_to:
                    tail = await caps.read_newest(n, wrapper=wrapper, whole_up_to=whole_up_to)
                else:
                    tail = await caps.read_newest(n, wrapper=wrapper)
        stored_items(tail.items, layer=name, session_id=source.session_id)
        return tail

    return newest


async def read_view(
    layer: Session, *, want: int | None, wrapper: RunContextWrapper[Any] | None
) -> Tail:
    """``layer``'s view (shared items: read-only): whole (``want=None``), or at least its
    newest ``want`` items. Where no layer needs to find where a view starts, a read of the
    newest items reads about ``want`` rows, whatever the last whole read needed."""
    layers, source = chain_below(layer, own=True)
    newest = _source_reader(source, wrapper, layers)

    async def enough(tail: Tail) -> Tail | None:
        if tail.complete or (want is not None and len(tail.items) >= want):
            return tail
        return None

    if want is None or any(x.view_only for x in layers):
        return await read(layers, source, newest, enough, wrapper)
    first = max(want, 1)
    return await read(layers, source, newest, enough, wrapper, first=first, hinted=False)


async def stored_values(
    session: Session, *, wrapper: RunContextWrapper[Any] | None = None
) -> list[Any]:
    """All that ``session`` shows, oldest first, as copies: what a layer above reads of it.

    For rewrites and maintenance, which name what they replace: never repaired as a
    caller's view is, so nothing a view leaves out is lost.
    """
    return fresh((await read_view(session, want=None, wrapper=wrapper)).items)


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
