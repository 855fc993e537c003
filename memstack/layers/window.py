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

``get_items()`` returns the newest suffix of the stored history that fits every budget
set (``max_items``, ``max_turns``, ``max_tokens``), after the pinned items (system and
developer messages, compaction items) that precede it. The suffix starts only where the
history may be cut (``memstack.history``), so no tool output loses its call and no
reasoning item loses what follows it; with ``align="turn"`` it starts at a user message.
When the newest user turn alone exceeds a budget (an agent loop: one task, then many
tool steps), the view keeps that user message (the task), then the newest units of the
turn that fit: only a single unit larger than the budget can make a view exceed it.
The store is not changed unless ``trim=True``.

Reads are bounded: the layer reads the newest items with ``inner.get_items(limit=k)``,
doubling ``k`` until the start is found, so a 100,000-item history costs what a short
one does. The Session protocol cannot read the oldest items cheaply, so pinned items are
looked for among the newest ``pinned_lookback`` stored items only; keep standing
instructions in the agent's ``instructions`` (or set ``trim=True``, which keeps the store
short and reads all of it) if the history grows past that.

Hysteresis (``low_watermark``): a window that slides every turn changes the prompt prefix
every turn, so the provider's prompt cache never hits. With a low watermark the start
stays put until a budget is exceeded, then jumps so that the view falls to that fraction
of each budget; the prefix then holds for several turns, at the price of sending less
history than would fit just after a jump. The start is a pure function of the stored
items, so processes sharing a session agree without coordinating: the layer replays the
rule from the latest *anchor*, a cut point chosen by a hash of its item's content with a
probability that makes anchors about four budgets apart. Each new anchor restarts the
replay, which can move the start once more than strictly needed.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from agents.memory.session_settings import resolve_session_limit

from memstack.backends.adapters import capabilities_of
from memstack.base import SessionLayer
from memstack.errors import CapabilityError, ConfigurationError
from memstack.history import (
    cut_points,
    is_output,
    is_pinned,
    is_user_message,
    pair_key,
    stored_items,
)
from memstack.tokens import ItemCounter, TokenCounter, item_digest

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import Session
    from agents.run_context import RunContextWrapper

__all__ = ["Budget", "SlidingWindowSession"]

Item = Mapping[str, Any]
Align = Literal["turn", "unit"]

# Anchors (hysteresis restart points) are about this many budgets apart.
_ANCHOR_SPACING = 4
# Anchors are looked for this many budgets back, and at most this many items back;
# without one there, the replay starts at the oldest candidate within that horizon.
_ANCHOR_HORIZON = 32
_MAX_ANCHOR_LOOKBACK = 1 << 14
# The first read: at least this many items, and this many more than max_items.
_MIN_READ = 32
_READ_SLACK = 16


@dataclass(frozen=True)
class Budget:
    """Limits on a view; None means unlimited."""

    items: int | None = None
    turns: int | None = None
    tokens: int | None = None

    def scaled(self, fraction: float) -> Budget:
        def scale(limit: int | None) -> int | None:
            return None if limit is None else int(limit * fraction)

        return Budget(scale(self.items), scale(self.turns), scale(self.tokens))


def _first_safe_start(items: Sequence[Item]) -> int:
    """First index where cuts computed on this tail alone are cuts of the whole history.

    An output whose call lies before the tail, and the item right after an unseen one
    (perhaps a reasoning item), must not start a window.
    """
    calls: set[tuple[str, str]] = set()
    first = 1
    for index, item in enumerate(items):
        key = pair_key(item)
        if key is None:
            continue
        if not is_output(item):
            calls.add(key)
        elif key not in calls:
            first = index + 1
    return first


class _Suffix:
    """Weights of ``items[s:]``, computed lazily from the newest item backwards."""

    def __init__(self, weigh: Callable[[int], int], n: int) -> None:
        self._weigh = weigh
        self._n = n
        self._sums = [0]

    def __call__(self, start: int) -> int:
        need = self._n - start
        while len(self._sums) <= need:
            self._sums.append(self._sums[-1] + self._weigh(self._n - len(self._sums)))
        return self._sums[need]


