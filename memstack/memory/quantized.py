"""Stored vectors kept small for search: int8 codes to score, sign bits to shortlist.

    >>> import numpy as np
    >>> from memstack.memory.quantized import Block, nearest
    >>> block = Block.build(("a", "b"), np.array([[1.0, 0.0, 0.2, 0.0], [0.0, 1.0, 0.0, 0.0]]))
    >>> [(memory_id, round(cosine, 2)) for memory_id, cosine in
    ...  nearest([block], np.array([0.9, 0.1, 0.0, 0.0]), 1)]
    [('a', 0.97)]

A scope of 100,000 MiniLM vectors is 154 MB as float32, and a brute-force product reads
all of it for every query: ~26 ms on one core, memory-bound, whatever the arithmetic. Here
each unit vector is kept as int8 codes with one scale (a quarter of the bytes; cosines
within ~0.003 of float32's) and as its sign bits (a thirty-second). A query's Hamming
distance to every sign vector (popcount of 64-bit words, 4.8 MB at 100,000) picks a
shortlist, and only the shortlist is scored on the codes. A scope no larger than the
shortlist is scored whole, so small scopes rank as before but for the codes' rounding.

Blocks are values: growing or forgetting makes a new block, so a block handed to a
reader never changes under it (``memstack.memory.semantic`` keeps them in the process
cache).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["SHORTLIST", "Block", "best_rows", "centroid", "nearest", "shortlist_rows"]

# Candidates scored on the codes per query: at least this many, and at least
# ``_PER_HIT`` times the hits asked for. Sign bits rank MiniLM neighbours coarsely; see
# benchmarks/README.md ("Recall latency with semantic recall on") for the overlap with
# float32 search this keeps.
SHORTLIST = 4_000
_PER_HIT = 40
# Shortlisted rows turned to float and scored at a time (512 x 384 floats: 768 KB).
_SCORE_ROWS = 512
# Bytes a memory id costs in a tuple beside its codes (pointer and str header), roughly.
_ID_BYTES = 60

if hasattr(np, "bitwise_count"):  # numpy >= 2.0

    def _popcount(words: Any) -> Any:
        return np.bitwise_count(words)

else:  # pragma: no cover - numpy 1.26
    _BYTE_COUNTS = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)

    def _popcount(words: Any) -> Any:
        return _BYTE_COUNTS[words.view(np.uint8)].reshape(*words.shape, 8).sum(axis=-1)


def _signs(units: Any) -> Any:
    """Sign bits as 64-bit words, word-major: ``(words, rows)``, each word's row contiguous."""
    n, dim = units.shape
    width = -(-dim // 64) * 64
    positive = np.zeros((n, width), dtype=bool)
    positive[:, :dim] = units > 0
    words = np.packbits(positive, axis=1).view(np.uint64)
    return np.ascontiguousarray(words.T)


@dataclass(frozen=True, slots=True, eq=False)
class Block:
    """Some of a scope's vectors: ids, int8 codes with per-row scales, and sign words."""

    ids: tuple[str, ...]
    codes: Any  # (rows, dim) int8
    scales: Any  # (rows,) float32: a code times its row's scale is the unit vector
    signs: Any  # (words, rows) uint64

    @classmethod
    def build(cls, ids: Sequence[str], vectors: Any) -> Block:
        """Codes of ``vectors`` (one row per id; any scale: each is made unit length)."""
        array = np.asarray(vectors, dtype=np.float32)
        if array.ndim != 2 or array.shape[0] != len(ids):
            raise ValueError(f"{len(ids)} ids for vectors of shape {array.shape}")
        norms = np.linalg.norm(array, axis=1, keepdims=True)
        units = array / np.where(norms > 0, norms, 1.0)
        peak = np.abs(units).max(axis=1) if units.size else np.zeros(len(ids), np.float32)
        scales = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
        codes = np.rint(units / scales[:, None]).astype(np.int8)
        return cls(tuple(ids), codes, scales, _signs(units))

    @property
    def dim(self) -> int:
        return int(self.codes.shape[1])

    @property
    def nbytes(self) -> int:
        """What the block holds, for the cache's budget."""
        arrays = self.codes.nbytes + self.scales.nbytes + self.signs.nbytes
        return int(arrays) + len(self.ids) * _ID_BYTES + sum(map(len, self.ids))

    def __len__(self) -> int:
        return len(self.ids)

    def extended(self, ids: Sequence[str], vectors: Any) -> Block:
        """This block with ``vectors`` appended (a new block)."""
        more = Block.build(ids, vectors)
        if len(self) == 0:
            return more
        if more.dim != self.dim:
            raise ValueError(f"vectors of {more.dim} dimensions added to a block of {self.dim}")
        return Block(
            self.ids + more.ids,
            np.concatenate((self.codes, more.codes)),
            np.concatenate((self.scales, more.scales)),
            np.concatenate((self.signs, more.signs), axis=1),
        )

    def without(self, ids: Collection[str]) -> Block:
        """This block less ``ids`` (itself when it holds none of them)."""
        keep = [i for i, memory_id in enumerate(self.ids) if memory_id not in ids]
        if len(keep) == len(self.ids):
            return self
        rows = np.asarray(keep, dtype=np.intp)
        return Block(
            tuple(self.ids[i] for i in keep),
            self.codes[rows],
            self.scales[rows],
            np.ascontiguousarray(self.signs[:, rows]),
        )

    def units(self, rows: Any) -> Any:
        """The (dequantised) unit vectors of ``rows``."""
        return self.codes[rows].astype(np.float32) * self.scales[rows, None]


def nearest(
    blocks: Sequence[Block], query: Any, k: int, *, shortlist: int = SHORTLIST
) -> list[tuple[str, float]]:
    """The ``k`` ids of ``blocks`` most similar to ``query``, best first, with their cosine."""
    blocks = [block for block in blocks if len(block)]
    if k < 1 or not blocks:
        return []
    vector = np.asarray(query, dtype=np.float32).ravel()
    norm = float(np.linalg.norm(vector))
    if norm == 0.0 or vector.shape[0] != blocks[0].dim:
        return []
    vector = vector / norm
    starts = np.concatenate(([0], np.cumsum([len(block) for block in blocks])))
    total = int(starts[-1])
    wanted = max(shortlist, _PER_HIT * k)
    if total <= wanted:  # small enough to score whole
        chosen = np.arange(total)
    else:
        [query_signs] = _signs(vector[None, :]).T
        # One XOR and popcount over each block's (words, rows) array: a loop per word
        # costs more in numpy calls than the arithmetic (~6 ms a search at 100,000).
        distance = np.concatenate(
            [
                _popcount(block.signs ^ query_signs[:, None]).sum(axis=0, dtype=np.uint16)
                for block in blocks
            ]
        )
        chosen = shortlist_rows(distance, wanted)
    # ``chosen`` is in row order: each block's rows are one slice of it, gathered into one
    # array and scored in one product (a product per block cost ~0.4 ms more a search).
    bounds = np.searchsorted(chosen, starts)
    codes = np.empty((len(chosen), blocks[0].dim), dtype=np.int8)
    scales = np.empty(len(chosen), dtype=np.float32)
    for b, block in enumerate(blocks):
        low, high = bounds[b], bounds[b + 1]
        if low < high:
            rows = chosen[low:high] - starts[b]
            # ``take`` copies the same rows as ``codes[rows]`` at about half the cost.
            np.take(block.codes, rows, axis=0, out=codes[low:high])
            np.take(block.scales, rows, out=scales[low:high])
    # einsum, not ``@``: a product through BLAS wakes its thread pool, and on shared cores
    # those threads spin (6,000 rows: 60 ms against 0.3 ms at load ~14). In chunks of
    # ``_SCORE_ROWS``: each chunk's float copy stays in the core's cache (4,000 rows at
    # once: 6 MB written and read back, ~0.4 ms more); each row's sum is its own product's
    # (to a rounding unit: numpy may sum a chunk's copy in another order than the whole's).
    scores = np.empty(len(chosen), dtype=np.float32)
    for low in range(0, len(chosen), _SCORE_ROWS):
        high = low + _SCORE_ROWS
        scores[low:high] = np.einsum("ij,j->i", codes[low:high].astype(np.float32), vector)
    scores *= scales
    # Equal scores (copies of one text) in row order: the same hits in every process.
    top = best_rows(scores, k)
    owners = np.searchsorted(starts, chosen[top], side="right") - 1
    return [
        (blocks[b].ids[row - starts[b]], float(scores[i]))
        for i, b, row in zip(top.tolist(), owners.tolist(), chosen[top].tolist(), strict=True)
    ]


def shortlist_rows(distance: Any, wanted: int) -> Any:
    """The rows of the ``wanted`` smallest ``distance`` values (small non-negative ints), in
    row order; of those equal at the cut, the first rows.

    A count of each distance finds the cut in one pass: ``argpartition`` over 100,000 rows
    cost ~0.9 ms a search, and chose among the rows tied at the cut as it happened to.
    """
    if wanted >= len(distance):
        return np.arange(len(distance))
    below = np.cumsum(np.bincount(distance))
    cut = int(np.searchsorted(below, wanted))  # the distance the ``wanted``-th row has
    inside = distance < cut
    taken = wanted - int(np.count_nonzero(inside))
    inside[np.flatnonzero(distance == cut)[:taken]] = True
    return np.flatnonzero(inside)


def best_rows(scores: Any, k: int) -> Any:
    """The indices of the ``k`` highest ``scores``, best first, equal scores in index order:
    ``np.argsort(-scores, kind="stable")[:k]``, sorting only those ``k``.

    Sorting all of a shortlist's 4,000 scores cost ~0.35 ms a search; a partition finds the
    ``k``-th score, and of the scores equal to it the first indices are kept.
    """
    n = len(scores)
    if k >= n:
        return np.argsort(-scores, kind="stable")
    cut = np.partition(scores, n - k)[n - k]  # the k-th highest
    above = np.flatnonzero(scores > cut)
    tied = np.flatnonzero(scores == cut)[: k - len(above)]
    rows = np.sort(np.concatenate((above, tied)))
    return rows[np.argsort(-scores[rows], kind="stable")]


def centroid(blocks: Sequence[Block], ids: Collection[str]) -> Any:
    """The mean unit vector of those of ``ids`` in ``blocks``, or None."""
    found = []
    for block in blocks:
        # Sorted, so the float sum runs in one order whatever order ``ids`` iterate in.
        rows = sorted(block.ids.index(i) for i in ids if i in block.ids)
        if rows:
            found.append(block.units(np.asarray(rows, dtype=np.intp)))
    if not found:
        return None
    return np.concatenate(found).mean(axis=0)
