"""Distillation: candidate memories from a session's items, rule-based or by an LLM.

    >>> from memstack.memory.distill import RuleExtractor
    >>> items = [{"role": "user", "content": "Hi! My name is Ana and I prefer short answers."}]
    >>> [(c.key, c.text) for c in RuleExtractor().extract_sync(items)]
    [('name', "The user's name is Ana"), (None, 'The user prefers short answers')]

``Distiller.after_run(session)`` runs an extractor over the items added since its last
run for that session (debounced per session) and stores what it finds. It is meant to
run after a run: call it yourself, or pass ``DistillationHooks`` to ``Runner.run``. It
never runs inside ``get_items``. A failed or unparsable extraction stores nothing and
says so (``DistillReport.error``; ``DistillationError`` from the extractor itself).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agents.lifecycle import RunHooks
from agents.memory import Session

from memstack.backends.capabilities import READ_ALL
from memstack.base import full_history_layer
from memstack.errors import ConfigurationError, DistillationError, MemstackError
from memstack.history import is_user_message
from memstack.memory.models import KINDS, SOURCES, Provenance
from memstack.memory.person import third_person
from memstack.memory.store import MemoryStore
from memstack.model_client import chat_client

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = [
    "PROMPT_VERSION",
    "Candidate",
    "DistillReport",
    "DistillationHooks",
    "Distiller",
    "Extractor",
    "LLMExtractor",
    "RuleExtractor",
]

logger = logging.getLogger("memstack.memory")

Item = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A memory an extractor proposes; ``item`` is its index in the items it was given."""

    text: str
    kind: str = "fact"
    source: str = "explicit"
    key: str | None = None
    confidence: float | None = None
    item: int | None = None


@runtime_checkable
class Extractor(Protocol):
    async def extract(self, items: Sequence[Item]) -> list[Candidate]: ...


def _text(item: Item) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return ""


# -- rule-based ----------------------------------------------------------------------------
_END = r"(?=[.!?;\n]|,? but |,? and (?:I|my)\b|$)"
# The colon form is a request ("Note: …"), not a noun's or a subject's ("a note: …", "I
# remember: …"): those words may not come just before it.
_NO_SUBJECT = r"(?<!\ba )(?<!\bthe )(?<!\bmy )(?<!\byour )(?<!\bI )(?<!\bwe )(?<!\byou )"
# Asking whether the assistant remembers ("Do you remember that song?") is no request.
_NOT_ASKED = r"(?<!\bdo you )(?<!\bdid you )(?<!\bdon't you )(?<!\bdidn't you )"
_RULES: tuple[tuple[re.Pattern[str], str, str, str | None, str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), kind, source, key, template)
    for pattern, kind, source, key, template in (
        (
            r"\b(?:please\s+)?"
            + _NOT_ASKED
            + r"(?:(?:remember|note|don't forget)\s+|"
            + _NO_SUBJECT
            + r"(?:remember|note|don't forget)\s*:\s*)(?:that\s+)?(?P<x>.+?)"
            + _END,
            "note",
            "explicit",
            None,
            "{x}",
        ),
        (
            r"\bmy name is (?P<x>[\w' -]+?)" + _END,
            "fact",
            "explicit",
            "name",
            "The user's name is {x}",
        ),
        (
            r"\bcall me (?P<x>[\w' -]+?)" + _END,
            "preference",
            "explicit",
            "name",
            "The user wants to be called {x}",
        ),
        (
            r"\bmy (?P<x>favou?rite [\w' -]+? (?:is|are) .+?)" + _END,
            "preference",
            "explicit",
            None,
            "The user's {x}",
        ),
        (
            r"\bI (?:live in|am from|'m from) (?P<x>[\w' ,-]+?)" + _END,
            "fact",
            "explicit",
            "home",
            "The user lives in {x}",
        ),
        (
            r"\bI work (?P<x>(?:as|at|for) [\w' ,-]+?)" + _END,
            "fact",
            "explicit",
            "work",
            "The user works {x}",
        ),
        (
            r"\bI(?: really)? (?P<v>prefer|like|love|enjoy) (?P<x>.+?)" + _END,
            "preference",
            "explicit",
            None,
            "The user {v}s {x}",
        ),
        (
            r"\bI (?:don't|do not|can't stand|hate|dislike) (?:like )?(?P<x>.+?)" + _END,
            "preference",
            "explicit",
            None,
            "The user dislikes {x}",
        ),
        (
            r"\bI(?: am|'m) allergic to (?P<x>.+?)" + _END,
            "fact",
            "explicit",
            None,
            "The user is allergic to {x}",
        ),
        (
            r"^(?:no|nope|wrong|that's (?:wrong|not right|incorrect))[,.!]+\s*(?P<x>.+?)" + _END,
            "note",
            "feedback",
            None,
            "Correction from the user: {x}",
        ),
        (
            r"\bactually,?\s+(?P<x>.+?)" + _END,
            "note",
            "feedback",
            None,
            "Correction from the user: {x}",
        ),
    )
)