class _Tail:
    """The newest ``n`` stored items, analysed for where a window over them may start.

    ``plan`` returns None when the start cannot be proven from this tail alone (an
    earlier start might fit, or the newest user turn starts before it): read more.
    """

    def __init__(
        self,
        items: Sequence[Item],
        *,
        complete: bool,
        align: Align,
        pinned_lookback: int | None,
        counter: ItemCounter | None,
    ) -> None:
        self.items = items
        self.n = n = len(items)
        self.complete = complete
        ok = cut_points(items)
        first = 0 if complete else _first_safe_start(items)
        self.cuts = [p for p in range(first, n + 1) if ok[p]]
        self.units = [s for s in self.cuts if s < n]
        self.users = [s for s in self.units if is_user_message(items[s])]
        if align == "unit" or (complete and not self.users):
            self.candidates = self.units
        else:
            self.candidates = ([0] if complete and self.users[:1] != [0] else []) + self.users
        self.allowed = frozenset(self.candidates)
        lookback_from = 0 if pinned_lookback is None else max(0, n - pinned_lookback)
        self.pinned = [i for i in range(lookback_from, n) if is_pinned(items[i])]
        self.plain = [0]
        for item in items:
            self.plain.append(self.plain[-1] + (not is_pinned(item)))
        # Lowest index a plan looked at: how much of the tail the answer needed.
        self.reach = n
        self.counter = counter
        self._weights: dict[int, int] = {}
        if counter is not None:
            self.tokens = _Suffix(lambda i: counter.count_item(items[i]), n)
            self.pinned_tokens = [0]
            for i in self.pinned:
                self.pinned_tokens.append(self.pinned_tokens[-1] + counter.count_item(items[i]))

    # -- measures ---------------------------------------------------------------------
    def turns(self, start: int, end: int) -> int:
        """User turns in ``items[start:end]``; a leading partial turn counts as one."""
        first_user = bisect_left(self.users, start)
        count = bisect_left(self.users, end) - first_user
        next_user = self.users[first_user] if first_user < len(self.users) else self.n
        if next_user != start and self.plain[min(end, next_user)] > self.plain[start]:
            count += 1
        return count

    def task(self, start: int, end: int) -> int | None:
        """The newest user message of ``items[:end]`` when a view starting at ``start``
        skips it: the task of an agent loop, kept ahead of the loop's newest units."""
        index = bisect_left(self.users, end) - 1
        if index < 0 or self.users[index] >= start:
            return None
        return self.users[index]

    def fits(self, start: int, end: int, budget: Budget) -> bool:
        """Whether pinned items before ``start``, the task a view starting inside the
        newest turn keeps, and ``items[start:end]`` fit ``budget``."""
        pinned = bisect_left(self.pinned, start)
        task = self.task(start, end)
        extra = 0 if task is None else 1
        if budget.items is not None and pinned + extra + end - start > budget.items:
            return False
        if budget.turns is not None and max(extra, self.turns(start, end)) > budget.turns:
            return False
        if budget.tokens is not None:
            used = self.pinned_tokens[pinned] + self.tokens(start) - self.tokens(end)
            if task is not None:
                used += self.weight(task)
            if used > budget.tokens:
                return False
        return True

    # -- starts -----------------------------------------------------------------------
    def newest_turn(self, end: int) -> int | None:
        """Start of the newest user turn in ``items[:end]`` (the last unit if none)."""
        index = bisect_left(self.users, end) - 1
        if index >= 0:
            return self.users[index]
        if not self.complete:
            return None
        index = bisect_left(self.units, end) - 1
        return self.units[index] if index >= 0 else None

    def earliest_fit(self, end: int, budget: Budget) -> int | None:
        """Earliest start whose view of ``items[:end]`` fits.

        When even the newest turn does not fit (an agent loop: one task, many tool
        steps), the start moves inside it: the task message is kept, then the newest
        units that fit, and at least the newest unit.
        """
        newest = self.newest_turn(end)
        if newest is None:
            return None
        candidates = self.candidates[: bisect_right(self.candidates, newest)]
        best = None
        for start in reversed(candidates):
            self.reach = min(self.reach, start)
            if not self.fits(start, end, budget):
                break
            best = start
        if best is None or not candidates:
            return self.inside_turn(newest, end, budget)
        if best == candidates[0] and not self.complete:
            return None
        return best

    def inside_turn(self, newest: int, end: int, budget: Budget) -> int:
        """Where a view starts inside the newest turn ``items[newest:end]``."""
        if newest >= end or not is_user_message(self.items[newest]):
            return newest
        inner = self.units[bisect_right(self.units, newest) : bisect_left(self.units, end)]
        if not inner:
            return newest
        best = inner[-1]  # the newest unit, even when it alone exceeds the budget
        for start in reversed(inner[:-1]):
            if not self.fits(start, end, budget):
                break
            best = start
        return best

    def allowed_at(self, start: int, end: int) -> bool:
        """Whether a view of ``items[:end]`` may start at ``start``."""
        newest = self.newest_turn(end)
        if start in self.allowed or start == newest:
            return True
        # Inside the newest turn, at a unit boundary: an agent loop's window.
        return (
            newest is not None
            and newest < start < end
            and is_user_message(self.items[newest])
            and self.is_unit_start(start)
        )

    def is_unit_start(self, index: int) -> bool:
        position = bisect_left(self.units, index)
        return position < len(self.units) and self.units[position] == index

    def plan(self, budget: Budget, low: Budget | None, *, anchored: bool = True) -> int | None:
        """Where the window starts; with ``low``, the hysteresis replay from an anchor.

        Without ``anchored`` the replay starts at the oldest item read (a trimmed store,
        read whole).
        """
        if self.n == 0:
            return 0
        if low is None:
            return self.earliest_fit(self.n, budget)
        found = self.anchor(budget) if anchored else (self.candidates[0], False)
        if found is None:
            return None
        origin, is_anchor = found
        start = self.earliest_fit(origin, low) if is_anchor else origin
        for end in self.cuts[bisect_right(self.cuts, origin) :]:
            if start is None:
                return None
            # A start forced by a newest turn (or inside it) that has since been followed
            # by a user message is no longer allowed.
            if not self.allowed_at(start, end) or not self.fits(start, end, budget):
                start = self.earliest_fit(end, low)
        return start

    def anchor(self, budget: Budget) -> tuple[int, bool] | None:
        """Where the hysteresis replay begins, and whether that is an anchor.

        The newest anchor up to the newest turn within the horizon; without one, the
        oldest candidate within it (or of the whole history). The horizon is measured
        from the newest item, so the answer does not depend on how much was read.
        """
        newest = self.newest_turn(self.n)
        if newest is None:
            return None
        candidates = self.candidates[: bisect_right(self.candidates, newest)]
        for index in range(len(candidates) - 1, 0, -1):
            previous, start = candidates[index - 1], candidates[index]
            self.reach = min(self.reach, previous)
            if (
                self.n - previous > _MAX_ANCHOR_LOOKBACK
                or self.share(previous, self.n, budget) > _ANCHOR_HORIZON
            ):
                return start, False
            # Chance proportional to the weight of the span that ends here, so anchors
            # are about _ANCHOR_SPACING budgets apart whatever the budget's unit.
            draw = int.from_bytes(item_digest(self.items[start])[:8], "big") / 2.0**64
            if draw < self.share(previous, start, budget) / _ANCHOR_SPACING:
                return start, True
        return (candidates[0], False) if self.complete else None

    def share(self, start: int, end: int, budget: Budget) -> float:
        """``items[start:end]`` as a fraction of the budget (the largest over its limits)."""
        share = 0.0
        if budget.items is not None:
            share = max(share, (end - start) / budget.items)
        if budget.turns is not None:
            share = max(share, self.turns(start, end) / budget.turns)
        if budget.tokens is not None:
            share = max(share, (self.tokens(start) - self.tokens(end)) / budget.tokens)
        return share

    def view(self, start: int) -> list[Item]:
        kept = [i for i in self.pinned if i < start]
        task = self.task(start, self.n)
        if task is not None:
            kept.append(task)  # after every pinned item before it, before any after it
            kept.sort()
        return [*(self.items[i] for i in kept), *self.items[start:]]

    def weight(self, index: int) -> int:
        """Tokens of one item (the task), counted once."""
        if index not in self._weights:
            assert self.counter is not None
            self._weights[index] = self.counter.count_item(self.items[index])
        return self._weights[index]


