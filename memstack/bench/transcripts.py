"""Transcripts as the benchmark replays them: conversations split into model calls.

    >>> from memstack.bench.transcripts import model_calls
    >>> items = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    >>> [(c.start, c.stop) for c in model_calls(items)]
    [(1, 2)]

A model call is a run of consecutive model-made items (assistant messages, tool calls,
reasoning) with no input item between them: one response may hold a message and a call.
Its input is everything before ``start``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstack.history import CALL_TO_OUTPUT, item_type

__all__ = [
    "DATA_DIR",
    "Conversation",
    "ModelCall",
    "default_transcripts",
    "load_conversations",
    "model_calls",
]

_MODEL_MADE = frozenset({*CALL_TO_OUTPUT, "reasoning"}) - {"mcp_approval_request"}


@dataclass(frozen=True)
class Conversation:
    id: str
    source: str
    items: list[dict[str, Any]]
    tools: list[dict[str, Any]]

    @property
    def system_prompt(self) -> str:
        head = self.items[0] if self.items else {}
        return str(head.get("content", "")) if head.get("role") == "system" else ""

    @property
    def history(self) -> list[dict[str, Any]]:
        """The items a session stores: everything but the leading system prompt."""
        return self.items[1:] if self.system_prompt else list(self.items)


@dataclass(frozen=True)
class ModelCall:
    """Items ``[start, stop)`` of a history were produced by one model call."""

    start: int
    stop: int


def _model_made(item: dict[str, Any]) -> bool:
    kind = item_type(item)
    return kind in _MODEL_MADE or (kind == "message" and item.get("role") == "assistant")


def model_calls(items: list[dict[str, Any]]) -> list[ModelCall]:
    calls: list[ModelCall] = []
    start: int | None = None
    for index, item in enumerate(items):
        if _model_made(item):
            start = index if start is None else start
        elif start is not None:
            calls.append(ModelCall(start, index))
            start = None
    if start is not None:
        calls.append(ModelCall(start, len(items)))
    return calls


#: ``../shared/data`` beside the repository, where the team keeps them; MEMSTACK_DATA overrides.
DATA_DIR = Path(
    os.environ.get("MEMSTACK_DATA", Path(__file__).resolve().parents[3] / "shared" / "data")
)


def default_transcripts() -> list[Path]:
    """The agent transcripts in ``DATA_DIR``: ``*.jsonl`` files of ``{"id", "items", …}``.

    The same folder holds data of other shapes (LoCoMo's memory conversations); a file is
    a transcript when its first record has ``items``.
    """
    return [path for path in sorted(DATA_DIR.glob("*.jsonl")) if _is_transcript(path)]


def _is_transcript(path: Path) -> bool:
    with path.open(encoding="utf-8") as lines:
        first = lines.readline()
    try:
        record = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(record, dict) and isinstance(record.get("items"), list)


def load_conversations(path: Path, *, limit: int | None = None) -> Iterator[Conversation]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines):
            if limit is not None and number >= limit:
                return
            data = json.loads(line)
            yield Conversation(
                id=str(data["id"]),
                source=path.stem,
                items=list(data["items"]),
                tools=list(data.get("tools") or []),
            )
