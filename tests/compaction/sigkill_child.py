"""Writes turns through a CompactionSession into a SQLite file until it is killed.

Run by ``test_sigkill.py`` as ``python sigkill_child.py DB``: prints ``ready``, then
``acked N`` after each ``add_items`` returns (N turns stored), and ``compacting`` when a
summary is being made, which takes a random few milliseconds so kills land inside it.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from typing import Any

from agents.memory import SQLiteSession

from memstack.backends import capabilities_of
from memstack.compaction import ExtractiveSummarizer, Items, Mask, Summarize, SummaryRequest
from memstack.compaction.records import is_record
from memstack.layers import CompactionSession
from memstack.tokens import TokenCounter

SESSION_ID = "killed"
COUNTER = TokenCounter()


def turn(n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"question {n}"},
        {
            "type": "function_call",
            "call_id": f"c{n}",
            "name": "lookup",
            "arguments": json.dumps({"n": n}),
        },
        {"type": "function_call_output", "call_id": f"c{n}", "output": f"result {n} " * 40},
        {"role": "assistant", "content": f"answer {n}"},
    ]


class SlowSummarizer:
    def __init__(self) -> None:
        self.summarizer = ExtractiveSummarizer(counter=COUNTER)

    async def summarize(self, request: SummaryRequest) -> str:
        print("compacting", flush=True)
        await asyncio.sleep(random.uniform(0.0, 0.02))
        return await self.summarizer.summarize(request)


def open_session(db: str) -> CompactionSession:
    return CompactionSession(
        SQLiteSession(SESSION_ID, db),
        strategy=[Mask(), Summarize(SlowSummarizer(), max_tokens=200)],
        trigger=Items(16, target=6),
    )


async def main(db: str) -> None:
    session = open_session(db)
    stored = [item for item in await session.inner.get_items() if not is_record(item)]
    n = len(stored) // 4
    # One-time costs (the vocabulary, the capability adapters' imports) before the clock.
    COUNTER.count_text("warm up")
    capabilities_of(session.inner)
    print("ready", flush=True)
    while True:
        await session.add_items(turn(n))  # type: ignore[arg-type]
        n += 1
        print(f"acked {n}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