def _is_int(value: object, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _check_limit(name: str, value: object) -> None:
    if value is not None and not _is_int(value, 1):
        raise ConfigurationError(
            f"{name} must be None or an int >= 1, not {value!r}", layer="SlidingWindowSession"
        )


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
        layer = type(self).__name__
        for name, value in (
            ("max_items", max_items),
            ("max_turns", max_turns),
            ("max_tokens", max_tokens),
        ):
            _check_limit(name, value)
        if max_items is None and max_turns is None and max_tokens is None:
            raise ConfigurationError(
                "set at least one of max_items, max_turns, max_tokens (each an int >= 1)",
                layer=layer,
            )
        if max_tokens is None and (model is not None or counter is not None):
            raise ConfigurationError("model and counter only apply with max_tokens", layer=layer)
        if model is not None and counter is not None:
            raise ConfigurationError("pass model or counter, not both", layer=layer)
        if counter is not None and not callable(getattr(counter, "count_item", None)):
            raise ConfigurationError("counter must have a count_item(item) method", layer=layer)
        if align not in ("turn", "unit"):
            raise ConfigurationError(f"align must be 'turn' or 'unit', not {align!r}", layer=layer)
        if low_watermark is not None and (
            isinstance(low_watermark, bool)
            or not isinstance(low_watermark, int | float)
            or not 0 < low_watermark < 1
        ):
            raise ConfigurationError(
                f"low_watermark must be None or a number with 0 < x < 1, not {low_watermark!r}",
                layer=layer,
            )
        if not _is_int(pinned_lookback, 0):
            raise ConfigurationError(
                f"pinned_lookback must be an int >= 0, not {pinned_lookback!r}", layer=layer
            )
        if not isinstance(trim, bool):
            raise ConfigurationError(f"trim must be True or False, not {trim!r}", layer=layer)
        if trim and not capabilities_of(inner).atomic:
            raise CapabilityError(
                f"trim=True needs a store that deletes atomically; "
                f"{type(inner).__name__} cannot (leave trim off: the window is then a view)",
                layer=layer,
            )
        self.budget = Budget(max_items, max_turns, max_tokens)
        self.low = None if low_watermark is None else self.budget.scaled(low_watermark)
        self.low_watermark = low_watermark
        self.align: Align = align
        self.pinned_lookback = pinned_lookback
        self.trim = trim
        self.counter: ItemCounter | None = None
        if max_tokens is not None:
            self.counter = counter if counter is not None else TokenCounter(model)
        # How many items the last window needed; only sizes the first read.
        self._read_hint = 0

    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        """The window; with ``limit``, its last ``limit`` items (the SDK's meaning)."""
        view = await self._window(wrapper)
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is None:
            return view
        return view[-limit:] if limit > 0 else []

    async def _window(self, wrapper: RunContextWrapper[Any] | None) -> list[TResponseInputItem]:
        floor = max(self.pinned_lookback, (self.budget.items or 0) + _READ_SLACK, _MIN_READ)
        size = max(floor, self._read_hint + self._read_hint // 4)
        while True:
            items = stored_items(
                await self.inner.get_items(limit=size, **self.forward(wrapper)),
                layer=type(self).__name__,
                session_id=self.session_id,
            )
            complete = len(items) < size
            tail = _Tail(
                items,
                complete=complete,
                align=self.align,
                pinned_lookback=None if self.trim else self.pinned_lookback,
                counter=self.counter,
            )
            start = tail.plan(self.budget, self.low, anchored=not self.trim)
            if start is not None and (complete or not self.trim):
                break
            size *= 2
        self._read_hint = len(items) - tail.reach
        if self.trim and start > 0:
            await self._trim(items, start, tail.task(start, len(items)))
        return list(tail.view(start))  # type: ignore[arg-type]

    def filter_model_input(self, items: Sequence[Item]) -> list[Item]:
        """This window over a list of items (a model call's input inside one run).

        The same rule as ``get_items``, applied to ``items`` as a complete history; used
        by ``memstack.input_filter``.
        """
        tail = _Tail(
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
