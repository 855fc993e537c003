"""Write times passed between layers of one call, without layers knowing each other.

    >>> from memstack.context import collecting_write_times, report_write_times
    >>> with collecting_write_times() as times:
    ...     report_write_times([10.0, 12.5])      # what a retention layer does on read
    >>> times
    [10.0, 12.5]

A retention layer (TTL) knows when each item was written; a layer above it that derives
data (a compaction summary) must not let that data outlive its sources. Layers in between
(encryption) cannot carry the stamp in plaintext. Context variables cross them untouched:

- on read, a layer above opens ``collecting_write_times()`` around ``inner.get_items()``;
  the retention layer reports one write time per item it returns (``None`` if unknown);
- on write, a layer above wraps ``inner.add_items()`` in ``written_at(t)``; the retention
  layer stamps those items with ``t`` instead of its clock, so they expire with their
  oldest source.

Layers that map items one to one (encryption, pass-through) keep the alignment as is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = [
    "collecting_write_times",
    "current_write_time",
    "report_write_times",
    "written_at",
]

_write_time: ContextVar[float | None] = ContextVar("memstack_write_time", default=None)
_collector: ContextVar[list[float | None] | None] = ContextVar("memstack_write_times", default=None)


@contextmanager
def written_at(timestamp: float) -> Iterator[None]:
    """Items written inside this block count as written at ``timestamp``."""
    token = _write_time.set(timestamp)
    try:
        yield
    finally:
        _write_time.reset(token)


def current_write_time() -> float | None:
    """The write time a layer above asked for, or None (use the clock)."""
    return _write_time.get()


@contextmanager
def collecting_write_times() -> Iterator[list[float | None]]:
    """Collect the write times reported for the items read inside this block."""
    times: list[float | None] = []
    token = _collector.set(times)
    try:
        yield times
    finally:
        _collector.reset(token)


def report_write_times(times: Sequence[float | None]) -> None:
    """Called by a retention layer with one write time per item it returns."""
    collector = _collector.get()
    if collector is not None:
        # The layer nearest the collector reports last, so its alignment wins.
        collector[:] = list(times)
