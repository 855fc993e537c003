"""Where a window over the newest stored items starts: the window's pure policy.

    >>> from memstack.layers.window.policy import Budget, Tail
    >>> from memstack.testing import sample_items
    >>> items = sample_items(12)
    >>> tail = Tail(items, complete=True, align="turn", pinned_lookback=100, counter=None)
    >>> start = tail.plan(Budget(turns=2), None)
    >>> [item.get("content") or item["type"] for item in tail.view(start)][:2]
    ['m-4 question', 'function_call']

No I/O: ``SlidingWindowSession`` reads a tail of the store and asks ``Tail.plan``; None
means "read a longer tail". Cuts come from ``memstack.history`` (no tool output without
its call, no reasoning item without what follows). With a low watermark (hysteresis) the
start is replayed from an *anchor*, a cut chosen by a hash of its item's content, so every
process derives the same start from the same stored items.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Literal

from memstack.history import cut_points, is_output, is_pinned, is_user_message, pair_key
from memstack.tokens import ItemCounter, counts, item_digest

__all__ = ["Align", "Budget", "Tail", "fits_whole"]

Item = Mapping[str, Any]
Align = Literal["turn", "unit"]

# Anchors (hysteresis restart points) are about this many budgets apart.
_ANCHOR_SPACING = 4
# Anchors are looked for this many budgets back, and at most this many items back;
# without one there, the replay starts at the oldest candidate within that horizon.
_ANCHOR_HORIZON = 32
_MAX_ANCHOR_LOOKBACK = 1 << 14


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


def fits_whole(
    n: int, count: Callable[[int], int] | None, budget: Budget, low: Budget | None
) -> bool:
    """Whether a whole history of ``n`` items is its own window, told without its shape.

    ``Tail.plan``'s first answer (start at 0), for budgets that do not count turns: the
    pinned items and the task a start at 0 keeps are inside the view, so only the items
    and tokens of all of it matter. False: ask ``Tail.plan``.
    """
    limit = low or budget
    if limit.turns is not None or (low is not None and n > _MAX_ANCHOR_LOOKBACK):
        return False
    if limit.items is not None and n > limit.items:
        return False
    if limit.tokens is not None:
        if count is None:
            return False
        total = 0
        for index in range(n - 1, -1, -1):  # newest first, as ``Tail.plan`` counts them
            total += count(index)
            if total > limit.tokens:  # a long history need not be counted to its start
                return False
    return True


class Suffix:
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

    def capped(self, start: int, cap: int) -> int:
        """``self(start)``, or a partial sum over ``cap`` as soon as one passes it: weights
        are never negative, so the whole is over ``cap`` too, and older items go uncounted.
        """
        need = self._n - start
        while len(self._sums) <= need and self._sums[-1] <= cap:
            self._sums.append(self._sums[-1] + self._weigh(self._n - len(self._sums)))
        return self._sums[min(need, len(self._sums) - 1)]


class Tail:
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
        keys: Sequence[bytes | None] = (),
        session_id: str | None = None,
        count: Callable[[int], int] | None = None,
    ) -> None:
        self.items = items
        self.keys = keys if len(keys) == len(items) else [None] * len(items)
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
        pinned = [is_pinned(item) for item in items]
        self.pinned = [i for i in range(lookback_from, n) if pinned[i]]
        self.plain = list(accumulate((not flag for flag in pinned), initial=0))
        # Lowest index a plan looked at: how much of the tail the answer needed.
        self.reach = n
        if count is None and counter is not None:  # ``count``: the read's own, if it made one
            count = counts(counter, items, self.keys, session_id=session_id)
        self.count = count
        if self.count is not None:
            self.tokens = Suffix(self.count, n)
            self.pinned_tokens = [0]
            for i in self.pinned:
                self.pinned_tokens.append(self.pinned_tokens[-1] + self.count(i))

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
            # What ``items[start:end]`` may weigh; counted newest first, no further than
            # it takes to pass that (a long history is not counted to its start).
            spare = budget.tokens - self.pinned_tokens[pinned] + self.tokens(end)
            if task is not None:
                spare -= self.weight(task)
            if self.tokens.capped(start, spare) > spare:
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
        if (
            self.complete
            and (low is None or self.n <= _MAX_ANCHOR_LOOKBACK)
            and self.fits(0, self.n, low or budget)
        ):
            # The whole history fits what a start would be chosen against (the low budget
            # after a replay): every fit search ends at 0, and so does every replay that
            # may begin at 0 (past the anchor lookback it begins within it, as a reader
            # of a partial tail does).
            self.reach = 0
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
            digest = item_digest(self.items[start], self.keys[start])
            draw = int.from_bytes(digest[:8], "big") / 2.0**64
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

    def shown(self, start: int) -> list[int]:
        """Indices of the view starting at ``start``: pinned items and the task before it."""
        kept = [i for i in self.pinned if i < start]
        task = self.task(start, self.n)
        if task is not None:
            kept.append(task)  # after every pinned item before it, before any after it
            kept.sort()
        return [*kept, *range(start, self.n)]

    def view(self, start: int) -> list[Item]:
        return [self.items[i] for i in self.shown(start)]

    def weight(self, index: int) -> int:
        """Tokens of one item (the task)."""
        assert self.count is not None
        return self.count(index)
