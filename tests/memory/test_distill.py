"""Distillation: rule-based offline, LLM against the fake OpenAI server, debounced runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from agents import Agent, RunConfig, Runner
from agents.memory import SQLiteSession

from memstack.errors import DistillationError
from memstack.memory import MemoryStore
from memstack.memory.distill import (
    PROMPT_VERSION,
    DistillationHooks,
    Distiller,
    LLMExtractor,
    RuleExtractor,
)
from memstack.testing import FakeClock, InMemorySession, ScriptedModel

from ..fake_openai_server import CHAT, FakeOpenAI, Garbage, Status, Text


def test_rule_extractor_finds_names_preferences_requests_and_corrections() -> None:
    items = [
        {"role": "user", "content": "Hi, my name is Ana. I live in Porto and I love hiking."},
        {"role": "assistant", "content": "I prefer cats."},  # the assistant's words: ignored
        {"role": "user", "content": "Please remember that my flight is on Friday."},
        {"role": "user", "content": "No, the meeting is at 10, not 9."},
        {"role": "user", "content": "What's the weather?"},
    ]
    found = RuleExtractor().extract_sync(items)
    assert [(c.text, c.kind, c.source, c.key, c.item) for c in found] == [
        ("The user's name is Ana", "fact", "explicit", "name", 0),
        ("The user lives in Porto", "fact", "explicit", "home", 0),
        ("The user loves hiking", "preference", "explicit", None, 0),
        ("The user's flight is on Friday", "note", "explicit", None, 2),
        ("Correction from the user: the meeting is at 10, not 9", "note", "feedback", None, 3),
    ]


@pytest.mark.parametrize(
    ("said", "stored"),
    [
        ("Remember that I'm vegetarian.", "The user is vegetarian"),
        ("Please remember that my dog is called Rex", "The user's dog is called Rex"),
        ("Don't forget I don't eat pork", "The user doesn't eat pork"),
        ("note that I've moved to Lisbon and I walk to work", "The user has moved to Lisbon"),
        (
            "Actually, I work late on Mondays",
            "Correction from the user: the user works late on Mondays",
        ),
        ("I love my garden", "The user loves the user's garden"),
        ("Remember that Ibiza is where I grew up", "Ibiza is where the user grew up"),
        # A present tense ending in "ed" is not a past one; "and" after "I" is no verb.
        ("Remember that I need a gluten-free menu", "The user needs a gluten-free menu"),
        ("remember that I feed the cat at 7", "The user feeds the cat at 7"),
        ("Remember that I seed the lawn in April", "The user seeds the lawn in April"),
        ("Remember that I agreed to host", "The user agreed to host"),
        ("Remember that I and Ana love Rome", "The user and Ana love Rome"),
        ("remember: I'm left-handed", "The user is left-handed"),
        ("Note: my train leaves at 6", "The user's train leaves at 6"),
        ("Remember: that I'm tall", "The user is tall"),
        # Irregular past tenses stay as they are ("meants" before).
        ("No, I meant my sister", "Correction from the user: the user meant the user's sister"),
        ("Remember that I threw out the old sofa", "The user threw out the old sofa"),
    ],
)
def test_rule_extractor_stores_the_users_words_in_the_third_person(said: str, stored: str) -> None:
    found = RuleExtractor().extract_sync([{"role": "user", "content": said}])
    assert found[0].text == stored


@pytest.mark.parametrize(
    "said",
    ["I wrote a note: buy milk", "I left you a note: call me back", "I remember: we met in Paris"],
)
def test_a_colon_after_a_noun_or_a_subject_is_no_request_to_remember(said: str) -> None:
    """The colon form is a request ("Note: …", "remember: …"); "a note: …" is the user's
    note, "I remember: …" their recollection, neither said to be kept."""
    found = RuleExtractor().extract_sync([{"role": "user", "content": said}])
    assert [c.text for c in found if c.kind == "note"] == []


@pytest.mark.parametrize(
    ("said", "stored"),
    [
        ("Do you remember that song?", []),  # a question about the past, not a request
        ("Did you remember that I'm vegan?", []),
        ("Don't you remember that trip to Rome?", []),
        ("Can you remember that I'm vegan?", ["The user is vegan"]),
        ("Could you please remember that my flat is on floor 3", ["The user's flat is on floor 3"]),
    ],
)
def test_asking_whether_the_assistant_remembers_stores_nothing(
    said: str, stored: list[str]
) -> None:
    found = RuleExtractor().extract_sync([{"role": "user", "content": said}])
    assert [c.text for c in found if c.kind == "note"] == stored


@pytest.mark.parametrize(
    ("said", "stored"),
    [
        ("My favourite colour is blue.", "The user's favourite colour is blue"),
        ("my favorite food is sushi and I cook it", "The user's favorite food is sushi"),
        (
            "My favourite films are the ones I saw as a kid",
            ("The user's favourite films are the ones the user saw as a kid"),
        ),
    ],
)
def test_rule_extractor_keeps_a_favourite_as_a_preference(said: str, stored: str) -> None:
    found = RuleExtractor().extract_sync([{"role": "user", "content": said}])
    assert [(c.text, c.kind, c.source) for c in found][:1] == [(stored, "preference", "explicit")]


@pytest.mark.parametrize(
    "said",
    [
        "Remember that we are going to Rome with my sister.",
        "remember: we and I share my car",
        "Note that my boss and I think we need a break",
        "Actually, we moved because I got a job and my wife likes the sea",
        "My favourite place is where we met, I think",
        "I love how we cook; I live in Porto; call me Bo",
        "No, we said I'd bring my own",
        "I'm allergic to what my mother cooks and I hate that we eat it",
    ],
)
def test_a_memory_the_rules_store_never_speaks_as_the_user(said: str) -> None:
    """ "We" is left as it is (whom it includes is unclear), but "I", "me" and "my" in a
    memory would read, in the model's instructions, as the model speaking."""
    found = RuleExtractor().extract_sync([{"role": "user", "content": said}])
    assert found
    for candidate in found:
        assert not re.search(r"\b(?:I|me|my|mine|myself)\b", candidate.text, re.I), candidate


