"""A deterministic, offline summariser: an extract of what was asked, called and answered.

    >>> import asyncio
    >>> from memstack.compaction import ExtractiveSummarizer, Summarize
    >>> strategy = Summarize(ExtractiveSummarizer(), max_tokens=200)
    >>> [summary] = asyncio.run(strategy.compact([], [
    ...     {"role": "user", "content": "Weather in Oslo?"},
    ...     {"type": "function_call", "call_id": "c1", "name": "weather",
    ...      "arguments": '{"city": "Oslo"}'},
    ...     {"type": "function_call_output", "call_id": "c1", "output": "7°C, rain"},
    ... ]))
    >>> print(summary["content"].splitlines()[-3:])
    ['- USER: Weather in Oslo?', '- CALL weather({"city": "Oslo"})', '  → 7°C, rain']

For tests, offline use and as a fallback: no model, no network, same input → same text.
Each covered item becomes one short line; when the whole log (previous summary first)
exceeds ``max_tokens``, its oldest lines go first, so the newest context survives. With
``names=N``, one more line lists up to N characters of the covered items' salient tokens
(paths, code names, numbers: ``memstack.compaction.salient``) that the clipped lines
lost, newest first — what an agent most often needs again verbatim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memstack.compaction.render import message_text
from memstack.compaction.salient import occurs, salient_tokens
from memstack.compaction.summarizer import SummaryRequest
from memstack.errors import ConfigurationError
from memstack.history import is_output, item_type, pair_key
from memstack.tokens import ItemCounter, default_counter

__all__ = ["ExtractiveSummarizer"]

Item = Mapping[str, Any]


def _line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class ExtractiveSummarizer:
    """Summarises without a model: one clipped line per message, call and output."""

    def __init__(
        self,
        *,
        counter: ItemCounter | None = None,
        message_chars: int = 300,
        call_chars: int = 200,
        output_chars: int = 120,
        names: int = 0,
    ) -> None:
        for name, value in (
            ("message_chars", message_chars),
            ("call_chars", call_chars),
            ("output_chars", output_chars),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 16:
                raise ConfigurationError(
                    f"{name} must be an int >= 16, got {value!r}", layer=type(self).__name__
                )
        self.counter: ItemCounter = counter if counter is not None else default_counter()
        self.message_chars = message_chars
        self.call_chars = call_chars
        self.output_chars = output_chars
        if isinstance(names, bool) or not isinstance(names, int) or names < 0:
            raise ConfigurationError(
                f"names must be an int >= 0, got {names!r}", layer=type(self).__name__
            )
        self.names = names

    async def summarize(self, request: SummaryRequest) -> str:
        lines = [line for line in (request.previous or "").splitlines() if line.strip()]
        for item in request.items:
            line = self._describe(item)
            if line:
                lines.append(line)
        if self.names:
            names = self._names(request.items, "\n".join(lines))
            if names:
                lines.append(f"- NAMES: {names}")
        # Drop the oldest lines until the text fits (binary search on how many to drop).
        low, high = 0, len(lines)
        while low < high:
            drop = (low + high) // 2
            if self._tokens("\n".join(lines[drop:])) <= request.max_tokens:
                high = drop
            else:
                low = drop + 1
        kept = lines[low:]
        if not kept and lines:  # a single line over the cap: clip it
            kept = [_line(lines[-1], max(16, request.max_tokens))]
        return "\n".join(kept) or "- (nothing to report)"

    def _names(self, items: Sequence[Item], written: str) -> str:
        """Salient tokens of ``items`` not in ``written``, newest item first, within budget."""
        chosen: dict[str, None] = {}
        used = 0
        for item in reversed(items):
            for token in salient_tokens(_full_text(item)):
                if token in chosen or used + len(token) + 1 > self.names:
                    continue
                if not occurs(token, written):
                    chosen[token] = None
                    used += len(token) + 1
        return " ".join(chosen)

    def _tokens(self, text: str) -> int:
        return self.counter.count_item({"content": text})

    def _describe(self, item: Item) -> str:
        kind = item_type(item)
        if kind == "message":
            role = str(item.get("role") or "message").upper()
            return f"- {role}: {_line(message_text(item.get('content')), self.message_chars)}"
        key = pair_key(item)
        if key is not None and not is_output(item):
            args = item.get("arguments", item.get("input", ""))
            args = args if isinstance(args, str) else str(args)
            name = item.get("name") or kind
            return f"- CALL {_line(f'{name}({args})', self.call_chars)}"
        if is_output(item):
            output = item.get("output", "")
            text = output if isinstance(output, str) else message_text(output)
            return f"  → {_line(text, self.output_chars)}"
        return ""

    def __repr__(self) -> str:
        return (
            f"ExtractiveSummarizer(names={self.names})" if self.names else "ExtractiveSummarizer()"
        )


def _full_text(item: Item) -> str:
    if "content" in item:
        return message_text(item.get("content"))
    value = item.get("output", item.get("arguments", item.get("input", "")))
    return value if isinstance(value, str) else message_text(value)
