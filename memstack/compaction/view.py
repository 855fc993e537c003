"""Turn the newest stored entries into what the model sees: summary + uncovered tail.

    >>> from memstack.compaction.view import Need, resolve
    >>> stored = [{"role": "user", "content": "hi"}]
    >>> resolve(stored, complete=True).view
    [{'role': 'user', 'content': 'hi'}]
    >>> resolve(stored, complete=False)
    <Need.MORE: 'more'>

Pure: the layer reads a tail window of the store and asks; ``Need.MORE`` means "read a
longer tail", ``Need.SIZE`` "tell me how many entries the store holds" (a cheap count lets
the first covered item be checked without reading back to it). The newest record whose
anchors are all present wins; records are never part of the view.
"""

from __future__ import annotations

import enum
import logging
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

from memstack.compaction.records import (
    RECORD_TYPE,
    Anchors,
    Record,
    RecordFormatError,
    digest,
    is_record,
    item_hash,
    parse_record,
)

__all__ = ["Need", "Resolution", "resolve"]

logger = logging.getLogger("memstack.compaction")
_TYPE = operator.methodcaller("get", "type")

Item = dict[str, Any]


class Need(enum.Enum):
    MORE = "more"
    SIZE = "size"


class LazyHashes(Sequence[str | None]):
    """``item_hash`` per window entry (None for records), computed only where asked.

    A read resolves a record from a handful of anchor hashes; hashing every item (a
    canonical ``json.dumps`` each) cost a seventh of a stack read for nothing.
    """

    __slots__ = ("_keys", "_known", "_window")

    def __init__(self, window: Sequence[Item], keys: Sequence[bytes | None] = ()) -> None:
        self._window = window
        self._keys = keys if len(keys) == len(window) else [None] * len(window)
        self._known: dict[int, str | None] = {}

    def __len__(self) -> int:
        return len(self._window)

    @overload
    def __getitem__(self, index: int) -> str | None: ...
    @overload
    def __getitem__(self, index: slice) -> list[str | None]: ...
    def __getitem__(self, index: int | slice) -> str | list[str | None] | None:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self._window)
        if index not in self._known:
            entry = self._window[index]
            self._known[index] = None if is_record(entry) else item_hash(entry, self._keys[index])
        return self._known[index]

    def is_item(self, index: int) -> bool:
        """True for a history item, False for a compaction record; hashes nothing."""
        return not is_record(self._window[index])


@dataclass(frozen=True)
class Resolution:
    """One read of the store, resolved: the record that applies and what it leaves."""

    window: Sequence[Item]
    hashes: Sequence[str | None]  # per window entry; None for records
    record: Record | None = None
    record_index: int = -1
    anchor_index: int = -1  # last covered entry (the record itself in rewrite mode)
    raw_indices: tuple[int, ...] = ()  # uncovered items, oldest first
    reach: int = 0  # oldest window index the answer depended on

    @property
    def raw(self) -> list[Item]:
        return [self.window[i] for i in self.raw_indices]

    @property
    def head(self) -> list[Item]:
        return self.record.head if self.record is not None else []

    @property
    def view(self) -> list[Item]:
        """Unmasked view: the record's pinned and summary items, then the uncovered tail."""
        return [*self.head, *self.raw]

    @property
    def depth(self) -> int:
        """Newest entries the next read needs: from the anchor on, or back to ``reach``.

        The first covered item is then checked by count, not read.
        """
        needed = self.anchor_index if self.record is not None else self.reach
        return len(self.window) - max(0, needed)


def resolve(
    window: Sequence[Item],
    *,
    complete: bool,
    store_size: int | None = None,
    trust_first: bool = False,
    keys: Sequence[bytes | None] = (),
) -> Resolution | Need:
    """Resolve the last ``len(window)`` stored entries (all of them when ``complete``).

    ``trust_first``: for a store that cannot count, take a first covered item beyond the
    window as present rather than asking for the whole store (see the layer's docs).
    ``keys``: the entries' content keys, where the read knows them (hashes are cached).
    """
    hashes = LazyHashes(window, keys)
    # Where the records are, found once (the type of every entry, fetched at C speed):
    # most reads hold none or a few, and every other entry is an item.
    kinds = list(map(_TYPE, window))
    records = (
        [i for i, kind in enumerate(kinds) if kind == RECORD_TYPE] if RECORD_TYPE in kinds else []
    )
    for r in reversed(records):
        try:
            record = parse_record(window[r])
        except RecordFormatError as exc:
            # Non-destructive: an unreadable record only means that compaction is not used.
            logger.warning("ignoring stored compaction record: %s", exc)
            continue
        if record.anchors is None:
            return _resolution(window, hashes, record, r, r, records, reach=r)
        found = _locate(hashes, r, record.anchors, complete, records)
        if isinstance(found, Need):
            return found
        if found is None:
            continue
        start = found - (record.anchors.span - 1)
        if start >= 0:
            present = hashes[start] == record.anchors.first
        elif complete:
            present = False
        elif store_size is not None:
            # Entries only leave a store oldest first, so the first covered item is still
            # there exactly when the store reaches back ``span`` entries from the anchor.
            present = store_size - len(window) + start >= 0
        elif trust_first:
            present = True
        else:
            return Need.SIZE
        if present:
            reach = start if start >= 0 else found
            return _resolution(window, hashes, record, r, found, records, reach=reach)
    if not complete:
        return Need.MORE
    return _resolution(window, hashes, None, -1, -1, records, reach=0)


def _locate(
    hashes: LazyHashes, r: int, anchors: Anchors, complete: bool, records: Sequence[int]
) -> int | Need | None:
    """Window index of the record's last covered item, or None when it is gone.

    The anchor is exactly ``after`` items before the record (older records between them
    do not count): a popped, replaced or expired item there means the record is void.
    ``records``: the window indices of every record.
    """
    before = _items_between(0, r, records)
    if len(before) <= anchors.after:
        return None if complete else Need.MORE
    p = before[-(anchors.after + 1)]
    between = before[len(before) - anchors.after :]
    if hashes[p] != anchors.last or digest(str(hashes[i]) for i in between) != anchors.after_hash:
        return None
    return p


def _resolution(
    window: Sequence[Item],
    hashes: LazyHashes,
    record: Record | None,
    record_index: int,
    anchor_index: int,
    records: Sequence[int],
    *,
    reach: int,
) -> Resolution:
    raw = tuple(_items_between(anchor_index + 1, len(window), records))
    return Resolution(window, hashes, record, record_index, anchor_index, raw, reach)


def _items_between(start: int, stop: int, records: Sequence[int]) -> list[int]:
    """The indices in ``range(start, stop)`` of entries that are items (not ``records``)."""
    if not records:
        return list(range(start, stop))
    skip = set(records)
    return [i for i in range(start, stop) if i not in skip]
