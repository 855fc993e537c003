"""Compaction strategies: what replaces the covered items — a summary, or OpenAI's compaction.

    from memstack.compaction import OpenAIChatSummarizer, ResponsesCompact, Summarize

    Summarize(OpenAIChatSummarizer(model="gpt-4.1-mini"), max_tokens=800)   # any model
    ResponsesCompact(model="gpt-4.1")                     # OpenAI Responses models only

A strategy is a small immutable policy with one coroutine, ``compact(previous, covered)``:
the items that stood for older history (a previous summary) and the raw items now being
covered in, the items to show instead out. Every failure — HTTP error, timeout, empty or
malformed answer, an answer that is an error message — raises ``SummarizerError``; the
layer then stores nothing.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar, runtime_checkable

from memstack.compaction.render import DEFAULT_INSTRUCTIONS, message_text, render_transcript
from memstack.compaction.summarizer import Summarizer, SummaryRequest
from memstack.durations import Seconds, seconds_of
from memstack.errors import ConfigurationError, SummarizerError
from memstack.model_client import chat_client

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["SUMMARY_HEADER", "Compactor", "ResponsesCompact", "Summarize"]

Item = Mapping[str, Any]
T = TypeVar("T")

SUMMARY_HEADER = "Summary of the earlier conversation (older messages were compacted):"
# A reply that is a failure report, not a summary: "Error: …", "Exception: …",
# "Traceback (most recent call last):", "Internal Server Error" and the like, at the very
# start. A summary may of course quote errors further in ("→ Error: seat taken").
_ERROR_TEXT = re.compile(
    r"\A\s*(?:error|exception|traceback|internal server error|bad gateway|service unavailable"
    r"|gateway time-?out|an error (?:has )?occurred|request failed)\b[^\n]{0,60}?[:!(]",
    re.IGNORECASE,
)


@runtime_checkable
class Compactor(Protocol):
    """Produces the items that stand for ``previous`` plus ``covered``.

    ``kept``: what the model will still see verbatim after them (the uncovered tail, as
    masked), so a summary need not repeat it.
    """

    method: Literal["summary", "responses"]

    async def compact(
        self, previous: Sequence[Item], covered: Sequence[Item], *, kept: Sequence[Item] = ()
    ) -> list[dict[str, Any]]: ...


def _positive(owner: str, name: str, value: object, *, real: bool = False) -> None:
    kinds = (int, float) if real else (int,)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        kind = "number" if real else "int"
        raise ConfigurationError(f"{name} must be a {kind} > 0, got {value!r}", layer=owner)


def _timeout_in_seconds(strategy: Summarize | ResponsesCompact) -> None:
    """Check ``timeout`` and keep it as a number: a ``timedelta`` (recipes' ``"2m"``) too."""
    if isinstance(strategy.timeout, timedelta):
        object.__setattr__(strategy, "timeout", strategy.timeout.total_seconds())
    _positive(type(strategy).__name__, "timeout", strategy.timeout, real=True)


async def _guarded(call: Awaitable[T], seconds: float, what: str) -> T:
    """Await ``call`` within ``seconds``; every failure becomes ``SummarizerError``."""
    try:
        async with asyncio.timeout(seconds):
            return await call
    except SummarizerError:
        raise
    except TimeoutError as exc:
        raise SummarizerError(f"{what} timed out after {seconds:g}s") from exc
    except Exception as exc:
        raise SummarizerError(f"{what} failed: {type(exc).__name__}: {exc}") from exc


@dataclass(frozen=True)
class Summarize:
    """Summarise covered items with ``summarizer`` into one pinned message."""

    summarizer: Summarizer
    max_tokens: int = 1000
    #: Longest tool output shown to the summariser; longer ones are clipped in the middle.
    max_output_chars: int | None = 4000
    timeout: Seconds = 120.0
    role: Literal["developer", "system"] = "developer"
    instructions: str = DEFAULT_INSTRUCTIONS
    header: str = SUMMARY_HEADER

    method: ClassVar[Literal["summary", "responses"]] = "summary"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        if not isinstance(self.summarizer, Summarizer):
            raise ConfigurationError(
                "summarizer must have an async summarize(request) method, e.g. "
                "OpenAIChatSummarizer, ModelSummarizer or ExtractiveSummarizer",
                layer=owner,
            )
        _positive(owner, "max_tokens", self.max_tokens)
        _timeout_in_seconds(self)
        if self.max_output_chars is not None:
            _positive(owner, "max_output_chars", self.max_output_chars)
        if self.role not in ("developer", "system"):
            raise ConfigurationError(
                f"role must be 'developer' or 'system' (a pinned role), got {self.role!r}",
                layer=owner,
            )
        for name in ("instructions", "header"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise ConfigurationError(f"{name} must be a non-empty string", layer=owner)

    def request(
        self, previous: Sequence[Item], covered: Sequence[Item], *, kept: Sequence[Item] = ()
    ) -> SummaryRequest:
        """What the summariser will be asked (public so tests and tools can inspect it)."""
        return SummaryRequest(
            instructions=self.instructions,
            previous=self.previous_text(previous),
            items=list(covered),
            transcript=render_transcript(covered, max_output_chars=self.max_output_chars),
            max_tokens=self.max_tokens,
            kept=list(kept),
        )

    def previous_text(self, previous: Sequence[Item]) -> str | None:
        texts: list[str] = []
        for item in previous:
            text = message_text(item.get("content")) if "content" in item else ""
            if item.get("role") == self.role and text.startswith(self.header):
                texts.append(text[len(self.header) :].strip())
            else:
                texts.append(render_transcript([item], max_output_chars=self.max_output_chars))
        return "\n\n".join(t for t in texts if t) or None

    async def compact(
        self, previous: Sequence[Item], covered: Sequence[Item], *, kept: Sequence[Item] = ()
    ) -> list[dict[str, Any]]:
        request = self.request(previous, covered, kept=kept)
        text = await _guarded(
            self.summarizer.summarize(request), seconds_of(self.timeout), f"{self.summarizer!r}"
        )
        if not isinstance(text, str) or not text.strip():
            raise SummarizerError(f"{self.summarizer!r} returned an empty summary")
        if _ERROR_TEXT.match(text):
            raise SummarizerError(
                f"{self.summarizer!r} returned an error message instead of a summary: "
                f"{text.strip()[:200]!r}"
            )
        return [{"role": self.role, "content": f"{self.header}\n\n{text.strip()}"}]

    def __repr__(self) -> str:
        return f"Summarize({self.summarizer!r}, max_tokens={self.max_tokens})"


@dataclass(frozen=True)
class ResponsesCompact:
    """Delegate to OpenAI's ``responses.compact`` (OpenAI Responses models only)."""

    model: str
    client: AsyncOpenAI | None = None
    timeout: Seconds = 120.0
    instructions: str | None = None

    method: ClassVar[Literal["summary", "responses"]] = "responses"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        if not isinstance(self.model, str) or not self.model:
            raise ConfigurationError("model must be a non-empty OpenAI model name", layer=owner)
        _timeout_in_seconds(self)
        # Without client=, the process's client for the environment's endpoint (one per
        # loop, memstack.resources): strategies are built with every stack.
        object.__setattr__(
            self, "_clients", chat_client(model=self.model, client=self.client, layer=owner)
        )

    async def compact(
        self, previous: Sequence[Item], covered: Sequence[Item], *, kept: Sequence[Item] = ()
    ) -> list[dict[str, Any]]:
        client: AsyncOpenAI = self._clients()  # type: ignore[attr-defined]
        options: dict[str, Any] = {"model": self.model, "input": [*previous, *covered]}
        if self.instructions is not None:
            options["instructions"] = self.instructions
        what = f"responses.compact({self.model})"
        response = await _guarded(
            client.responses.compact(**options), seconds_of(self.timeout), what
        )
        return _compacted_items(getattr(response, "output", None), what)

    def __repr__(self) -> str:
        return f"ResponsesCompact(model={self.model!r})"


def _compacted_items(output: object, what: str) -> list[dict[str, Any]]:
    """Replay-safe input items from a compaction's output; exactly one compaction item."""
    if not isinstance(output, list) or not output:
        raise SummarizerError(f"{what} returned no output items")
    items: list[dict[str, Any]] = []
    for entry in output:
        dump = getattr(entry, "model_dump", None)
        item = dump(exclude_unset=True, warnings=False) if callable(dump) else entry
        if not isinstance(item, dict):
            raise SummarizerError(f"{what} returned an output item that is not an object")
        if item.get("type") == "compaction":
            if not isinstance(item.get("encrypted_content"), str) or not item["encrypted_content"]:
                raise SummarizerError(f"{what} returned a compaction item without content")
            items.append({k: item[k] for k in ("type", "id", "encrypted_content") if k in item})
        elif item.get("role") == "user":
            items.append({"type": "message", "role": "user", "content": item.get("content")})
        else:
            # Output-only ids would reference reasoning items that are no longer sent.
            items.append({k: v for k, v in item.items() if k not in ("id", "status")})
    if sum(item.get("type") == "compaction" for item in items) != 1:
        raise SummarizerError(f"{what} returned no single compaction item")
    return items
