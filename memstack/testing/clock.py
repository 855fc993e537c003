"""A clock tests can move by hand: ``clock = FakeClock(); clock.tick(3600)``."""

from __future__ import annotations


class FakeClock:
    """Callable like ``time.time``; returns seconds that only ``tick``/``set`` change."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a FakeClock only moves forward; use set() to go back")
        self.now += seconds
        return self.now

    def set(self, now: float) -> None:
        self.now = now

    def __repr__(self) -> str:
        return f"FakeClock(now={self.now})"
