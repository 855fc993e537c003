"""A scripted SDK ``Model``: the real ``Runner`` runs offline, replaying given replies.

    >>> from memstack.testing import ScriptedModel, ToolCall
    >>> model = ScriptedModel(["Hi!", ToolCall("get_weather", {"city": "Oslo"}), "Rainy."])

Each model call consumes one reply: a string is an assistant message, a ``ToolCall`` a
function call, a list several output items at once. ``model.inputs`` records what the
model was sent on every call, which is what tests (and the demo) measure.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

__all__ = ["ScriptedModel", "ToolCall"]

_ids = itertools.count(1)


@dataclass(frozen=True)
class ToolCall:
    """A function call the scripted model will emit."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    call_id: str | None = None


Reply = str | ToolCall | list[str | ToolCall]
OutputItem = ResponseOutputMessage | ResponseFunctionToolCall


def _output_item(part: str | ToolCall) -> OutputItem:
    n = next(_ids)
    if isinstance(part, ToolCall):
        return ResponseFunctionToolCall(
            id=f"fc_{n}",
            type="function_call",
            call_id=part.call_id or f"call_{n}",
            name=part.name,
            arguments=json.dumps(part.arguments),
            status="completed",
        )
    return ResponseOutputMessage(
        id=f"msg_{n}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=part, annotations=[])],
    )


class ScriptedModel(Model):
    """Replays replies in order; raises ``AssertionError`` when the script runs out."""

    def __init__(self, replies: Iterable[Reply]) -> None:
        self.replies: deque[Reply] = deque(replies)
        self.inputs: list[list[TResponseInputItem]] = []

    def _next_output(self, input: str | list[TResponseInputItem]) -> list[OutputItem]:
        self.inputs.append(
            [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        )
        if not self.replies:
            raise AssertionError(f"ScriptedModel ran out of replies after {len(self.inputs) - 1}")
        reply = self.replies.popleft()
        parts = reply if isinstance(reply, list) else [reply]
        return [_output_item(part) for part in parts]

    @staticmethod
    def _usage(input: str | list[TResponseInputItem], output: list[OutputItem]) -> Usage:
        # Character counts / 4: a stand-in, the tests measure tokens with memstack.tokens.
        sent = len(json.dumps(input, default=str)) // 4
        made = sum(len(item.model_dump_json()) for item in output) // 4
        return Usage(requests=1, input_tokens=sent, output_tokens=made, total_tokens=sent + made)

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        output = self._next_output(input)
        return ModelResponse(
            output=list(output), usage=self._usage(input, output), response_id=None
        )

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        *args: Any,
        **kwargs: Any,
    ) -> AsyncIterator[TResponseStreamEvent]:
        output = self._next_output(input)
        response = Response(
            id=f"resp_{next(_ids)}",
            created_at=time.time(),
            model="scripted",
            object="response",
            output=list(output),
            parallel_tool_calls=False,
            tool_choice="auto",
            tools=[],
        )
        yield ResponseCreatedEvent(type="response.created", response=response, sequence_number=0)
        yield ResponseCompletedEvent(
            type="response.completed", response=response, sequence_number=1
        )
