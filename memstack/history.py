"""The shape of a stored history: item kinds, atomic units, user turns, validation.

    >>> from memstack.history import split_units, split_turns
    >>> items = [
    ...     {"role": "user", "content": "weather?"},
    ...     {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
    ...     {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    ...     {"role": "assistant", "content": "Sunny."},
    ... ]
    >>> [(u.start, u.stop) for u in split_units(items)]
    [(0, 1), (1, 3), (3, 4)]
    >>> [(t.start, t.stop) for t in split_turns(items)]
    [(0, 4)]

Layers that drop or replace old history (window, compaction, TTL) cut only at the
boundaries computed here, so the model never sees a tool output without its call or a
reasoning item without the item it produced.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from memstack.errors import ItemValidationError, StoredItemError

__all__ = [
    "CALL_TO_OUTPUT",
    "FACT_WEIGHT",
    "Fact",
    "Span",
    "cut_points",
    "cuts_of",
    "fact_weight",
    "history_problems",
    "is_pinned",
    "is_user_message",
    "item_fact",
    "newest_valid",
    "pair_key",
    "split_turns",
    "split_units",
    "stored_history",
    "stored_items",
    "user_turn_starts",
    "valid_view",
    "validate_items",
]

Item = Mapping[str, Any]
T = TypeVar("T", bound=Mapping[str, Any])
logger = logging.getLogger("memstack.history")

# Call item type -> the output item type that completes it (the SDK's own pairing).
CALL_TO_OUTPUT: dict[str, str] = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "computer_call": "computer_call_output",
    "shell_call": "shell_call_output",
    "local_shell_call": "local_shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
    "tool_search_call": "tool_search_output",
    "program": "program_output",
    "mcp_approval_request": "mcp_approval_response",
}
_OUTPUT_TO_CALL = {output: call for call, output in CALL_TO_OUTPUT.items()}

# Items that carry standing context rather than conversation: kept by windows, never cut.
_PINNED_ROLES = frozenset({"system", "developer"})
_PINNED_TYPES = frozenset({"compaction"})
PINNED_MARKER = "memstack_pinned"


def item_type(item: Item) -> str:
    """The Responses item type; role-only dicts (easy input messages) are messages."""
    kind = item.get("type")
    return kind if isinstance(kind, str) else "message"


def is_user_message(item: Item) -> bool:
    return item_type(item) == "message" and item.get("role") == "user"


def is_pinned(item: Item) -> bool:
    """System/developer messages, compaction items and items a layer marked pinned."""
    if item.get(PINNED_MARKER) is True:
        return True
    kind = item_type(item)
    if kind == "message":
        return item.get("role") in _PINNED_ROLES
    return kind in _PINNED_TYPES


# Item type -> (pair family, whether it is the output, the key holding its id). The views
# classify every item several times per read: one lookup instead of a chain of tests.
_PAIRING: dict[str, tuple[str, bool, str]] = {
    **{call: (call, False, "call_id") for call in CALL_TO_OUTPUT},
    "mcp_approval_request": ("mcp_approval_request", False, "id"),
    **{output: (call, True, "call_id") for call, output in CALL_TO_OUTPUT.items()},
    "mcp_approval_response": ("mcp_approval_request", True, "approval_request_id"),
}


def pair_key(item: Item) -> tuple[str, str] | None:
    """``(call type, id)`` shared by a tool call and its output, or None for other items."""
    kind = item.get("type")
    pairing = _PAIRING.get(kind) if isinstance(kind, str) else None
    return None if pairing is None else _pair_ident(item, pairing)


def _pair_ident(item: Item, pairing: tuple[str, bool, str]) -> tuple[str, str] | None:
    family, output, field = pairing
    ident = item.get(field)
    if output and field == "call_id" and not ident:
        ident = item.get("id")
    return (family, ident) if isinstance(ident, str) and ident else None


def is_output(item: Item) -> bool:
    kind = item.get("type")
    return isinstance(kind, str) and kind in _OUTPUT_TO_CALL


@dataclass(frozen=True, slots=True)
class Span:
    """Half-open index range ``[start, stop)`` into a history."""

    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


# What the shape of a history needs of one item: its type ("message" for role-only
# dicts), its call/output pair key (``pair_key``), whether that key is an output's, and
# whether it is a user message. A pure function of the item, so a read that keeps its
# rows' facts (``memstack.incremental``) classifies only the rows it has not seen.
Fact = tuple[str, "tuple[str, str] | None", bool, bool]


def item_fact(item: Item) -> Fact:
    """``(type, pair key, is an output, is a user message)`` of one item."""
    kind = item.get("type")
    if not isinstance(kind, str):
        return _USER_MESSAGE if item.get("role") == "user" else _OTHER_MESSAGE
    pairing = _PAIRING.get(kind)
    if pairing is None:
        fact = (kind, None, False, kind == "message" and item.get("role") == "user")
        # Kept per row for a session's reads: the few facts of unpaired items are shared.
        return _UNPAIRED.setdefault(fact, fact) if len(_UNPAIRED) < 256 else fact
    return (kind, _pair_ident(item, pairing), pairing[1], False)


# What a kept fact holds of its own: a paired item's, a tuple of four and its pair key's
# tuple (whose strings are the item's); an unpaired item's is shared.
FACT_WEIGHT = 128


def fact_weight(facts: Sequence[Fact]) -> int:
    """Bytes ``facts`` hold of their own (paired items' facts)."""
    return FACT_WEIGHT * sum(1 for fact in facts if fact[1] is not None)


_USER_MESSAGE: Fact = ("message", None, False, True)
_OTHER_MESSAGE: Fact = ("message", None, False, False)
_UNPAIRED: dict[Fact, Fact] = {_USER_MESSAGE: _USER_MESSAGE, _OTHER_MESSAGE: _OTHER_MESSAGE}


def cut_points(items: Sequence[Item]) -> list[bool]:
    """``ok[i]`` tells whether history may be cut just before item ``i`` (``0 <= i <= n``).

    A cut is forbidden inside a call/output pair (including parallel calls whose outputs
    interleave) and right after a reasoning item, which belongs to what follows it.
    """
    return cuts_of([item_fact(item) for item in items])


def cuts_of(facts: Sequence[Fact]) -> list[bool]:
    """``cut_points`` of the items whose ``item_fact``s these are."""
    n = len(facts)
    # Each output belongs to the most recent call with its id, so an id reused far apart
    # makes two small units, not one that spans everything between them.
    latest_call: dict[tuple[str, str], int] = {}
    delta = [0] * (n + 2)  # depth[i] > 0 means some pair spans the boundary before item i
    after_reasoning: list[int] = []
    for index, (kind, key, output, _) in enumerate(facts):  # every read runs this
        if key is None:
            if kind == "reasoning":
                after_reasoning.append(index + 1)
            continue
        if not output:  # a call
            latest_call[key] = index
        elif (start := latest_call.get(key)) is not None and index > start:
            delta[start + 1] += 1
            delta[index + 1] -= 1
    ok = [True] * (n + 1)
    depth = 0
    for i in range(n + 1):
        depth += delta[i]
        if depth > 0:
            ok[i] = False
    for i in after_reasoning:
        if i < n:
            ok[i] = False
    return ok


def user_turn_starts(facts: Sequence[Fact]) -> list[int]:
    """Where each user turn of ``split_turns`` that begins with a user message starts."""
    ok = cuts_of(facts)
    return [i for i, fact in enumerate(facts) if fact[3] and ok[i]]


def _spans(boundaries: Iterable[int], n: int) -> list[Span]:
    points = sorted({0, n, *boundaries})
    return [Span(a, b) for a, b in itertools.pairwise(points) if b > a]


def split_units(items: Sequence[Item]) -> list[Span]:
    """Smallest spans that must be kept or dropped together."""
    ok = cut_points(items)
    return _spans((i for i, allowed in enumerate(ok) if allowed), len(items))


def split_turns(items: Sequence[Item]) -> list[Span]:
    """User turns: a user message and everything up to the next one.

    Items before the first user message form their own leading span. A user message
    that sits inside a unit (between a call and its output) does not start a turn.
    """
    ok = cut_points(items)
    starts = (i for i, item in enumerate(items) if ok[i] and is_user_message(item))
    return _spans(starts, len(items))


def _problems(items: Sequence[Item], *, whole: bool = True) -> list[tuple[int, str]]:
    """``(index, reason)`` for each item the Responses API would reject in this position.

    Not ``whole`` (the newest items of a longer history): an output whose call is not among
    them may answer one before them, so it is reported with index ``-1 - index``, undecided.
    """
    return _fact_problems([item_fact(item) for item in items], whole=whole)


def _fact_problems(facts: Sequence[Fact], *, whole: bool = True) -> list[tuple[int, str]]:
    """``_problems`` of the items whose ``item_fact``s these are."""
    problems: list[tuple[int, str]] = []
    open_calls: dict[tuple[str, str], int] = {}
    seen_calls: set[tuple[str, str]] = set()
    for index, (kind, key, output, user) in enumerate(facts):  # every read runs this
        if kind in _PAIRING:
            if key is None:
                if output:
                    problems.append((index, f"item {index}: {kind} without a call id"))
            elif not output:  # a call
                open_calls[key] = index
                seen_calls.add(key)
            else:
                if key not in seen_calls:
                    where = index if whole else -1 - index
                    problems.append((where, f"item {index}: {kind} {key[1]!r} has no earlier call"))
                open_calls.pop(key, None)
        elif kind == "reasoning":
            follower = facts[index + 1] if index + 1 < len(facts) else None
            if follower is not None and (follower[3] or follower[2]):
                problems.append((index, f"item {index}: reasoning not followed by a model item"))
        elif user:
            for (family, ident), at in open_calls.items():
                problems.append((at, f"item {at}: {family} {ident!r} has no output"))
            open_calls.clear()
    return problems


def history_problems(items: Sequence[Item]) -> list[str]:
    """Reasons the Responses API would reject this history as model input; empty if none.

    Checks orphan outputs (no earlier call), calls whose output never arrives although
    the conversation moved on, and reasoning items not followed by a model item.
    """
    return [reason for _, reason in _problems(items)]


# Set inside ``stored_history()``: reads return what is stored, unrepaired.
_as_stored: ContextVar[bool] = ContextVar("memstack_as_stored", default=False)


@contextmanager
def stored_history() -> Iterator[None]:
    """Reads inside this block skip the top-of-stack repair (``valid_view``).

    For export, inspection and capability adapters that rewrite what they read: they
    must see what is stored, or a rewrite would delete what a view only leaves out.
    """
    with _flag(_as_stored):
        yield


def reading_as_stored() -> bool:
    return _as_stored.get()


# Set inside ``read_only()``: reads store nothing.
_read_only: ContextVar[bool] = ContextVar("memstack_read_only", default=False)


@contextmanager
def read_only() -> Iterator[None]:
    """Reads inside this block write nothing to the store.

    A layer that stores something on first sight (TTL dating history written without it)
    shows that history as it is instead. For looking at a session, perhaps through
    another recipe than the one that wrote it (``memstack inspect``, ``stats``,
    ``export``): a look must not convert it.
    """
    with _flag(_read_only):
        yield


def reading_only() -> bool:
    return _read_only.get()


@contextmanager
def _flag(flag: ContextVar[bool]) -> Iterator[None]:
    """``flag`` set for the block (and what it awaits), then as it was."""
    token = flag.set(True)
    try:
        yield
    finally:
        flag.reset(token)


def valid_view(items: Sequence[T], facts: Sequence[Fact] | None = None) -> list[T]:
    """``items`` without what would make the API reject them (see ``history_problems``).

    The one guard every stack applies to what it returns, whatever its layer order: a
    call expired or unreadable below encryption must not leave its output orphaned.
    Dropping an item can expose another (reasoning before a dropped call), so it repeats.
    ``facts``: the items' ``item_fact``s, where the caller kept them.
    """
    view = list(items)
    facts = [item_fact(item) for item in view] if facts is None else list(facts)
    while problems := _fact_problems(facts):
        doomed = {index for index, _ in problems}
        logger.debug("view repaired, left out: %s", "; ".join(r for _, r in problems))
        view = [item for index, item in enumerate(view) if index not in doomed]
        facts = [fact for index, fact in enumerate(facts) if index not in doomed]
    return view


def newest_valid(items: Sequence[T], n: int, *, whole: bool) -> list[T] | None:
    """The newest ``n`` items of ``valid_view`` of a history whose newest items are ``items``.

    ``whole``: ``items`` is the whole history. Otherwise an output whose call lies before
    them is kept, as a limit cut leaves it (the SDK's meaning of ``limit``), and None means
    "read further back": one of the newest ``n`` is an output whose call is not among
    ``items``, or too few are left to tell.
    """
    view = list(items)
    while True:
        problems = _problems(view, whole=whole)
        doomed = {index for index, _ in problems if index >= 0}
        if not doomed:
            break
        view = [item for index, item in enumerate(view) if index not in doomed]
    if n <= 0:
        return []
    undecided = max((-1 - index for index, _ in problems), default=-1)
    if not whole and len(view) - n <= undecided:
        return None
    return view[-n:]


def validate_items(items: object, *, layer: str | None = None) -> list[dict[str, Any]]:
    """Check that ``items`` is a list of dicts that JSON and UTF-8 store faithfully.

    Stores serialise with ``json.dumps`` and write UTF-8; an item that cannot round-trip
    (NaN, an object, a lone surrogate cut from an emoji) would be lost, altered or make
    the session unreadable later, so it is refused here, naming the item and the field.
    """
    if not isinstance(items, list):
        raise ItemValidationError(f"items must be a list, not {type(items).__name__}", layer=layer)
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise ItemValidationError(
                f"item {index} must be a dict, not {type(item).__name__}", layer=layer
            )
        try:
            json.dumps(item, allow_nan=False, ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:
            field, problem = _first_bad_value(item)
            raise ItemValidationError(
                f"item {index} ({item_type(item)}), field {field}: {problem}", layer=layer
            ) from exc
    return items


def stored_items(
    values: Sequence[object], *, layer: str | None = None, session_id: str | None = None
) -> list[dict[str, Any]]:
    """``values`` read from a store, checked to be items (dicts) before a layer uses them.

    Stores hand back whatever JSON they hold; a value written around memstack that is not
    an item raises ``StoredItemError`` naming its position, instead of a bare crash later.
    """
    for index, value in enumerate(values):
        if not isinstance(value, dict):
            raise StoredItemError(
                f"the stored value {len(values) - index} from the newest is a "
                f"{type(value).__name__}, not an item; `memstack repair` shows and removes it",
                position=len(values) - index,
                layer=layer,
                session_id=session_id,
            )
    return cast("list[dict[str, Any]]", values)


def _first_bad_value(value: object, path: str = "") -> tuple[str, str]:
    """Where in an item the first value JSON or UTF-8 cannot store is, and why."""
    if isinstance(value, dict):
        for key, child in value.items():
            if not isinstance(key, str):
                return path or "(top)", f"key {key!r} is not a string"
            found = _first_bad_value(child, f"{path}.{key}" if path else key)
            if found[1]:
                return found
        return path, ""
    if isinstance(value, list | tuple):
        for position, child in enumerate(value):
            found = _first_bad_value(child, f"{path}[{position}]")
            if found[1]:
                return found
        return path, ""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = value[exc.start : exc.end]
            return path, f"{bad!r} at {exc.start} is a lone surrogate, not valid Unicode"
        return path, ""
    if isinstance(value, float) and not math.isfinite(value):
        return path, f"{value!r} is not a JSON number"
    if value is None or isinstance(value, bool | int | float):
        return path, ""
    return path, f"a {type(value).__name__} is not JSON-serialisable"
