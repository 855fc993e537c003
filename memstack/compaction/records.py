"""The stored compaction record: one item that says what a summary stands for.

    >>> from memstack.compaction.records import Anchors, Record, item_hash, parse_record
    >>> items = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    >>> record = Record(
    ...     summary=({"role": "developer", "content": "The user said hi."},),
    ...     count=2,
    ...     anchors=Anchors(first=item_hash(items[0]), last=item_hash(items[1]), span=2, after=0),
    ... )
    >>> parse_record(record.to_item()) == record
    True

Format 1 (a JSON object stored like any other item)::

    {"type": "memstack.compaction", "v": 1, "mode": "append" | "rewrite",
     "method": "summary" | "responses",
     "pinned":  [items],   # kept verbatim: system/developer items of the covered range,
                           # its newest user message (a long agent loop's task), and
                           # first, tool answers carried for good (``carry_beyond_turn``)
     "summary": [items],   # what the model sees instead of the covered range
     "count": n,           # raw items covered
     # append mode only: where the covered range is, by content and relative position
     "from": hash, "upto": hash,     # first and last covered item
     "span": n,                      # stored entries from..upto, records included
     "after": n, "after_hash": hash} # the items between ``upto`` and this record

Content hashes and positions relative to the record itself, not absolute positions:
those shift when a retention layer drops old items. Nothing can be inserted between a
stored item and a record appended after it, so ``after`` is exact, items appended later
are never mistaken for covered ones, and repeated content cannot move the anchor. A
record is valid only while its anchors are still where it says, so a summary never
outlives what it covers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import memstack.cache as cache
from memstack.content_keys import key_of

__all__ = [
    "RECORD_TYPE",
    "RECORD_VERSION",
    "Anchors",
    "Record",
    "RecordFormatError",
    "digest",
    "is_record",
    "item_hash",
    "parse_record",
    "pop_last",
]

Item = Mapping[str, Any]

RECORD_TYPE = "memstack.compaction"
RECORD_VERSION = 1
_HASH_CHARS = 16  # 64 bits: collisions within one session's history are not a concern


class RecordFormatError(ValueError):
    """A stored item claims to be a compaction record but does not parse as one."""


def item_hash(item: Item, key: bytes | None = None) -> str:
    """Short content hash of one item (canonical JSON, SHA-256), stable across processes.

    Kept in the process cache under the item's content key (``key`` where a read knows
    it): every read checks anchors over items it has mostly hashed before.
    """
    return cache.get_or_put(
        ("item hash", key_of(item, key)), lambda: _canonical_hash(item), weight=16
    )


def _canonical_hash(item: Item) -> str:
    canonical = json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # surrogatepass: a lone surrogate stored before validation existed must not crash reads.
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]


def digest(hashes: Iterable[str]) -> str:
    """One hash for an ordered run of item hashes."""
    return hashlib.sha256("\n".join(hashes).encode("ascii")).hexdigest()[:_HASH_CHARS]


def is_record(item: Item) -> bool:
    return item.get("type") == RECORD_TYPE


@dataclass(frozen=True, slots=True)
class Anchors:
    """Where an append-mode record's covered range sits in the stored history."""

    first: str
    last: str
    span: int
    after: int
    after_hash: str = digest([])


@dataclass(frozen=True, slots=True)
class Record:
    """A compaction: ``pinned + summary`` stand for ``count`` raw items.

    ``anchors`` is None in rewrite mode, where the covered items were replaced in the
    store by the record itself.
    """

    summary: tuple[dict[str, Any], ...]
    count: int
    anchors: Anchors | None = None
    pinned: tuple[dict[str, Any], ...] = ()
    method: Literal["summary", "responses"] = "summary"

    @property
    def head(self) -> list[dict[str, Any]]:
        """What the model sees in place of the covered range."""
        return [*self.pinned, *self.summary]

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            "type": RECORD_TYPE,
            "v": RECORD_VERSION,
            "mode": "rewrite" if self.anchors is None else "append",
            "method": self.method,
            "pinned": list(self.pinned),
            "summary": list(self.summary),
            "count": self.count,
        }
        if self.anchors is not None:
            a = self.anchors
            item.update(
                {"from": a.first, "upto": a.last, "span": a.span,
                 "after": a.after, "after_hash": a.after_hash}
            )  # fmt: skip
        return item


def pop_last(record: Record) -> tuple[dict[str, Any], Record | None]:
    """A rewrite-mode record met by ``pop_item``: its last item, and the shorter record left.

    In rewrite mode the record is the oldest history itself, so popping past the newer
    items reaches into it; None when the record held only that one item.
    """
    *rest, last = record.head
    if not rest:
        return last, None
    pinned = len(record.pinned)
    shorter = Record(
        summary=tuple(rest[pinned:]),
        pinned=tuple(rest[:pinned]),
        count=record.count,
        method=record.method,
    )
    return last, shorter


def _items(value: object, field: str) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list) or not all(isinstance(i, dict) for i in value):
        raise RecordFormatError(f"{field} must be a list of items")
    return tuple(value)


def _count(value: object, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RecordFormatError(f"{field} must be an int >= {minimum}")
    return value


def _text(value: object, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise RecordFormatError(f"{field} must be a non-empty string")
    return value


def parse_record(item: Item) -> Record:
    """The record stored as ``item``; ``RecordFormatError`` if it is not format 1."""
    if not is_record(item):
        raise RecordFormatError("not a compaction record")
    if item.get("v") != RECORD_VERSION:
        raise RecordFormatError(f"unknown compaction record version {item.get('v')!r}")
    mode, method = item.get("mode"), item.get("method")
    if mode not in ("append", "rewrite"):
        raise RecordFormatError("mode must be 'append' or 'rewrite'")
    if method not in ("summary", "responses"):
        raise RecordFormatError("method must be 'summary' or 'responses'")
    anchors = None
    if mode == "append":
        anchors = Anchors(
            first=_text(item.get("from"), "from"),
            last=_text(item.get("upto"), "upto"),
            span=_count(item.get("span"), "span", 1),
            after=_count(item.get("after"), "after", 0),
            after_hash=_text(item.get("after_hash"), "after_hash"),
        )
    return Record(
        summary=_items(item.get("summary"), "summary"),
        pinned=_items(item.get("pinned", []), "pinned"),
        count=_count(item.get("count"), "count", 1),
        anchors=anchors,
        method=method,
    )
