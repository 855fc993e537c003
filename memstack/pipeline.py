"""The read path of a stack: one growth loop, the store read once per step.

    >>> import asyncio
    >>> from memstack import LayerSpec, build_stack
    >>> from memstack.base import read_view
    >>> from memstack.testing import InMemorySession, sample_items
    >>> stack = build_stack(InMemorySession("s1"), [LayerSpec("window", {"max_turns": 1})])
    >>> asyncio.run(stack.add_items(sample_items(8)))
    >>> tail = asyncio.run(read_view(stack, want=None, wrapper=None))
    >>> [item.get("role", item.get("type")) for item in tail.items], tail.complete
    (['user', 'function_call', 'function_call_output', 'assistant'], True)

A read takes the newest rows of the store (the *source*) and hands them up through the
layers, bottom to top; each layer's ``shape`` turns the tail it gets into its own view of
it (live items, opened envelopes, a summary and what follows it, a window), or says it
needs a longer tail, and the loop reads again, four times longer. The store is read once
per step, whatever the number of layers, and how long the last read had to be is the
next one's first guess (kept per session in the process cache, so a stack built per
request starts where the last one ended). ``memstack.base`` finds the layers and the
source (a layer whose class reads its own way, overriding ``get_items``, is a source for
the layers above it); this module is the loop alone.
"""

from __future__ import annotations

import copy
import enum
import marshal
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from agents.memory import Session

import memstack.cache as cache
from memstack.backends.capabilities import Tail

if TYPE_CHECKING:
    from agents.run_context import RunContextWrapper

__all__ = ["Need", "Shaping", "fresh", "read"]

T = TypeVar("T")

_FIRST_READ = 128  # rows a read asks for at least, with nothing to go by
_GROWTH = 4  # a tail that does not decide is read again this many times longer
_SLACK = 16  # rows a hinted read adds for what other writers appended since


class Need(enum.Enum):
    """What a layer's ``shape`` returns instead of a tail when this one cannot do."""

    MORE = "more"  # a longer tail: the view starts before this one
    AGAIN = "again"  # the same tail read again: the layer changed the store (adoption)


Shaped = Tail | Need


# Values a copy may share with the original: nothing can change them in place.
_IMMUTABLE = frozenset({str, int, float, bool, type(None)})


def fresh(items: Sequence[Any]) -> list[Any]:
    """Copies of ``items`` for a caller: what a read returns is the caller's to change.

    Each item a new dict; its strings and numbers shared (immutable), its lists and dicts
    copied whole by ``marshal`` (version 2: no shared references, so no two copies alias,
    whatever the originals shared). Most values of an item are strings: this is about
    2.5 times faster than one marshal round trip of the whole list.
    """
    copies: list[Any] = []
    try:
        for item in items:
            if type(item) is not dict:  # a subclass, or not an item: copied as it is
                raise ValueError
            copied = item.copy()
            for key, value in item.items():
                if type(value) not in _IMMUTABLE:
                    copied[key] = marshal.loads(marshal.dumps(value, 2))
            copies.append(copied)
    except ValueError:  # a value marshal cannot write (a layer of your own made it)
        return copy.deepcopy(list(items))
    return copies


class Newest(Protocol):
    """How the loop reads its source (``memstack.base``: the store's ``read_newest``)."""

    def __call__(self, n: int, *, whole_up_to: int = 0) -> Awaitable[Tail]: ...


class Shaping(Protocol):
    """What the loop needs of a layer (``memstack.base.SessionLayer``)."""

    min_read: int
    view_only: ClassVar[bool]

    async def shape(self, below: Tail, wrapper: RunContextWrapper[Any] | None) -> Tail | Need: ...


async def read(
    layers: Sequence[Shaping],
    source: Session,
    newest: Newest,
    decide: Callable[[Tail], Awaitable[T | Need | None]],
    wrapper: RunContextWrapper[Any] | None,
    *,
    first: int = _FIRST_READ,
    hinted: bool = True,
    reach_of: Callable[[T, Tail], int] | None = None,
) -> T:
    """Read ``source`` through ``layers`` (bottom first) until ``decide`` says it is enough.

    ``newest(n)`` reads the source's newest ``n`` values; the first read of a hinted read
    with no hint yet asks ``newest(n, whole_up_to=m)``: all of them where the store holds
    at most ``m`` and can tell in the same statement. ``decide`` gets the top layer's
    tail and returns its answer, None for "longer", or ``Need.AGAIN`` after it changed the
    store (the same read again). ``hinted``: start from how many rows the last such read
    of this session needed (``Tail.reach``), and remember it for the next. ``reach_of``:
    how many stored rows the answer depended on, where fewer than the tail's (an answer
    that checks an old row once need not read back to it again).
    """
    hint_key = ("hint", type(source).__name__, source.session_id, *(type(x) for x in layers))
    hint = cache.get(hint_key) if hinted else cache.MISSING
    size = max([first, *(layer.min_read for layer in layers)])
    # With nothing to go by, the first read takes a small session whole (one statement
    # where the store can), as ``_longer`` would after reading ``size`` rows and counting;
    # only up to ``_GROWTH`` times ``size``: a stack that needs only the newest rows (a
    # window) then reads at most that many times more than it would have.
    whole_up_to = size * _GROWTH if hinted and hint is cache.MISSING else 0
    if hint is not cache.MISSING:
        size = max(size, hint)
    total: int | None = None  # rows the store holds, once asked
    while True:
        stored = await (newest(size, whole_up_to=whole_up_to) if whole_up_to else newest(size))
        whole_up_to = 0
        tail: Shaped = stored
        for layer in layers:
            assert isinstance(tail, Tail)
            tail = await layer.shape(tail, wrapper)
            if isinstance(tail, Need):
                break
        if tail is Need.AGAIN:
            continue
        if isinstance(tail, Tail):
            answer = await decide(tail)
            if answer is Need.AGAIN:
                continue
            if answer is not None and not isinstance(answer, Need):
                if hinted:
                    reach = tail.reach if reach_of is None else reach_of(answer, tail)
                    needed = reach + reach // 4 + _SLACK
                    if needed != hint:
                        cache.put(hint_key, needed, weight=64)
                return answer
        if stored.complete:
            raise AssertionError(
                f"a layer of {[type(x).__name__ for x in layers]} asked for more than the "
                "whole history"
            )
        size, total = await _longer(source, size, total)


async def _longer(source: Session, size: int, total: int | None) -> tuple[int, int | None]:
    """The next read's size, always longer than ``size``: four times longer; or all the
    rows at once when the store counts them cheaply and holds at most sixteen times
    ``size``. The count is asked once per read, and again when a read of every row it
    counted was not the whole history: writers appended since, and the old count would
    ask for the same rows forever."""
    from memstack.backends.adapters import capabilities_of

    if total is None or 0 <= total < size:
        caps = capabilities_of(source)
        total = await caps.count() if caps.counts_cheaply else -1
    if size <= total <= size * _GROWTH * _GROWTH:
        return total + 1, total
    return size * _GROWTH, total
