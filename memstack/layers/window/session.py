"""A sliding window: the model sees only the newest part of a long history.

    >>> import asyncio
    >>> from memstack.layers import SlidingWindowSession
    >>> from memstack.testing import InMemorySession, sample_items
    >>> store = InMemorySession("s1")
    >>> asyncio.run(store.add_items(sample_items(12)))
    >>> window = SlidingWindowSession(store, max_turns=2)
    >>> [item.get("content") or item["type"] for item in asyncio.run(window.get_items())]
    ['m-4 question', 'function_call', 'function_call_output', 'm-7 answer', \
'm-8 question', 'function_call', 'function_call_output', 'm-11 answer']

Why a layer and not ``get_items(limit=n)``: a count of items cuts tool calls from their
outputs and ignores tokens. A read takes the newest stored items, longer and
longer (``memstack.pipeline``), until ``policy.Tail`` can prove where the view starts,
so a 100,000-item history costs what a short one does; where it starts,
and the caveats of hysteresis and pinned items, are in README ("Sliding window").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Self

from pydantic import Field, model_validator

from memstack.backends.adapters import capabilities_of
from memstack.backends.capabilities import Tail
from memstack.base import SessionLayer
from memstack.errors import CapabilityError
from memstack.history import is_pinned
from memstack.layers.window.policy import Align, Budget, fits_whole
from memstack.layers.window.policy import Tail as WindowTail
from memstack.options import (
    Counter,
    Flag,
    MaybeCount,
    MaybeFraction,
    ModelName,
    Options,
    Size,
    shared,
)
from memstack.pipeline import Need
from memstack.tokens import ItemCounter, TokenCounter, counts, default_counter

if TYPE_CHECKING:
    from agents.memory import Session
    from agents.run_context import RunContextWrapper

__all__ = ["Budget", "SlidingWindowSession"]

# A read asks for at least this many items more than max_items.
_READ_SLACK = 16

Item = Mapping[str, Any]


class WindowOptions(Options, layer="SlidingWindowSession"):
    max_items: MaybeCount = None
    max_turns: MaybeCount = None
    max_tokens: MaybeCount = None
    model: ModelName = None
    counter: Counter = None
    align: Annotated[Align, Field(description="'turn' or 'unit'")] = "turn"
    low_watermark: MaybeFraction = None
    pinned_lookback: Size = 100
    trim: Flag = False

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.max_items is None and self.max_turns is None and self.max_tokens is None:
            raise ValueError(
                "set at least one of max_items, max_turns, max_tokens (each an int >= 1)"
            )
        if self.max_tokens is None and (self.model is not None or self.counter is not None):
            raise ValueError("model and counter only apply with max_tokens")
        if self.model is not None and self.counter is not None:
            raise ValueError("pass model or counter, not both")
        return self


class SlidingWindowSession(SessionLayer):
    """Shows the model the newest part of the history that fits the budgets."""

    layer_name = "window"
    view_only = True

    def __init__(
        self,
        inner: Session,
        *,
        max_items: int | None = None,
        max_turns: int | None = None,
        max_tokens: int | None = None,
        model: str | None = None,
        counter: ItemCounter | None = None,
        align: Align = "turn",
        low_watermark: float | None = None,
        pinned_lookback: int = 100,
        trim: bool = False,
    ) -> None:
        super().__init__(inner)
        options = WindowOptions.check(
            max_items=max_items,
            max_turns=max_turns,
            max_tokens=max_tokens,
            model=model,
            counter=counter,
            align=align,
            low_watermark=low_watermark,
            pinned_lookback=pinned_lookback,
            trim=trim,
        )
        if options.trim and not capabilities_of(inner).atomic:
            raise CapabilityError(
                f"trim=True needs a store that deletes atomically; "
                f"{type(inner).__name__} cannot (leave trim off: the window is then a view)",
                layer=type(self).__name__,
            )
        self.budget = shared(Budget(options.max_items, options.max_turns, options.max_tokens))
        self.low_watermark = options.low_watermark
        self.low = (
            None if self.low_watermark is None else shared(self.budget.scaled(self.low_watermark))
        )
        self.align: Align = options.align
        self.pinned_lookback = options.pinned_lookback
        self.trim = options.trim
        self.counter: ItemCounter | None = None
        if options.max_tokens is not None:
            self.counter = counter if counter is not None else default_counter(model)
        self.min_read = max(self.pinned_lookback, (self.budget.items or 0) + _READ_SLACK)

    async def shape(self, below: Tail, wrapper: RunContextWrapper[Any] | None) -> Tail | Need:
        """The window over ``below``; ``Need.MORE`` until ``below`` proves where it starts."""
        items = below.items
        if not below.complete and not self.trim and len(items) < self.pinned_lookback:
            return Need.MORE  # a pinned item within the lookback may lie beyond this tail
        count = self._count(below)
        if below.complete and fits_whole(len(items), count, self.budget, self.low):
            # All of it is the window (``WindowTail.plan`` would start at 0): no cut to find.
            return Tail(
                list(items),
                list(below.written_at),
                list(below.keys),
                True,
                below.reach,
                list(below.sealed),
            )
        tail = WindowTail(
            items,
            complete=below.complete,
            align=self.align,
            pinned_lookback=None if self.trim else self.pinned_lookback,
            counter=self.counter,
            keys=below.keys,
            session_id=self.session_id,
            count=count,
        )
        start = tail.plan(self.budget, self.low, anchored=not self.trim)
        if start is None or (self.trim and not below.complete):
            return Need.MORE
        if self.trim and start > 0:
            await self._trim(items, start, tail.task(start, len(items)))
        return below.picked(tail.shown(start), complete=True, reach=below.reach_from(tail.reach))

    def _count(self, below: Tail) -> Callable[[int], int] | None:
        if self.counter is None:
            return None
        return counts(
            self.counter, below.items, below.keys, session_id=self.session_id, sealed=below.sealed
        )

    def filter_model_input(self, items: Sequence[Item]) -> list[Item]:
        """This window over a list of items (a model call's input inside one run).

        The same rule as ``get_items``, applied to ``items`` as a complete history; used
        by ``memstack.input_filter``.
        """
        tail = WindowTail(
            items,
            complete=True,
            align=self.align,
            pinned_lookback=self.pinned_lookback,
            counter=self.counter,
        )
        start = tail.plan(self.budget, self.low, anchored=True)
        return list(tail.view(start or 0))

    async def _trim(self, items: Sequence[Item], start: int, task: int | None) -> None:
        dropped = [dict(item) for item in items[:start]]
        kept = [item for i, item in enumerate(dropped) if is_pinned(item) or i == task]
        if len(kept) < len(dropped):
            # With expect=, a concurrent change since our read makes this a no-op.
            await capabilities_of(self.inner).replace_oldest(start, kept, expect=dropped)

    def repr_options(self) -> dict[str, object]:
        options: dict[str, object] = {
            name: value
            for name, value in (
                ("max_items", self.budget.items),
                ("max_turns", self.budget.turns),
                ("max_tokens", self.budget.tokens),
            )
            if value is not None
        }
        options["align"] = self.align
        if self.low_watermark is not None:
            options["low_watermark"] = self.low_watermark
        if self.trim:
            options["trim"] = True
        if isinstance(self.counter, TokenCounter):
            options["encoding"] = self.counter.encoding_name
        return options
