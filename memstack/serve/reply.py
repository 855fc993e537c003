"""How the server answers a turn: an echo (no model), or an agent run through the SDK.

reply = Echo()                                   # offline, deterministic
reply = AgentReply(model="gpt-4.1-mini")         # OPENAI_API_KEY / OPENAI_BASE_URL
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from agents.memory import Session

__all__ = ["AgentReply", "Echo", "Reply"]

INSTRUCTIONS = "You are a helpful assistant. Answer in one or two sentences."


class Reply(Protocol):
    """Answers ``message`` in ``session``; ``history`` is what ``get_items()`` returned."""

    reads_and_writes: bool  # True: the reply stores the turn itself (an SDK run does)

    async def answer(self, session: Session, history: Sequence[Any], message: str) -> str: ...

    async def aclose(self) -> None: ...


class Echo:
    """Repeats the message: the server's I/O without a model call."""

    reads_and_writes = False

    async def answer(self, session: Session, history: Sequence[Any], message: str) -> str:
        return f"You said: {message}"

    async def aclose(self) -> None:
        return None


class AgentReply:
    """``Runner.run`` over the request's stack, with the stack's view on every model call."""

    reads_and_writes = True

    def __init__(self, *, model: str, instructions: str = INSTRUCTIONS) -> None:
        from agents import Agent, OpenAIChatCompletionsModel
        from openai import AsyncOpenAI

        # One client for the process: its connection pool outlives every request.
        self.client = AsyncOpenAI()
        self.agent = Agent(
            name="assistant",
            instructions=instructions,
            model=OpenAIChatCompletionsModel(model, openai_client=self.client),
        )

    async def answer(self, session: Session, history: Sequence[Any], message: str) -> str:
        from agents import RunConfig, Runner

        from memstack.model_input import input_filter

        config = RunConfig(call_model_input_filter=input_filter(session), tracing_disabled=True)
        result = await Runner.run(self.agent, message, session=session, run_config=config)
        return str(result.final_output)

    async def aclose(self) -> None:
        await self.client.close()
