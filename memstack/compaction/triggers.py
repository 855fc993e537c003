"""When to compact: the view grew past a limit of tokens, items or user turns.

    >>> from memstack.compaction import Items, Tokens, Turns
    >>> Tokens(60_000)
    Tokens(limit=60000, target=30000)
    >>> Items(200, target=50).target
    50

A trigger fires when the view the model would see exceeds ``limit``; compaction then
keeps at most ``target`` of the newest history verbatim (never splitting a tool call from
its output) and summarises the rest, so the view drops well below the limit and stays
put for a while — a stable prefix keeps the provider's prompt cache warm.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from memstack.errors import ConfigurationError
from memstack.history import cut_points, is_user_message
from memstack.tokens import ItemCounter

__all__ = ["Estimate", "Items", "Tokens", "Trigger", "Turns", "after_write"]

Item = Mapping[str, Any]


@runtime_checkable
class Trigger(Protocol):
    limit: int
    target: int
    unit: ClassVar[str]

    def weights(self, items: Sequence[Item], counter: ItemCounter) -> list[int]:
        """Each item's share of the measure; a view's measure is their sum."""
        ...


@dataclass(frozen=True)
class _Limit:
    limit: int
    target: int | None = None

    unit: ClassVar[str] = ""

    def __post_init__(self) -> None:
        owner = type(self).__name__
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 2:
            raise ConfigurationError(f"limit must be an int >= 2, got {self.limit!r}", layer=owner)
        if self.target is None:
            object.__setattr__(self, "target", self.limit // 2)
        target = self.target
        if isinstance(target, bool) or not isinstance(target, int) or not 1 <= target < self.limit:
            raise ConfigurationError(
                f"target must be an int with 1 <= target < limit ({self.limit}), got {target!r}",
                layer=owner,
            )

    def measure(self, items: Sequence[Item], counter: ItemCounter) -> int:
        return sum(self.weights(items, counter))

    def weights(self, items: Sequence[Item], counter: ItemCounter) -> list[int]:
        raise NotImplementedError


@dataclass(frozen=True)
class Tokens(_Limit):
    """Fires when the view exceeds ``limit`` tokens (memstack.tokens estimates)."""

    unit: ClassVar[str] = "tokens"

    def weights(self, items: Sequence[Item], counter: ItemCounter) -> list[int]:
        return [counter.count_item(item) for item in items]


@dataclass(frozen=True)
class Items(_Limit):
    """Fires when the view holds more than ``limit`` items."""

    unit: ClassVar[str] = "items"

    def weights(self, items: Sequence[Item], counter: ItemCounter) -> list[int]:
        return [1] * len(items)


@dataclass(frozen=True)
class Turns(_Limit):
    """Fires when the view holds more than ``limit`` user turns."""

    unit: ClassVar[str] = "turns"

    def weights(self, items: Sequence[Item], counter: ItemCounter) -> list[int]:
        ok = cut_points(items)
        return [int(ok[i] and is_user_message(item)) for i, item in enumerate(items)]


@dataclass(frozen=True)
class Estimate:
    """A trigger's measure of the view, carried from one full check across later writes.

    A full check reads and measures the whole view; between two, each write only adds
    its own items' weights. Masking and expiry only lower the true measure, so the
    estimate errs towards checking early; writes by other processes are not in it, so a
    full check still runs every ``FULL_CHECK_EVERY`` writes.

        >>> Estimate(900).plus(50).decides(limit=1000)
        True
        >>> Estimate(900).plus(200).decides(limit=1000)
        False
    """

    total: int
    writes: int = 0

    FULL_CHECK_EVERY: ClassVar[int] = 16

    def plus(self, weight: int) -> Estimate:
        return Estimate(self.total + weight, self.writes + 1)

    def decides(self, *, limit: int) -> bool:
        """True when this estimate alone says the trigger does not fire."""
        return self.total <= limit and self.writes < self.FULL_CHECK_EVERY


def after_write(
    estimate: Estimate | None, trigger: Trigger, items: Sequence[Item], counter: ItemCounter
) -> Estimate | None:
    """``estimate`` plus a write of ``items`` when that alone decides; None: check in full.

    Most writes are decided so, with no read: a turn costs one view read (the Runner's),
    not two.
    """
    if estimate is None:
        return None
    carried = estimate.plus(sum(trigger.weights(items, counter)))
    return carried if carried.decides(limit=trigger.limit) else None
