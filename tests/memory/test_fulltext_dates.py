"""A memory's valid-from date is searchable: a question naming the day finds it."""

from __future__ import annotations

from datetime import UTC, datetime

from memstack.memory import MemoryStore
from memstack.memory.fulltext import weighted_terms
from memstack.memory.models import Memory

OCT_13 = datetime(2023, 10, 13, 15, 0, tzinfo=UTC).timestamp()
OCT_20 = datetime(2023, 10, 20, 15, 0, tzinfo=UTC).timestamp()


def test_the_date_counts_like_context() -> None:
    memory = Memory(id="m", scope="s", text="Loves sailing", valid_from=OCT_13)
    assert weighted_terms(memory) == {"love": 3, "sail": 3, "13": 1, "octob": 1, "2023": 1}


async def test_a_question_naming_the_day_finds_what_was_said_that_day() -> None:
    store = MemoryStore.from_url("sqlite://:memory:", embedder=None)
    await store.remember("mel", "Melanie: here is the painting I did", valid_from=OCT_13)
    await store.remember("mel", "Melanie: here is the painting we did", valid_from=OCT_20)
    found = await store.search("mel", "What painting did Melanie show on October 13, 2023?")
    assert found[0][0].valid_from == OCT_13
    await store.close()
