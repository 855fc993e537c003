"""Quantised vector blocks: int8 codes rank as float32 does, sign bits keep the neighbours."""

from __future__ import annotations

import numpy as np
import pytest

from memstack.memory.quantized import Block, best_rows, centroid, nearest, shortlist_rows


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _clustered(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """Vectors in a few dozen topics, as sentence embeddings are (not uniform noise)."""
    rng = np.random.default_rng(seed)
    topics = rng.standard_normal((40, dim))
    return _unit(topics[rng.integers(0, 40, n)] + 0.8 * rng.standard_normal((n, dim)))


def _exact(vectors: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    scores = vectors @ (query / np.linalg.norm(query))
    return [int(i) for i in np.argsort(-scores, kind="stable")[:k]]


def test_codes_keep_the_cosines_and_the_order_of_float32() -> None:
    vectors = _clustered(500, 384)
    ids = [f"m{i}" for i in range(500)]
    block = Block.build(ids, vectors)
    query = vectors[7] + 0.3 * _clustered(1, 384, seed=1)[0]
    found = nearest([block], query, 10)
    exact = vectors @ (query / np.linalg.norm(query))
    assert [ids.index(i) for i, _ in found][:5] == _exact(vectors, query, 5)
    for memory_id, cosine in found:
        assert cosine == pytest.approx(exact[ids.index(memory_id)], abs=0.01)


def test_the_shortlist_keeps_the_nearest_of_a_large_scope() -> None:
    vectors = _clustered(20_000, 384)
    ids = [f"m{i}" for i in range(len(vectors))]
    blocks = [
        Block.build(ids[s : s + 3_000], vectors[s : s + 3_000]) for s in range(0, 20_000, 3_000)
    ]
    rng = np.random.default_rng(2)
    overlap = []
    for row in rng.integers(0, len(vectors), 20):
        query = vectors[row] + 0.5 * rng.standard_normal(384) / np.sqrt(384)
        found = {ids.index(i) for i, _ in nearest(blocks, query, 20, shortlist=1_000)}
        overlap.append(len(found & set(_exact(vectors, query, 20))) / 20)
    assert min(overlap) >= 0.8 and sum(overlap) / len(overlap) >= 0.95


def test_the_shortlist_is_the_smallest_distances_ties_at_the_cut_by_row() -> None:
    rng = np.random.default_rng(3)
    distance = rng.integers(0, 40, 50_000).astype(np.uint16)  # many ties at any cut
    for wanted in (1, 7, 1_000, 4_000, 49_999):
        chosen = shortlist_rows(distance, wanted)
        expected = np.sort(np.argsort(distance, kind="stable")[:wanted])
        assert chosen.tolist() == expected.tolist()


def test_the_best_rows_are_a_stable_sort_s_first_without_sorting_them_all() -> None:
    rng = np.random.default_rng(3)
    for _ in range(2_000):
        n = int(rng.integers(1, 300))
        k = int(rng.integers(1, n + 5))
        # Few distinct values: ties everywhere, at the cut too.
        scores = rng.integers(0, int(rng.integers(1, 20)), n).astype(np.float32)
        expected = np.argsort(-scores, kind="stable")[:k]
        assert best_rows(scores, k).tolist() == expected.tolist()


def test_equal_vectors_are_found_in_row_order_the_same_every_time() -> None:
    """Copies of one vector tie: which the shortlist keeps, and their order, is fixed."""
    vectors = np.repeat(_clustered(50, 64), 200, axis=0)  # 10,000 rows, 200 copies each
    ids = [f"m{i:05d}" for i in range(len(vectors))]
    block = Block.build(ids, vectors)
    found = nearest([block], vectors[0], 10, shortlist=500)
    assert [memory_id for memory_id, _ in found] == ids[:10]


def test_blocks_are_values_grown_and_shrunk_into_new_blocks() -> None:
    vectors = _clustered(6, 16)
    block = Block.build(["a", "b", "c"], vectors[:3])
    grown = block.extended(["d", "e", "f"], vectors[3:])
    assert (len(block), len(grown)) == (3, 6)
    smaller = grown.without({"b", "e", "zz"})
    assert smaller.ids == ("a", "c", "d", "f") and grown.ids[1] == "b"
    assert smaller.without({"zz"}) is smaller
    assert "b" not in {i for i, _ in nearest([smaller], vectors[1], 6)}
    assert [i for i, _ in nearest([smaller], vectors[3], 1)] == ["d"]
    with pytest.raises(ValueError, match="dimensions"):
        block.extended(["x"], np.ones((1, 8)))


def test_across_blocks_the_best_come_first_whatever_block_holds_them() -> None:
    vectors = _clustered(40, 70)  # 70: sign words are padded to 64-bit multiples
    blocks = [
        Block.build([f"m{i}" for i in range(s, s + 10)], vectors[s : s + 10])
        for s in (0, 10, 20, 30)
    ]
    for shortlist in (5, 100):
        found = nearest(
            [*blocks, Block.build((), np.zeros((0, 70)))], vectors[33], 3, shortlist=shortlist
        )
        assert found[0][0] == "m33" and found[0][1] == pytest.approx(1.0, abs=0.01)
        assert [c for _, c in found] == sorted((c for _, c in found), reverse=True)


def test_nothing_to_find_finds_nothing() -> None:
    block = Block.build(["a"], np.ones((1, 8)))
    assert nearest([], np.ones(8), 3) == []
    assert nearest([block], np.zeros(8), 3) == []  # no direction
    assert nearest([block], np.ones(4), 3) == []  # another model's vector
    assert nearest([block], np.ones(8), 0) == []


def test_the_centroid_of_ids_is_their_mean_unit_vector() -> None:
    vectors = _clustered(4, 32)
    block = Block.build(["a", "b", "c", "d"], vectors)
    middle = centroid([block], {"a", "c", "missing"})
    assert np.allclose(middle, (vectors[0] + vectors[2]) / 2, atol=0.02)
    assert centroid([block], {"missing"}) is None

    # The same bits whatever order the ids come in: the float sum runs in row order
    # (before, a set's order, so the multi-hop query differed between processes).
    many = Block.build([f"i{n}" for n in range(12)], _clustered(12, 384))
    ids = [f"i{n}" for n in range(7)]
    first = centroid([many], ids).tobytes()
    for turn in range(1, 7):
        assert centroid([many], ids[turn:] + ids[:turn]).tobytes() == first
        assert centroid([many], ids[::-1][turn:] + ids[::-1][:turn]).tobytes() == first


def test_scores_in_chunks_are_those_of_one_product() -> None:
    """The shortlist is scored a cache-sized chunk at a time: each row's own product."""
    vectors = _clustered(3_000, 384, seed=3)
    blocks = [
        Block.build([f"m{i}" for i in range(s, s + 1_000)], vectors[s : s + 1_000])
        for s in (0, 1_000, 2_000)
    ]
    query = _clustered(1, 384, seed=4)[0]
    unit = (query / np.linalg.norm(query)).astype(np.float32)
    codes = np.concatenate([block.codes for block in blocks])
    scales = np.concatenate([block.scales for block in blocks])
    whole = np.einsum("ij,j->i", codes.astype(np.float32), unit) * scales
    order = np.argsort(-whole, kind="stable")[:2_000]
    expected = [(f"m{i}", float(whole[i])) for i in order.tolist()]
    found = nearest(blocks, query, 2_000, shortlist=3_000)
    # To a rounding unit, not to the bit: numpy may sum a chunk's float copy in another
    # order than the whole array's (its SIMD loop follows where the data starts); on an
    # AMD EPYC with AVX2 some rows differ in the last place.
    assert [s for _, s in found] == pytest.approx([s for _, s in expected], rel=1e-6, abs=1e-7)
    own = {f"m{i}": float(score) for i, score in enumerate(whole)}
    assert all(score == pytest.approx(own[id_], rel=1e-6, abs=1e-7) for id_, score in found)
    assert len({id_ for id_, _ in found}) == len(found) == 2_000
