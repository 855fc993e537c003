"""A failing summariser is not asked again on every write: automatic compaction backs off.

Found by a new-user trial: with an endpoint that never answered, every write past the
trigger waited for the summariser's whole timeout (120 s by default); with a closed port,
every such write paid ~1.4 s.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from agents import SQLiteSession

from memstack import CompactionWarning, SummarizerError
from memstack.compaction import Items, Summarize
from memstack.compaction.summarizer import SummaryRequest
from memstack.layers import CompactionSession
from memstack.layers.compaction import session as compaction_session


class Unreachable:
    """A summariser whose endpoint refuses every call; counts the calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def summarize(self, request: SummaryRequest) -> str:
        self.calls += 1
        raise ConnectionRefusedError("the summariser's endpoint refused the connection")


def turn(n: int) -> list[Any]:
    return [
        {"role": "user", "content": f"question {n} " + "words " * 20},
        {"role": "assistant", "content": f"answer {n} " + "words " * 20},
    ]


async def test_a_failed_compaction_waits_before_the_summariser_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(compaction_session, "clock", lambda: now[0])
    summarizer = Unreachable()

    def stack() -> CompactionSession:  # built per request, as a server does
        return CompactionSession(
            SQLiteSession("s", tmp_path / "chat.db"),
            strategy=Summarize(summarizer, max_tokens=200),
            trigger=Items(6, target=2),
        )

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(6):
            await stack().add_items(turn(n))
        assert summarizer.calls == 1  # the first write past the trigger; the next ones wait
        assert any("next attempt in 30 s" in str(w.message) for w in caught)
        assert all(issubclass(w.category, CompactionWarning) for w in caught)
        now[0] += 31
        await stack().add_items(turn(6))
        assert summarizer.calls == 2  # asked again once the wait is over; now twice as long
        assert any("next attempt in 60 s" in str(w.message) for w in caught)
        now[0] += 31
        await stack().add_items(turn(7))
        assert summarizer.calls == 2
    # Nothing was lost meanwhile: every item is in the view, uncompacted.
    assert len(await stack().get_items()) == 16
    # An explicit compact() is not held back, and says why it failed.
    with pytest.raises(SummarizerError):
        await stack().compact()
    assert summarizer.calls == 3