class RuleExtractor:
    """Offline extraction from user messages: names, places, preferences, "remember that…"."""

    def extract_sync(self, items: Sequence[Item]) -> list[Candidate]:
        found: list[Candidate] = []
        seen: set[str] = set()
        for index, item in enumerate(items):
            if not is_user_message(item):
                continue
            text = _text(item)
            covered: list[tuple[int, int]] = []
            for pattern, kind, source, key, template in _RULES:
                for match in pattern.finditer(text):
                    span = match.span("x")
                    if any(a <= span[0] < b for a, b in covered):
                        continue
                    value = match.group("x").strip(" ,")
                    if len(value) < 2:
                        continue
                    # The user's own words, restated: "I'm vegetarian" → "The user is …".
                    value = third_person(value, capitalise=template.startswith("{x}"))
                    fields = {"x": value, "v": (match.groupdict().get("v") or "").lower()}
                    memory = template.format(**fields)
                    if memory.casefold() not in seen:
                        seen.add(memory.casefold())
                        covered.append(span)
                        found.append(Candidate(memory, kind, source, key, None, index))
        return found

    async def extract(self, items: Sequence[Item]) -> list[Candidate]:
        return self.extract_sync(items)


# -- LLM -----------------------------------------------------------------------------------
PROMPT_VERSION = "memstack-distill-1"
_INSTRUCTIONS = """\
You extract long-term memories about the USER from a conversation transcript.
Keep only what will still matter in later conversations: stable facts about the user,
preferences, procedures they want followed, and corrections they made. Skip small talk,
one-off requests and anything about the assistant. Write each memory as one short
self-contained sentence in the third person ("The user ..."). Use source "explicit" when
the user said it directly, "inferred" when you concluded it, "feedback" for corrections.
Give a short snake_case key for facts that have one current value (name, home_city, ...),
else null. Answer with JSON only. Prompt version: memstack-distill-1."""

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["memories"],
    "properties": {
        "memories": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["text", "kind", "source", "key", "confidence", "item"],
                "properties": {
                    "text": {"type": "string"},
                    "kind": {"type": "string", "enum": list(KINDS)},
                    "source": {"type": "string", "enum": ["explicit", "inferred", "feedback"]},
                    "key": {"type": ["string", "null"]},
                    "confidence": {"type": "number"},
                    "item": {"type": ["integer", "null"]},
                },
            },
        }
    },
}


def _transcript(items: Sequence[Item]) -> str:
    lines = []
    for index, item in enumerate(items):
        role = item.get("role")
        if role in ("user", "assistant") and (text := _text(item).strip()):
            lines.append(f"[{index}] {role}: {text}")
    return "\n".join(lines)


def parse_candidates(content: str, *, items: int) -> list[Candidate]:
    """Candidates from the model's JSON answer; ``DistillationError`` when it does not fit."""
    try:
        data = json.loads(content)
        entries = data["memories"]
        if not isinstance(entries, list):
            raise TypeError("memories is not a list")
        found = []
        for entry in entries:
            kind, source = entry["kind"], entry["source"]
            if kind not in KINDS or source not in SOURCES:
                raise ValueError(f"unknown kind or source: {kind!r}, {source!r}")
            text = entry["text"]
            if not isinstance(text, str) or not text.strip():
                raise ValueError("empty memory text")
            confidence = entry.get("confidence")
            if confidence is not None:
                confidence = min(1.0, max(0.0, float(confidence)))
            index = entry.get("item")
            if not (isinstance(index, int) and 0 <= index < items):
                index = None
            key = entry.get("key") or None
            found.append(Candidate(text.strip(), kind, source, key, confidence, index))
        return found
    except (ValueError, TypeError, KeyError) as exc:
        raise DistillationError(
            f"unusable extraction answer ({type(exc).__name__}: {exc}); nothing stored",
            layer="LLMExtractor",
        ) from exc


