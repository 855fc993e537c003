"""The parts of a JSON tool output, each a stretch of the output exactly as it was written.

    >>> from memstack.compaction.json_parts import json_parts
    >>> text = ('{"reservation_id": "4WQ150", "flights": [{"flight_number": "HAT001", '
    ...         '"date": "2024-05-01", "price": 120}, {"flight_number": "HAT002", '
    ...         '"date": "2024-05-03", "price": 95}], "insurance": "no"}')
    >>> for path, part in json_parts(text, width=80):
    ...     print(path, "|", part)
    reservation_id | "reservation_id": "4WQ150"
    flights[0] | {"flight_number": "HAT001", "date": "2024-05-01", "price": 120}
    flights[1] | {"flight_number": "HAT002", "date": "2024-05-03", "price": 95}
    insurance | "insurance": "no"

Why: a support tool answers in one line of JSON (a reservation, a user's profile, a list
of flights), so a summariser that quotes *lines* can only quote the whole answer or a
clipped stretch of it. Cut at the JSON's own seams instead, each part is a record the
agent can read (one flight with its number, date and price), and it is the original
text, byte for byte, so the prompt still quotes what the tool said. A member shorter
than ``width`` characters is one part; a longer object or array is cut into its members
(an array's elements keep their index in the path); a long string stays one part.
Text that is not one JSON object or array gives no parts.

``field_parts`` and ``field_runs`` keep the parts at named fields (``flights``,
``name.first``); ``[*]`` in a field stands for every element of a list, so a search's
list of flights keeps each flight's ``"[*].flight_number"`` and ``"[*].prices"``.
``field_runs(…, drop_echoes=True)`` leaves out a member that only repeats the key its
object is filed under (``"gift_card_7": {"amount": 39, "id": "gift_card_7"}``), but for
an object's first member: the key already shows that name with the text that follows it,
and the rest stays verbatim.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping, Sequence

from memstack.errors import ConfigurationError

__all__ = ["field_parts", "field_runs", "field_table", "json_parts"]

_DECODER = json.JSONDecoder()
_SPACE = " \t\n\r"


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _SPACE:
        at += 1
    return at


def _end(text: str, at: int) -> int:
    """Where the JSON value starting at ``text[at]`` ends."""
    return _DECODER.raw_decode(text, at)[1]


def json_parts(text: str, *, width: int = 160) -> list[tuple[str, str]]:
    """``(path, verbatim text)`` of each part of the JSON ``text`` (module docstring)."""
    return [(path, text[begin:end]) for path, begin, end in _spans(text, width)]


def _spans(text: str, width: int) -> list[tuple[str, int, int]]:
    start = _skip(text, 0)
    if start >= len(text) or text[start] not in "{[":
        return []
    try:
        if _skip(text, _end(text, start)) != len(text):
            return []  # JSON followed by something else: not a tool's JSON answer
        return list(_members(text, start, "", width))
    except ValueError:
        return []


def _members(text: str, at: int, path: str, width: int) -> Iterator[tuple[str, int, int]]:
    """The parts of the object or array at ``text[at]``."""
    closing = "}" if text[at] == "{" else "]"
    at = _skip(text, at + 1)
    index = 0
    while at < len(text) and text[at] != closing:
        begin = at
        if closing == "}":
            key, at = _DECODER.raw_decode(text, at)
            at = _skip(text, at)
            at = _skip(text, at + 1)  # the colon
            name = f"{path}.{key}" if path else str(key)
        else:
            name = f"{path}[{index}]"
        value = at
        at = _end(text, value)
        if at - begin <= width or text[value] not in "{[":
            yield name, begin, at
        else:
            yield from _members(text, value, name, width)
        at = _skip(text, at)
        if at < len(text) and text[at] == ",":
            at = _skip(text, at + 1)
        index += 1


def field_parts(text: str, fields: Sequence[str], *, width: int = 160) -> list[tuple[str, str]]:
    """The parts of ``text`` at or under one of ``fields`` (``flights``, ``name.first``)."""
    return [(path, text[begin:end]) for path, begin, end in _field_spans(text, fields, width)]


def field_runs(
    text: str, fields: Sequence[str], *, width: int = 160, drop_echoes: bool = False
) -> list[str]:
    """``field_parts``, with parts that stood side by side joined as they were written.

    >>> field_runs('{"id": "4WQ150", "origin": "JFK", "destination": "SEA", "seats": 3}',
    ...            ["origin", "destination"])
    ['"origin": "JFK", "destination": "SEA"']
    >>> field_runs('{"cards": {"gc_7": {"amount": 39, "id": "gc_7"}}}', ["cards"],
    ...            width=40, drop_echoes=True)
    ['"gc_7": {"amount": 39}']
    """
    runs: list[tuple[int, int]] = []
    for _, begin, end in _field_spans(text, fields, width):
        if runs and not text[runs[-1][1] : begin].strip(_SPACE + ","):
            runs[-1] = (runs[-1][0], end)  # only a separator between: one stretch
        else:
            runs.append((begin, end))
    if not drop_echoes:
        return [text[begin:end] for begin, end in runs]
    echoes = _echo_spans(text)
    return [_without(text, begin, end, echoes) for begin, end in runs]


def _without(text: str, begin: int, end: int, cuts: Sequence[tuple[int, int]]) -> str:
    """``text[begin:end]`` less the ``cuts`` that lie inside it."""
    pieces, at = [], begin
    for start, stop in cuts:
        if begin <= start and stop <= end:
            pieces.append(text[at:start])
            at = stop
    pieces.append(text[at:end])
    return "".join(pieces)


def _echo_spans(text: str) -> list[tuple[int, int]]:
    """Spans of members that repeat their object's key, each with one separator, in order."""
    start = _skip(text, 0)
    if start >= len(text) or text[start] not in "{[":
        return []
    spans: list[tuple[int, int]] = []
    try:
        _echoes_in(text, start, None, spans)
    except ValueError:
        return []
    return sorted(spans)


