"""Content keys and the memo that serve per-item caches (token counts, anchor hashes)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

from memstack.compaction.records import item_hash
from memstack.content_keys import Memo, content_key
from memstack.tokens import item_digest


def test_equal_content_gives_equal_keys_and_any_change_a_new_one() -> None:
    item = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x": [1, 2]}'}
    assert content_key(item) == content_key(dict(item))
    for changed in (
        {**item, "arguments": '{"x": [1, 3]}'},
        {**item, "call_id": "c2"},
        {**item, "extra": None},
        {**item, "arguments": {"x": [1, 2]}},
    ):
        assert content_key(changed) != content_key(item)


def test_values_marshal_cannot_write_still_get_a_key() -> None:
    when = datetime(2026, 1, 2, tzinfo=UTC)
    assert content_key({"at": when}) == content_key({"at": when})
    assert content_key({"at": when}) != content_key({"at": datetime(2026, 1, 3, tzinfo=UTC)})


def test_memo_computes_once_per_content_and_stays_bounded() -> None:
    calls: list[Any] = []
    memo: Memo[int] = Memo(3)

    def compute(item: Any) -> int:
        calls.append(item["n"])
        return int(item["n"]) * 10

    assert [memo.get_or_compute({"n": n}, compute) for n in (1, 2, 1, 1)] == [10, 20, 10, 10]
    assert calls == [1, 2]
    for n in range(3, 10):
        memo.get_or_compute({"n": n}, compute)
    assert len(memo) == 3
    memo.get_or_compute({"n": 1}, compute)  # evicted long ago: computed again
    assert calls[-1] == 1


def test_memo_size_zero_caches_nothing() -> None:
    memo: Memo[int] = Memo(0)
    calls: list[int] = []
    for _ in range(3):
        memo.get_or_compute({"n": 1}, lambda item: calls.append(1) or 1)
    assert len(calls) == 3 and len(memo) == 0


def test_memoised_hashes_stay_canonical() -> None:
    """The anchors every process agrees on: key order and the memo change nothing."""
    a = {"role": "user", "content": "hi", "id": "m1"}
    b = {"id": "m1", "content": "hi", "role": "user"}
    assert content_key(a) != content_key(b)  # two cache entries ...
    assert item_hash(a) == item_hash(b) == item_hash(dict(b))  # ... one canonical hash
    assert item_digest(a) == item_digest(b)
    assert item_hash({**a, "content": "ho"}) != item_hash(a)


def test_memo_shared_by_threads() -> None:
    memo: Memo[int] = Memo(50)
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(2000):
                n = (i + offset) % 80
                assert memo.get_or_compute({"n": n}, lambda item: int(item["n"])) == n
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(memo) == 50