async def test_llm_extractor_with_structured_output() -> None:
    answer = {
        "memories": [
            {
                "text": "The user is training for a marathon",
                "kind": "fact",
                "source": "explicit",
                "key": "training",
                "confidence": 0.9,
                "item": 0,
            },
            {
                "text": "The user may like running shoes",
                "kind": "preference",
                "source": "inferred",
                "key": None,
                "confidence": 0.4,
                "item": 7,  # out of range: provenance dropped, memory kept
            },
        ]
    }
    with FakeOpenAI() as server:
        server.chat.append(Text(json.dumps(answer)))
        extractor = LLMExtractor(model="gpt-test", client=server.client())
        found = await extractor.extract(
            [{"role": "user", "content": "I'm training for a marathon"}]
        )
        [body] = server.bodies(CHAT)
    assert [(c.text, c.source, c.item) for c in found] == [
        ("The user is training for a marathon", "explicit", 0),
        ("The user may like running shoes", "inferred", None),
    ]
    assert body["response_format"]["type"] == "json_schema"
    assert PROMPT_VERSION in body["messages"][0]["content"]
    assert "[0] user: I'm training for a marathon" in body["messages"][1]["content"]


@pytest.mark.parametrize(
    "behaviour",
    [Text("not json at all"), Text('{"memories": [{"text": "x"}]}'), Status(500), Garbage()],
    ids=["prose", "missing-fields", "http-500", "garbage"],
)
async def test_failed_or_unparsable_extraction_stores_nothing_and_says_so(
    behaviour: object, tmp_path: Path
) -> None:
    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    session = InMemorySession("chat")
    await session.add_items([{"role": "user", "content": "I love tea"}])
    with FakeOpenAI() as server:
        server.chat.append(behaviour)  # type: ignore[arg-type]
        extractor = LLMExtractor(model="gpt-test", client=server.client(max_retries=0))
        with pytest.raises(DistillationError):
            await extractor.extract(await session.get_items())
        server.chat.append(behaviour)  # type: ignore[arg-type]
        report = await Distiller(store, "ana", extractor).after_run(session)
    assert report.error is not None and report.stored == ()
    assert await store.list_memories("ana") == []
    await store.close()


async def test_distiller_is_debounced_and_reads_only_new_items() -> None:
    store = MemoryStore.from_url("sqlite://:memory:")
    clock = FakeClock(0.0)
    distiller = Distiller(store, "ana", debounce_seconds=30, clock=clock)
    session = InMemorySession("chat")
    await session.add_items([{"role": "user", "content": "My name is Ana."}])
    first = await distiller.after_run(session)
    assert len(first.stored) == 1
    await session.add_items([{"role": "user", "content": "I live in Porto."}])
    assert (await distiller.after_run(session)).skipped == "debounced"
    clock.tick(31)
    second = await distiller.after_run(session)
    assert second.items == 1 and len(second.stored) == 1
    assert [m.text for m in await store.list_memories("ana")] == [
        "The user's name is Ana",
        "The user lives in Porto",
    ]
    [porto] = (await store.list_memories("ana"))[1:]
    assert porto.provenance.session_id == "chat" and porto.provenance.item == "1"
    await store.close()


async def test_distillation_hooks_after_a_runner_run(tmp_path: Path) -> None:
    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    session = SQLiteSession("chat", str(tmp_path / "chat.db"))
    hooks = DistillationHooks(Distiller(store, "ana", debounce_seconds=0), session)
    agent = Agent(name="a", model=ScriptedModel(["Nice to meet you, Ana!"]))
    await Runner.run(
        agent,
        "Hello, my name is Ana",
        session=session,
        hooks=hooks,
        run_config=RunConfig(tracing_disabled=True),
    )
    assert [m.text for m in await store.list_memories("ana")] == ["The user's name is Ana"]
    assert hooks.reports[0].error is None
    await store.close()