class LLMExtractor:
    """Extraction by any OpenAI-compatible chat endpoint, with a JSON-schema answer."""

    def __init__(
        self,
        *,
        model: str,
        client: AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        structured: bool = True,
        max_retries: int = 2,
    ) -> None:
        # The process's client for this endpoint, unless you pass one (memstack.resources).
        self._client = chat_client(
            model=model,
            client=client,
            base_url=base_url,
            api_key=api_key,
            max_retries=max_retries,
            layer="LLMExtractor",
        )
        self.model = model
        self.structured = structured
        self.prompt_version = PROMPT_VERSION

    @property
    def client(self) -> AsyncOpenAI:
        """The client calls go through now: yours, or the process's on the running loop."""
        return self._client()

    async def extract(self, items: Sequence[Item]) -> list[Candidate]:
        transcript = _transcript(items)
        if not transcript:
            return []
        options: dict[str, Any] = {}
        if self.structured:
            options["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "memories", "strict": True, "schema": _SCHEMA},
            }
        try:
            response: Any = await self.client.chat.completions.create(
                model=self.model,
                messages=[
                    {"role": "system", "content": _INSTRUCTIONS},
                    {"role": "user", "content": transcript},
                ],
                temperature=0.0,
                **options,
            )
        except Exception as exc:  # the client's errors, network or HTTP
            raise DistillationError(
                f"{self.model}: extraction call failed: {type(exc).__name__}: {exc}",
                layer="LLMExtractor",
            ) from exc
        choices = getattr(response, "choices", None)
        content = (
            getattr(getattr(choices[0], "message", None), "content", None) if choices else None
        )
        if not isinstance(content, str):
            raise DistillationError(
                f"{self.model}: the response has no text content; nothing stored",
                layer="LLMExtractor",
            )
        return parse_candidates(content, items=len(items))


# -- running after a run -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DistillReport:
    """What one ``after_run`` did: items read, memories stored, or why it did nothing."""

    session_id: str
    items: int = 0
    stored: tuple[str, ...] = ()
    skipped: str | None = None
    error: str | None = None


class Distiller:
    """Turns new session items into memories of ``scope``, at most once per ``debounce``."""

    def __init__(
        self,
        store: MemoryStore,
        scope: str,
        extractor: Extractor | None = None,
        *,
        debounce_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        only_user_turns: bool = True,
    ) -> None:
        if debounce_seconds < 0:
            raise ConfigurationError("debounce_seconds must be >= 0", layer="Distiller")
        self.store = store
        self.scope = scope
        self.extractor: Extractor = extractor or RuleExtractor()
        self.debounce_seconds = debounce_seconds
        self.clock = clock
        self.only_user_turns = only_user_turns
        self._cursor: dict[str, int] = {}
        self._last: dict[str, float] = {}

    async def after_run(self, session: Session, *, force: bool = False) -> DistillReport:
        """Distil what ``session`` gained since the last call; never raises for the model."""
        session_id = session.session_id
        now = self.clock()
        last = self._last.get(session_id)
        if not force and last is not None and now - last < self.debounce_seconds:
            return DistillReport(session_id, skipped="debounced")
        items = await full_history_layer(session).get_items(READ_ALL)
        start = min(self._cursor.get(session_id, 0), len(items))
        new = items[start:]
        if self.only_user_turns and not any(is_user_message(i) for i in new):
            return DistillReport(session_id, skipped="no new user message")
        try:
            candidates = await self.extractor.extract(new)
        except MemstackError as exc:
            logger.warning("distillation of session %r stored nothing: %s", session_id, exc)
            return DistillReport(session_id, len(new), error=str(exc))
        memories = [
            self.store.new_memory(
                self.scope,
                c.text,
                kind=c.kind,
                source=c.source,
                key=c.key,
                confidence=c.confidence,
                provenance=Provenance(
                    session_id, str(start + c.item) if c.item is not None else None
                ),
            )
            for c in candidates
        ]
        stored = await self.store.remember_many(memories, actor="distiller") if memories else []
        self._cursor[session_id] = len(items)
        self._last[session_id] = now
        return DistillReport(session_id, len(new), tuple(m.id for m in stored))


class DistillationHooks(RunHooks[Any]):
    """Run hooks that distil ``session`` when the run's agent finishes."""

    def __init__(self, distiller: Distiller, session: Session) -> None:
        self.distiller = distiller
        self.session = session
        self.reports: list[DistillReport] = []

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        self.reports.append(await self.distiller.after_run(self.session))
