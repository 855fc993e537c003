"""Semantic recall by default: the int8 ONNX MiniLM installed with memstack, no torch."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import memstack.memory.minilm as minilm
from memstack.errors import ConfigurationError
from memstack.memory import MemoryStore, OnnxMiniLMEmbedder
from memstack.memory.minilm import THREADS


async def test_the_readme_example_recalls_with_no_embedder_given() -> None:
    store = MemoryStore.from_url("sqlite://:memory:")
    await store.remember("user-42", "Prefers answers in French", kind="preference")
    found = await store.recall("user-42", "what language?", max_tokens=500)
    await store.close()
    assert [m.text for m in found] == ["Prefers answers in French"]


async def test_embedder_none_is_full_text_only() -> None:
    store = MemoryStore.from_url("sqlite://:memory:", embedder=None)
    await store.remember("user-42", "Prefers answers in French", kind="preference")
    assert store.semantic is None
    assert not await store.recall("user-42", "what language?")  # no shared word
    await store.close()


def test_a_fresh_process_recalls_without_torch(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from memstack.memory import MemoryStore

        async def main():
            store = MemoryStore.from_url("sqlite:///{tmp_path / "m.db"}")
            await store.remember("u", "Prefers answers in French")
            found = await store.recall("u", "what language?")
            await store.close()
            print([m.text for m in found], "torch" in sys.modules)

        asyncio.run(main())
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['Prefers answers in French'] False"


def test_a_model_file_that_is_not_the_pinned_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forged = tmp_path / "model.onnx"
    forged.write_bytes(b"not the model")
    monkeypatch.setattr(minilm, "_packaged_model", lambda: forged)
    with pytest.raises(ConfigurationError, match="sha256 differs"):
        OnnxMiniLMEmbedder().embed(["hello"])


def test_vectors_are_unit_length_and_match_meaning() -> None:
    embedder = OnnxMiniLMEmbedder()
    french, language, tax = embedder.embed(
        ["Prefers answers in French", "what language?", "Tax return due on the 15th"]
    )
    assert len(french) == embedder.dim == 384
    assert abs(sum(x * x for x in french) - 1.0) < 1e-4
    cosine = sum(a * b for a, b in zip(french, language, strict=True))
    unrelated = sum(a * b for a, b in zip(tax, language, strict=True))
    assert cosine > unrelated + 0.1


@pytest.mark.parametrize(("field", "value"), [("threads", 0), ("batch_size", True)])
def test_options_are_checked(field: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=field):
        OnnxMiniLMEmbedder(**{field: value})  # type: ignore[arg-type]


async def test_a_far_memory_is_not_injected_just_because_it_is_nearest() -> None:
    store = MemoryStore.from_url("sqlite://:memory:")
    await store.remember("ana", "Ana's passport number ends in 4471")
    await store.remember("ana", "Prefers window seats on flights")
    assert not await store.recall("ana", "hello there")
    assert [m.text for m in await store.recall("ana", "flight seat")] == [
        "Prefers window seats on flights"
    ]
    await store.close()


def test_embedders_share_the_processs_model_so_a_store_per_request_loads_nothing() -> None:
    """A server opens a memory store per request: each must not load its own model (it held
    about 5 MB and took 0.3 s: `memstack bench server`'s personal-assistant row grew by
    1.6 GB over 320 requests)."""
    first, second = OnnxMiniLMEmbedder(), OnnxMiniLMEmbedder()
    assert first.embed(["hello"]) == second.embed(["hello"])
    assert first._load()[0] is second._load()[0]  # one onnxruntime session
    assert OnnxMiniLMEmbedder(threads=3)._load()[0] is not first._load()[0]


def test_two_threads_embed_as_one_does() -> None:
    """Vectors stored by a one-thread process are searched with queries embedded on two
    (the default where there are two cores, ``THREADS``): they must be the same."""
    texts = ["what language?", "Prefers answers in French", "x " * 300, "Zoë — ok?"] * 3
    one, two = OnnxMiniLMEmbedder(threads=1), OnnxMiniLMEmbedder(threads=2)
    assert OnnxMiniLMEmbedder().threads == THREADS == min(2, os.cpu_count() or 1)
    for a, b in zip(one.embed(texts), two.embed(texts), strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-6
    for text in texts[:4]:  # a query alone, as recall embeds it
        [a], [b] = one.embed([text]), two.embed([text])
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-6