def _echoes_in(text: str, at: int, owner: str | None, spans: list[tuple[int, int]]) -> int:
    """Collect the echoes under the value at ``text[at]`` (filed under ``owner``); its end."""
    if text[at] not in "{[":
        return _end(text, at)
    closing = "}" if text[at] == "{" else "]"
    at = _skip(text, at + 1)
    members: list[tuple[int, int, bool]] = []  # begin, end, echo
    while at < len(text) and text[at] != closing:
        begin, key = at, None
        if closing == "}":
            key, at = _DECODER.raw_decode(text, at)
            at = _skip(text, _skip(text, at) + 1)  # past the colon
        value = at
        at = _echoes_in(text, value, key if isinstance(key, str) else None, spans)
        echo = owner is not None and text[value] == '"' and _DECODER.decode(text[value:at]) == owner
        members.append((begin, at, echo))
        at = _skip(text, at)
        if at < len(text) and text[at] == ",":
            at = _skip(text, at + 1)
    # The first member stays: the key's own text runs on into it (``"gc_7": {"amount"``).
    for index in range(1, len(members)):
        if members[index][2]:  # with the separator before it
            spans.append((members[index - 1][1], members[index][1]))
    return at + 1


def _field_spans(text: str, fields: Sequence[str], width: int) -> list[tuple[str, int, int]]:
    patterns = [_field_pattern(f) for f in fields]
    return [
        (path, begin, end)
        for path, begin, end in _spans(text, width)
        if any(_wanted(path, *pattern) for pattern in patterns)
    ]


@functools.lru_cache(maxsize=256)  # per masked output per read otherwise; fields are few
def _field_pattern(field: str) -> tuple[re.Pattern[str], re.Pattern[str] | None]:
    """The field as a pattern (``[*]`` stands for any index), and the parts holding it.

    ``[*].price`` keeps the ``price`` member of every element of a list. A list or an
    element short enough to be one part holds that member whole, so it is kept whole:
    for ``flights[*].price`` a short ``flights`` list, or one short ``flights[2]``.
    """
    pieces = [re.escape(piece) for piece in field.split("[*]")]
    exact = re.compile(r"\[\d+\]".join(pieces))
    if len(pieces) == 1:
        return exact, None
    holders = []
    for level in range(1, len(pieces)):  # the list before each [*], and its element
        outer = r"\[\d+\]".join(pieces[:level])
        holders += [outer, outer + r"\[\d+\]"]
    return exact, re.compile("|".join(f"(?:{holder})" for holder in holders))


def _wanted(path: str, exact: re.Pattern[str], holder: re.Pattern[str] | None) -> bool:
    """``path`` is the field, lies under it, or is a list or element that holds it whole."""
    found = exact.match(path)
    if found is not None:
        return found.end() == len(path) or path[found.end()] in ".["
    return holder is not None and holder.fullmatch(path) is not None


def field_table(value: object, *, owner: str) -> Mapping[str, tuple[str, ...]]:
    """``keep_fields`` checked: tool name -> the top-level (or dotted) fields to keep."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(tool, str)
        and not isinstance(paths, str)
        and isinstance(paths, Sequence)
        and all(isinstance(p, str) and p for p in paths)
        for tool, paths in value.items()
    ):
        raise ConfigurationError(
            "keep_fields must map tool names to lists of JSON field names, e.g. "
            f'{{"get_order": ["items", "payment"]}}; got {value!r}',
            layer=owner,
        )
    return {tool: tuple(paths) for tool, paths in value.items()}
