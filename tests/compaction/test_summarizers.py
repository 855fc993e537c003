"""Summarisers and strategies through a real ``openai`` client and a local fake server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from agents.models.interface import Model

from memstack import ConfigurationError, SummarizerError
from memstack.compaction import (
    ExtractiveSummarizer,
    ModelSummarizer,
    OpenAIChatSummarizer,
    ResponsesCompact,
    Summarize,
)
from memstack.compaction.render import render_transcript
from memstack.history import is_pinned
from memstack.testing import ScriptedModel
from memstack.tokens import TokenCounter

from ..fake_openai_server import CHAT, COMPACT, FakeOpenAI, Garbage, Hang, Json, Status, Text

COVERED: list[dict[str, Any]] = [
    {"role": "user", "content": "Book me a flight to Oslo"},
    {
        "type": "function_call",
        "call_id": "c1",
        "name": "search_flights",
        "arguments": '{"to": "OSL", "date": "2024-05-20"}',
    },
    {"type": "function_call_output", "call_id": "c1", "output": "SK123 09:00, DY456 13:15"},
    {"role": "assistant", "content": "SK123 or DY456?"},
]


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as running:
        yield running


# A timeout that only stands for "should not hang": never the reason a test passes or fails.
GENEROUS = 60.0


def chat_strategy(server: FakeOpenAI, **options: Any) -> Summarize:
    summarizer = OpenAIChatSummarizer(model="any-model", client=server.client())
    return Summarize(summarizer, **{"timeout": GENEROUS, **options})


def test_render_keeps_calls_as_calls_and_outputs_as_outputs() -> None:
    text = render_transcript(
        [*COVERED, {"type": "function_call_output", "call_id": "c1", "output": "x" * 50}],
        max_output_chars=30,
    )
    lines = text.splitlines()
    assert lines[0] == "USER: Book me a flight to Oslo"
    assert lines[1] == ('CALL search_flights({"to": "OSL", "date": "2024-05-20"}) [c1]')
    assert lines[2] == "OUTPUT search_flights [c1]: SK123 09:00, DY456 13:15"
    assert lines[3] == "ASSISTANT: SK123 or DY456?"
    assert "[20 characters omitted]" in text
    assert sum(line.startswith("USER:") for line in lines) == 1


async def test_chat_summary_is_one_pinned_item_made_from_a_faithful_prompt(
    server: FakeOpenAI,
) -> None:
    server.chat.append(Text("## Goal\nFly to Oslo on 2024-05-20."))
    previous = [
        {
            "role": "developer",
            "content": "Summary of the earlier conversation (older "
            "messages were compacted):\n\nThe user is Mia.",
        }
    ]
    [summary] = await chat_strategy(server, max_tokens=321).compact(previous, COVERED)
    assert summary == {
        "role": "developer",
        "content": "Summary of the earlier conversation (older messages were compacted):\n\n"
        "## Goal\nFly to Oslo on 2024-05-20.",
    }
    assert is_pinned(summary)
    [body] = server.bodies(CHAT)
    assert body["model"] == "any-model" and body["max_tokens"] == 321
    system, prompt = body["messages"]
    assert system["role"] == "system" and "## Progress" in system["content"]
    assert prompt["role"] == "user"
    assert "PREVIOUS SUMMARY:\nThe user is Mia." in prompt["content"]
    assert render_transcript(COVERED) in prompt["content"]


async def test_a_summary_may_quote_errors(server: FakeOpenAI) -> None:
    server.chat.append(Text("→ Error: seat taken on HAT229\n- ASSISTANT: picked another seat"))
    [summary] = await chat_strategy(server).compact([], COVERED)
    assert "seat taken" in summary["content"]


async def test_token_parameter_for_reasoning_models(server: FakeOpenAI) -> None:
    summarizer = OpenAIChatSummarizer(
        model="o4-mini",
        client=server.client(),
        token_param="max_completion_tokens",
        temperature=None,
    )
    await Summarize(summarizer, max_tokens=50).compact([], COVERED)
    [body] = server.bodies(CHAT)
    assert body["max_completion_tokens"] == 50
    assert "max_tokens" not in body and "temperature" not in body


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        (Status(500), "InternalServerError"),
        (Status(429, "Rate limit reached"), "RateLimitError"),
        (Garbage(), "failed"),
        (Text(""), "empty summary"),
        (Text("   \n"), "empty summary"),
        (Text("Error: upstream model overloaded"), "error message instead of a summary"),
        (Json({"object": "chat.completion"}), "no choices"),
        (Json({"choices": [{"index": 0, "message": {"role": "assistant"}}]}), "no text"),
    ],
)
async def test_every_chat_failure_is_a_summarizer_error(
    server: FakeOpenAI, behaviour: Any, message: str
) -> None:
    server.chat.append(behaviour)
    # The timeout only stands for "does not hang": generous, so it never decides the error.
    with pytest.raises(SummarizerError, match=message):
        await chat_strategy(server, timeout=GENEROUS).compact([], COVERED)


async def test_a_chat_answer_that_never_comes_times_out(server: FakeOpenAI) -> None:
    # Here the timeout is the behaviour: the answer waits far longer than it allows.
    server.chat.append(Hang(60))
    with pytest.raises(SummarizerError, match="timed out after 1s"):
        await chat_strategy(server, timeout=1.0).compact([], COVERED)


async def test_client_retries_are_the_clients_business(server: FakeOpenAI) -> None:
    server.chat.extend([Status(500), Status(503)])
    summarizer = OpenAIChatSummarizer(model="m", client=server.client(max_retries=2))
    [summary] = await Summarize(summarizer).compact([], COVERED)
    assert "1 tool calls so far" in summary["content"]
    assert len(server.bodies(CHAT)) == 3


async def test_openai_summarizer_reaches_any_base_url(server: FakeOpenAI) -> None:
    summarizer = OpenAIChatSummarizer(
        model="gemini-2.5-flash", base_url=server.url, api_key="k", max_retries=0
    )
    assert "base_url='http://127.0.0.1" in repr(summarizer) and "'k'" not in repr(summarizer)
    [summary] = await Summarize(summarizer).compact([], COVERED)
    assert summary["role"] == "developer"


async def test_responses_compact_sends_previous_and_covered_items(server: FakeOpenAI) -> None:
    strategy = ResponsesCompact(model="gpt-4.1", client=server.client(), timeout=GENEROUS)
    previous = [{"type": "compaction", "id": "cmp_0", "encrypted_content": "older"}]
    items = await strategy.compact(previous, COVERED)
    [body] = server.bodies(COMPACT)
    assert body == {"model": "gpt-4.1", "input": [*previous, *COVERED]}
    user, compaction = items
    assert user == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Book me a flight to Oslo"}],
    }
    assert compaction["type"] == "compaction" and compaction["encrypted_content"]
    assert set(compaction) == {"type", "id", "encrypted_content"}
    assert is_pinned(compaction)


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        (Status(500), "InternalServerError"),
        (Garbage(), "failed"),
        (Text([]), "no output items"),
        (Text([{"type": "message", "role": "user", "content": "hi"}]), "no single compaction"),
        (Text([{"type": "compaction", "id": "x", "encrypted_content": ""}]), "without content"),
    ],
)
async def test_every_compact_failure_is_a_summarizer_error(
    server: FakeOpenAI, behaviour: Any, message: str
) -> None:
    server.compact.append(behaviour)
    strategy = ResponsesCompact(model="gpt-4.1", client=server.client(), timeout=GENEROUS)
    with pytest.raises(SummarizerError, match=message):
        await strategy.compact([], COVERED)


async def test_a_compact_answer_that_never_comes_times_out(server: FakeOpenAI) -> None:
    server.compact.append(Hang(60))
    strategy = ResponsesCompact(model="gpt-4.1", client=server.client(), timeout=1.0)
    with pytest.raises(SummarizerError, match="timed out"):
        await strategy.compact([], COVERED)


async def test_sdk_model_summarizer() -> None:
    model = ScriptedModel(["## Goal\nOslo."])
    [summary] = await Summarize(ModelSummarizer(model), max_tokens=100).compact([], COVERED)
    assert summary["content"].endswith("## Goal\nOslo.")
    [sent] = model.inputs
    assert sent[0]["role"] == "user" and render_transcript(COVERED) in sent[0]["content"]


async def test_sdk_model_failure_is_a_summarizer_error() -> None:
    class Broken(ScriptedModel):
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("model endpoint unreachable")

    with pytest.raises(SummarizerError, match="unreachable") as caught:
        await Summarize(ModelSummarizer(Broken([]))).compact([], COVERED)
    assert isinstance(caught.value.__cause__, ConnectionError)
    with pytest.raises(SummarizerError, match="ran out of replies"):
        await Summarize(ModelSummarizer(ScriptedModel([]))).compact([], COVERED)


async def test_extractive_summary_is_deterministic_and_capped() -> None:
    counter = TokenCounter()
    strategy = Summarize(ExtractiveSummarizer(counter=counter), max_tokens=60)
    many = [
        dict(item, call_id=f"c{n}") if "call_id" in item else item
        for n in range(30)
        for item in COVERED
    ]
    first = await strategy.compact([], many)
    assert first == await strategy.compact([], many)
    text = first[0]["content"].split("\n\n", 1)[1]
    assert counter.count_item({"content": text}) <= 60
    assert text.splitlines()[-1] == "- ASSISTANT: SK123 or DY456?"  # newest lines survive
    # The previous summary is carried (its oldest lines go first when over the cap).
    again = await Summarize(ExtractiveSummarizer(), max_tokens=500).compact(
        first, [{"role": "user", "content": "and back?"}]
    )
    assert again[0]["content"].endswith("- USER: and back?")
    assert "\n- ASSISTANT: SK123 or DY456?\n- USER: and back?" in again[0]["content"]


async def test_extractive_names_line_keeps_what_the_clipped_lines_lost() -> None:
    listing = "x = 1\n" * 40 + "src/pkg/loader.py:120: def read_config(path):"
    covered = [
        {"role": "user", "content": "fix the loader"},
        {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": '{"c": "ls"}'},
        {"type": "function_call_output", "call_id": "c1", "output": listing},
    ]
    plain = await Summarize(ExtractiveSummarizer(), max_tokens=500).compact([], covered)
    assert "read_config" not in plain[0]["content"]  # past the clipped output line
    named = await Summarize(ExtractiveSummarizer(names=60), max_tokens=500).compact([], covered)
    assert named[0]["content"].endswith("- NAMES: src/pkg/loader.py 120 read_config")
    tight = await Summarize(ExtractiveSummarizer(names=20), max_tokens=500).compact([], covered)
    assert tight[0]["content"].endswith("- NAMES: src/pkg/loader.py")


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Summarize("not a summarizer"), "summarizer"),  # type: ignore[arg-type]
        (lambda: Summarize(ExtractiveSummarizer(), max_tokens=0), "max_tokens"),
        (lambda: Summarize(ExtractiveSummarizer(), timeout=-1), "timeout"),
        (lambda: Summarize(ExtractiveSummarizer(), role="user"), "role"),  # type: ignore[arg-type]
        (lambda: Summarize(ExtractiveSummarizer(), max_output_chars=0), "max_output_chars"),
        (lambda: OpenAIChatSummarizer(model=""), "model"),
        (lambda: OpenAIChatSummarizer(model="m", api_key="k", token_param="n"), "token_param"),  # type: ignore[arg-type]
        (lambda: ExtractiveSummarizer(output_chars=1), "output_chars"),
        (lambda: ExtractiveSummarizer(names=-1), "names"),
        (lambda: ResponsesCompact(model="gpt-4.1", client=object(), timeout=0), "timeout"),  # type: ignore[arg-type]
        (lambda: ModelSummarizer(object()), "agents Model"),  # type: ignore[arg-type]
    ],
)
def test_options_are_validated(make: Any, field: str) -> None:
    with pytest.raises(ConfigurationError, match=field):
        make()


def test_model_summarizer_takes_any_sdk_model() -> None:
    assert isinstance(ScriptedModel([]), Model)
    assert repr(ModelSummarizer(ScriptedModel([]))) == "ModelSummarizer(ScriptedModel)"
