"""Every shared transcript replayed through CompactionSession: the view stays API-valid and
within the trigger, and the summariser is shown every covered tool call as it was made."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from memstack import CompactionSession
from memstack.compaction import (
    ExtractiveSummarizer,
    Mask,
    OpenAIChatSummarizer,
    Summarize,
    SummaryRequest,
    Tokens,
)
from memstack.compaction.strategies import SUMMARY_HEADER
from memstack.history import history_problems, is_user_message, split_turns, split_units
from memstack.testing import InMemorySession
from memstack.tokens import TokenCounter

from ..conftest import shared_data
from ..fake_openai_server import CHAT, FakeOpenAI

COUNTER = TokenCounter()

# Per file: how it is replayed and compacted. Airline conversations are chats (one write
# per user turn); coding runs are one long turn (one write per agent step). The budgets
# are tight, so that most long conversations need summaries.
SETUPS: dict[str, dict[str, Any]] = {
    "airline_tau": {
        "trigger": Tokens(4000, target=1200),
        "mask": Mask(keep_last_turns=1),
        "summary_tokens": 300,
        "writes": split_turns,
        "sample": 1,
        "compacted": 30,  # conversations that needed a summary (35 of 182)
    },
    "swe_coding": {
        "trigger": Tokens(12000, target=6000),
        "mask": Mask(keep_last_turns=0, keep_last_outputs=3),
        "summary_tokens": 1000,
        "writes": split_units,
        "sample": 3,  # every third run: each replays ~150 writes
        "compacted": 20,  # (23 of 29)
    },
}


def conversations(name: str) -> list[dict[str, Any]]:
    with shared_data(f"{name}.jsonl").open() as lines:
        return [json.loads(line) for line in lines]


class Recording:
    """The extractive summariser, keeping every request it was given."""

    def __init__(self) -> None:
        self.summarizer = ExtractiveSummarizer(counter=COUNTER)
        self.requests: list[SummaryRequest] = []

    async def summarize(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        return await self.summarizer.summarize(request)


def summary_end(view: list[dict[str, Any]]) -> int:
    """Index just after the summary item, 0 when the view has none."""
    for index, item in enumerate(view):
        if item.get("role") == "developer" and str(item.get("content")).startswith(SUMMARY_HEADER):
            return index + 1
    return 0


async def replay(conversation: dict[str, Any], setup: dict[str, Any], summarizer: Any) -> None:
    items, mask, trigger = conversation["items"], setup["mask"], setup["trigger"]
    session = CompactionSession(
        InMemorySession(conversation["id"]),
        strategy=[mask, Summarize(summarizer, max_tokens=setup["summary_tokens"])],
        trigger=trigger,
        keep_last_turns=1,
        counter=COUNTER,
    )
    for span in setup["writes"](items):
        await session.add_items(items[span.start : span.stop])
        view = await session.get_items()
        assert history_problems(view) == [], (conversation["id"], span)
        assert COUNTER.count_items(view) <= trigger.limit, (conversation["id"], span)
        # What follows the summary is exactly the newest history, as the mask shows it.
        tail = view[summary_end(view) :]
        assert tail == mask.apply(items[span.stop - len(tail) : span.stop])
    # Non-destructive: the store still holds every item.
    stored = [i for i in await session.inner.get_items() if i.get("type") != "memstack.compaction"]
    assert stored == items


def check_faithful(items: list[dict[str, Any]], transcripts: list[str]) -> int:
    """Every covered call appears once, exactly as made; tool outputs never as USER lines."""
    text = "\n".join(transcripts)
    lines = text.splitlines()
    covered = 0
    for item in items:
        if item.get("type") != "function_call":
            continue
        line = f"CALL {item['name']}({item['arguments']}) [{item['call_id']}]"
        if line in text:
            covered += 1
            assert text.count(line) == 1, line
            assert f"\nOUTPUT {item['name']} [{item['call_id']}]: " in text
    users = [i for i in items if is_user_message(i)]
    assert sum(line.startswith("USER: ") for line in lines) <= len(users)
    return covered


@pytest.mark.parametrize("name", list(SETUPS))
async def test_every_conversation_replays_valid_within_budget_and_faithful(name: str) -> None:
    setup = SETUPS[name]
    compacted = calls_covered = 0
    for conversation in conversations(name)[:: setup["sample"]]:
        summarizer = Recording()
        await replay(conversation, setup, summarizer)
        compacted += bool(summarizer.requests)
        calls_covered += check_faithful(
            conversation["items"], [r.transcript for r in summarizer.requests]
        )
    assert compacted >= setup["compacted"] and calls_covered >= 100, (compacted, calls_covered)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as running:
        yield running


@pytest.mark.parametrize("name", list(SETUPS))
async def test_sampled_conversations_through_an_openai_compatible_endpoint(
    name: str, server: FakeOpenAI
) -> None:
    """The same replay with the summariser reached over HTTP by the real openai client."""
    conversation = max(conversations(name)[:40], key=lambda c: len(c["items"]))
    summarizer = OpenAIChatSummarizer(model="summarizer", client=server.client())
    await replay(conversation, SETUPS[name], summarizer)
    prompts = [body["messages"][-1]["content"] for body in server.bodies(CHAT)]
    assert prompts, "the trigger never fired"
    assert check_faithful(conversation["items"], prompts) > 0
    assert all(body["max_tokens"] == SETUPS[name]["summary_tokens"] for body in server.bodies(CHAT))
