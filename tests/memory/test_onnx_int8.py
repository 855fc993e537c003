"""The default model's MatMuls run on its int8 weights: the same vectors, less CPU."""

from __future__ import annotations

import math
from collections import Counter

import pytest

import memstack.memory.minilm as minilm
import memstack.memory.onnx_int8 as onnx_int8
from memstack.memory import OnnxMiniLMEmbedder
from memstack.memory.onnx_int8 import graph_ops, int8_matmuls

TEXTS = [
    "what language?",
    "Prefers answers in French",
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "When did Melanie paint a sunrise?",
    "Zoë — ok?",
    "x " * 300,
]


def _pinned_model() -> bytes:
    return minilm._packaged_model().read_bytes()


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_every_weight_matmul_of_the_pinned_model_is_rewritten() -> None:
    original = _pinned_model()
    rewritten = int8_matmuls(original)
    assert rewritten is not None
    before, after = Counter(graph_ops(original)), Counter(graph_ops(rewritten))
    # 36 MatMuls read int8 weights (6 layers x 6); the 12 attention products stay.
    assert after["MatMulNBits"] == 36
    assert after["MatMul"] == before["MatMul"] - 36 == 12
    # Their weights' Cast and Mul are gone; the embeddings' (read by Gather) stay.
    assert after["Cast"] == before["Cast"] - 36
    assert int8_matmuls(rewritten) is None  # nothing left to rewrite


def test_bytes_that_are_no_model_are_left_alone() -> None:
    assert int8_matmuls(b"") is None
    assert int8_matmuls(b"\xff\xff\xff") is None


def test_vectors_match_the_file_run_as_written() -> None:
    """Stored vectors embedded one way are searched with queries embedded the other: the
    int8 codes the index keeps already differ from float32 by ~0.003 in cosine."""
    fast, exact = OnnxMiniLMEmbedder(), OnnxMiniLMEmbedder(int8_matmul=False)
    for a, b in zip(fast.embed(TEXTS), exact.embed(TEXTS), strict=True):
        assert _cosine(a, b) > 0.999
    assert fast._load()[0] is not exact._load()[0]


def test_a_query_alone_embeds_as_in_a_batch() -> None:
    """Memories are embedded in padded batches, queries one at a time."""
    embedder = OnnxMiniLMEmbedder()
    batch = embedder.embed(TEXTS)
    for text, in_batch in zip(TEXTS, batch, strict=True):
        [alone] = embedder.embed([text])
        assert max(abs(x - y) for x, y in zip(alone, in_batch, strict=True)) < 1e-5


def test_a_runtime_that_refuses_the_rewritten_graph_runs_the_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(onnx_int8, "int8_matmuls", lambda data: b"not a model")
    monkeypatch.setattr(minilm, "_SHARED", {})
    [vector] = OnnxMiniLMEmbedder().embed(["what language?"])
    [exact] = OnnxMiniLMEmbedder(int8_matmul=False).embed(["what language?"])
    assert vector == exact
