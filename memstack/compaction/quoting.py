"""A deterministic, offline summariser that quotes the lines around the names in use.

    >>> import asyncio
    >>> from memstack.compaction import Summarize
    >>> from memstack.compaction.quoting import QuotingSummarizer
    >>> strategy = Summarize(QuotingSummarizer(), max_tokens=200)
    >>> [summary] = asyncio.run(strategy.compact([], [
    ...     {"type": "function_call", "call_id": "c1", "name": "bash",
    ...      "arguments": '{"command": "grep -n parse_date src/util/dates.py"}'},
    ...     {"type": "function_call_output", "call_id": "c1",
    ...      "output": "12: import re\\n41: def parse_date(text, fmt=ISO_FORMAT):"},
    ...     {"role": "assistant", "content": "Its default, ISO_FORMAT, is wrong."},
    ... ]))
    >>> print(summary["content"].split("\\n\\n", 1)[1])
    Lines quoted verbatim ($ a command, | its output, > the agent's words):
    $ grep -n parse_date src/util/dates.py
    > Its default, ISO_FORMAT, is wrong.

Each name the agent used is quoted once, in the shortest line that holds it with others
(above, the agent's own sentence holds ISO_FORMAT; the output line adds nothing more).
A list of names tells an agent that a token exists, not what was said around it; this
summariser keeps whole lines instead. The names that matter are the ones the agent
itself used (the salient tokens of its messages and tool-call arguments,
``memstack.compaction.excerpts.used_names``), weighted by how recently it last used them.
Every line of the covered items (and of the previous summary) that holds such a name is
a candidate; lines are picked greedily by the weight of the names they bring that no
picked line holds yet, per character, until ``max_tokens``. The picked lines are written
in their original order, verbatim (clipped to ``line_chars`` around a name), each with a
short mark of where it came from: ``USER:``, ``> `` the agent's words, ``$ `` a call,
``  | `` its output.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from memstack.compaction.excerpts import agent_text, used_names
from memstack.compaction.json_parts import field_parts, field_table, json_parts
from memstack.compaction.render import message_text
from memstack.compaction.salient import salient_tokens
from memstack.compaction.summarizer import SummaryRequest
from memstack.errors import ConfigurationError
from memstack.history import is_output, item_type, pair_key
from memstack.tokens import ItemCounter, default_counter

__all__ = ["LEAD", "QuotingSummarizer"]

Item = Mapping[str, Any]

#: The summary's first line: what follows, and how lines are marked.
LEAD = "Lines quoted verbatim ($ a command, | its output, > the agent's words):"
# Characters per token, to rank lines without tokenising each candidate.
_CHARS_PER_TOKEN = 3.5
# A quoted line shorter than this brings its neighbours along.
_SHORT = 72


def _clip(line: str, names: Sequence[str], width: int) -> str:
    line = " ".join(line.split())
    if len(line) <= width:
        return line
    at = min((i for n in names if (i := line.find(n)) >= 0), default=0)
    start = max(0, at - width // 3)
    return line[start : start + width]


class QuotingSummarizer:
    """Summarises without a model: the lines that hold the names the agent used, verbatim."""

    def __init__(
        self,
        *,
        counter: ItemCounter | None = None,
        line_chars: int = 160,
        keep_fields: Mapping[str, Sequence[str]] | None = None,
        merge_overlaps: bool = False,
        lead: str = LEAD,
    ) -> None:
        if isinstance(line_chars, bool) or not isinstance(line_chars, int) or line_chars < 40:
            raise ConfigurationError(
                f"line_chars must be an int >= 40, got {line_chars!r}", layer="QuotingSummarizer"
            )
        self.counter: ItemCounter = counter if counter is not None else default_counter()
        self.line_chars = line_chars
        self.keep_fields = field_table(keep_fields, owner="QuotingSummarizer")
        if not isinstance(merge_overlaps, bool):
            raise ConfigurationError(
                f"merge_overlaps must be true or false, got {merge_overlaps!r}",
                layer="QuotingSummarizer",
            )
        self.merge_overlaps = merge_overlaps
        if not isinstance(lead, str) or not lead.strip():
            raise ConfigurationError(
                f"lead must be a non-empty string, got {lead!r}", layer="QuotingSummarizer"
            )
        self.lead = lead

    async def summarize(self, request: SummaryRequest) -> str:
        candidates = self._candidates(request)
        previous = sum(1 for line in (request.previous or "").splitlines() if line.strip())
        weights = self._weights(request.items)
        if self.keep_fields:
            for name in self._field_names(request.items):
                weights[name] = max(weights.get(name, 0.0), 1.0)
        for item in request.kept:  # shown verbatim after the summary: no need to quote
            for name in salient_tokens(_any_text(item)):
                weights.pop(name, None)
        budget = request.max_tokens - self.counter.count_item({"content": self.lead})
        chosen = self._pick(candidates, previous, weights, budget)
        # The lead line also keeps a quoted "Traceback …" from reading as a failure report.
        return "\n".join([self.lead, *self._quotes(candidates, chosen)])

    def _candidates(self, request: SummaryRequest) -> list[_Candidate]:
        """``(names held, line as written, its lines)`` for every quotable line, in order."""
        out: list[_Candidate] = []
        for number, line in enumerate((request.previous or "").splitlines()):
            if line.strip():
                out.append(_Candidate(salient_tokens(line), line, "", (((-1, number), line),)))
        labels: dict[object, str] = {}
        for index, item in enumerate(request.items):
            mark, text = _marked(item)
            key = pair_key(item)
            if key is not None and not is_output(item):
                labels[key] = _label(item)
            parts = json_parts(text, width=self.line_chars) if is_output(item) else []
            if parts:
                label = labels.get(key, "")
                for path, part in parts:
                    names = salient_tokens(part)
                    if names:
                        quoted = f"{mark}{_where(label, path, part)}{part}"
                        out.append(_Candidate(names, quoted, "", (((index, path), quoted),)))
                continue
            lines = [line for line in text.splitlines() if line.strip()]
            for number, line in enumerate(lines):
                names = salient_tokens(line)
                if names:
                    quoted = _clip(line, names, self.line_chars)
                    block = _with_neighbours(quoted, lines, number)
                    units = tuple(((index, n), text) for n, text in block)
                    joined = "\n".join(text for _, text in block)
                    out.append(_Candidate(names, mark + joined, mark, units))
        return out

    def _field_names(self, items: Sequence[Item]) -> list[str]:
        tools: dict[object, str] = {}
        names: list[str] = []
        for item in items:
            key = pair_key(item)
            if key is not None and not is_output(item):
                tools[key] = str(item.get("name") or "")
            elif key is not None and tools.get(key) in self.keep_fields:
                wanted = self.keep_fields[tools[key]]
                for _, part in field_parts(_item_text(item), wanted, width=self.line_chars):
                    names.extend(salient_tokens(part))
        return names

    def _weights(self, items: Sequence[Item]) -> dict[str, float]:
        """Each name's worth: 1 for the previous summary's, up to 2 for the newest used."""
        weights: dict[str, float] = {}
        total = len(items) + 1
        for index, item in enumerate(items, start=1):
            for name in used_names([item]):
                weights[name] = max(weights.get(name, 0.0), 1.0 + index / total)
        return weights

    def _pick(
        self,
        candidates: list[_Candidate],
        previous: int,
        weights: dict[str, float],
        max_tokens: int,
    ) -> set[int]:
        """Greedy cover: lines by the weight of their new names per character (lazy heap).

        The first ``previous`` candidates are the previous summary's lines; their names
        count at least 1 (the agent used them before, or they would not be there). With
        ``merge_overlaps`` a line already quoted (a neighbour of another) costs nothing.
        """
        shown: set[object] = set()

        def size(index: int) -> int:
            candidate = candidates[index]
            if not self.merge_overlaps:
                return len(candidate.text)
            new = [len(text) + 1 for key, text in candidate.units if key not in shown]
            return sum(new) + len(candidate.mark) if new else 0

        def gain(index: int, covered: set[str]) -> float:
            names = candidates[index].names
            floor = 1.0 if index < previous else 0.0
            worth = sum(max(weights.get(n, 0.0), floor) for n in set(names) - covered)
            return worth / (size(index) + 1)

        covered: set[str] = set()
        heap = [(-gain(i, covered), i) for i in range(len(candidates))]
        heapq.heapify(heap)
        chosen: set[int] = set()
        budget = max_tokens * _CHARS_PER_TOKEN
        used = 0.0
        while heap:
            negative, index = heapq.heappop(heap)
            fresh = gain(index, covered)
            if fresh <= 0:
                continue
            if fresh < -negative - 1e-12:  # stale: push back with its current gain
                heapq.heappush(heap, (-fresh, index))
                continue
            cost = size(index) + 1
            if used + cost > budget:
                continue
            chosen.add(index)
            used += cost
            covered.update(candidates[index].names)
            shown.update(key for key, _ in candidates[index].units)
        while chosen and self._tokens(candidates, chosen) > max_tokens:
            chosen.discard(min(chosen))  # the estimate was short: drop the oldest lines
        return chosen

    def _tokens(self, candidates: list[_Candidate], chosen: set[int]) -> int:
        text = "\n".join(self._quotes(candidates, chosen))
        return self.counter.count_item({"content": text})

    def _quotes(self, candidates: list[_Candidate], chosen: set[int]) -> list[str]:
        """The chosen quotes in order; with ``merge_overlaps`` the ones that share or
        touch lines of one item are one quote, each line once (the longest clip of it)."""
        if not self.merge_overlaps:
            return [candidates[i].text for i in sorted(chosen)]
        blocks: list[tuple[str, dict[object, str]]] = []  # mark, lines by (item, number)
        for i in sorted(chosen):
            candidate = candidates[i]
            lines = dict(candidate.units)
            if blocks and candidate.mark and _touches(blocks[-1][1], lines):
                merged = blocks[-1][1]
                for key, text in lines.items():
                    if len(text) > len(merged.get(key, "")):
                        merged[key] = text
                continue
            blocks.append((candidate.mark, lines) if candidate.mark else ("", {0: candidate.text}))
        return [
            mark + "\n".join(lines[key] for key in sorted(lines, key=_order))
            for mark, lines in blocks
        ]

    def __repr__(self) -> str:
        fields = f", keep_fields={dict(self.keep_fields)!r}" if self.keep_fields else ""
        merge = ", merge_overlaps=True" if self.merge_overlaps else ""
        lead = f", lead={self.lead!r}" if self.lead != LEAD else ""
        return f"QuotingSummarizer(line_chars={self.line_chars}{fields}{merge}{lead})"


class _Candidate(NamedTuple):
    names: list[str]
    text: str  # as quoted alone, with its mark
    mark: str  # of a quote of lines that can merge with its neighbours ("" for the others)
    units: tuple[tuple[Any, str], ...]  # ((item, line number) or part, its text) in order


def _order(key: object) -> tuple[int, int]:
    return (key[0], key[1]) if isinstance(key, tuple) else (0, 0)


def _touches(block: dict[object, str], lines: dict[object, str]) -> bool:
    """Whether two quotes of lines share a line or stand side by side in one item."""
    keys = [k for k in (*block, *lines) if isinstance(k, tuple)]
    if len(keys) != len(block) + len(lines) or len({k[0] for k in keys}) != 1:
        return False
    numbers = sorted({int(k[1]) for k in keys})
    return bool(numbers[-1] - numbers[0] + 1 == len(numbers))


def _with_neighbours(quoted: str, lines: Sequence[str], number: int) -> list[tuple[int, str]]:
    """A short line with the lines after it (or before, at the end) up to ``_SHORT`` chars.

    A name on a line of its own ("src/a.py" in a listing) means little without the
    lines around it; they are quoted with it, verbatim, on their own lines. Each line
    with its number, in order.
    """
    block = [(number, quoted)]
    length = len(quoted)
    after = number + 1
    while length < _SHORT and after < len(lines):
        line = _clip(lines[after], [], _SHORT)
        block.append((after, line))
        length += len(line) + 1
        after += 1
    before = number - 1
    while length < _SHORT and before >= 0:
        line = _clip(lines[before], [], _SHORT)
        block.insert(0, (before, line))
        length += len(line) + 1
        before -= 1
    return block


def _any_text(item: Item) -> str:
    return (
        agent_text(item) if pair_key(item) is not None and not is_output(item) else _item_text(item)
    )


def _item_text(item: Item) -> str:
    if "content" in item:
        return message_text(item.get("content"))
    value = item.get("output", "")
    return value if isinstance(value, str) else message_text(value)


def _marked(item: Item) -> tuple[str, str]:
    """How a line of ``item`` is marked in the summary, and the item's text."""
    if item_type(item) == "message":
        role = item.get("role")
        mark = "> " if role == "assistant" else f"{str(role or 'message').upper()}: "
        return mark, message_text(item.get("content"))
    if pair_key(item) is not None and not is_output(item):
        return "$ ", agent_text(item)
    return "  | ", _item_text(item)


def _label(call: Item) -> str:
    """A short name for a call's answer: the tool and its first argument's value."""
    name = str(call.get("name") or item_type(call))
    first = agent_text(call).split("\n", 1)[0]
    return f"{name} {first[:40]}".strip()


def _where(label: str, path: str, part: str) -> str:
    """What a JSON part belongs to: ``get_reservation_details 4WQ150 flights[0]: ``."""
    parent = path.rpartition(".")[0] if part.startswith('"') else path  # a member names itself
    where = " ".join(s for s in (label, parent) if s)
    return f"{where}: " if where else ""
