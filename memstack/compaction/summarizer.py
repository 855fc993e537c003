"""Summarisers: any OpenAI-compatible chat endpoint, or an Agents SDK ``Model``.

    from memstack.compaction import OpenAIChatSummarizer, Summarize

    # OpenAI, or any server speaking chat.completions: Gemini, vLLM, Ollama, llama.cpp…
    summarizer = OpenAIChatSummarizer(
        model="gemini-2.5-flash",
        base_url="https://generativelanguage.googleapis.com/v1beta/openai/",
        api_key=os.environ["GEMINI_API_KEY"],
    )
    strategy = Summarize(summarizer, max_tokens=800)

A summariser turns a ``SummaryRequest`` into text and raises on failure; ``Summarize``
adds the timeout, checks the answer and turns every failure into ``SummarizerError``,
so a summariser never has to decide what an error looks like as a summary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from memstack.compaction.render import render_prompt
from memstack.errors import ConfigurationError, SummarizerError
from memstack.model_client import chat_client

if TYPE_CHECKING:
    from agents.model_settings import ModelSettings
    from agents.models.interface import Model
    from openai import AsyncOpenAI

__all__ = ["ModelSummarizer", "OpenAIChatSummarizer", "Summarizer", "SummaryRequest"]

Item = Mapping[str, Any]


@dataclass(frozen=True)
class SummaryRequest:
    """What to summarise: the previous summary, the new items, and their rendering."""

    instructions: str
    previous: str | None
    items: Sequence[Item]
    transcript: str
    max_tokens: int
    #: What stays verbatim after the summary (the uncovered tail as the model sees it).
    kept: Sequence[Item] = ()

    @property
    def prompt(self) -> str:
        """The user message for a chat model."""
        return render_prompt(self.previous, self.transcript)


@runtime_checkable
class Summarizer(Protocol):
    async def summarize(self, request: SummaryRequest) -> str: ...


class OpenAIChatSummarizer:
    """Summarises with ``client.chat.completions.create`` on any OpenAI-compatible endpoint."""

    def __init__(
        self,
        *,
        model: str,
        client: AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        token_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
        temperature: float | None = 0.0,
        max_retries: int = 2,
    ) -> None:
        name = type(self).__name__
        if token_param not in ("max_tokens", "max_completion_tokens"):
            raise ConfigurationError(
                "token_param must be 'max_tokens' or 'max_completion_tokens' (OpenAI "
                f"reasoning models), got {token_param!r}",
                layer=name,
            )
        # Not its own client: the process's for this endpoint (built per stack, freed with it).
        self._client = chat_client(
            model=model,
            client=client,
            base_url=base_url,
            api_key=api_key,
            max_retries=max_retries,
            layer=name,
        )
        self.model = model
        self.token_param = token_param
        self.temperature = temperature

    @property
    def client(self) -> AsyncOpenAI:
        """The client calls go through now: yours, or the process's on the running loop."""
        return self._client()

    async def summarize(self, request: SummaryRequest) -> str:
        options: dict[str, Any] = {self.token_param: request.max_tokens}
        if self.temperature is not None:
            options["temperature"] = self.temperature
        response: Any = await self.client.chat.completions.create(
            model=self.model,
            messages=[
                {"role": "system", "content": request.instructions},
                {"role": "user", "content": request.prompt},
            ],
            **options,
        )
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise SummarizerError(f"{self.model}: the response has no choices")
        message = getattr(choices[0], "message", None)
        content = getattr(message, "content", None)
        if not isinstance(content, str):
            raise SummarizerError(f"{self.model}: the response has no text content")
        return content

    def __repr__(self) -> str:
        return f"OpenAIChatSummarizer(model={self.model!r}, base_url={str(self.client.base_url)!r})"


class ModelSummarizer:
    """Summarises with an Agents SDK ``Model`` (what an ``Agent`` would use)."""

    def __init__(self, model: Model, *, model_settings: ModelSettings | None = None) -> None:
        from agents.models.interface import Model as SdkModel

        if not isinstance(model, SdkModel):
            raise ConfigurationError(
                f"model must be an agents Model, not {type(model).__name__}",
                layer=type(self).__name__,
            )
        self.model = model
        self.model_settings = model_settings

    async def summarize(self, request: SummaryRequest) -> str:
        from agents.model_settings import ModelSettings
        from agents.models.interface import ModelTracing

        settings = (self.model_settings or ModelSettings()).resolve(
            ModelSettings(max_tokens=request.max_tokens)
        )
        response = await self.model.get_response(
            request.instructions,
            [{"role": "user", "content": request.prompt}],
            settings,
            [],
            None,
            [],
            ModelTracing.DISABLED,
            previous_response_id=None,
            conversation_id=None,
            prompt=None,
        )
        texts = [
            part.text
            for output in response.output
            if getattr(output, "type", None) == "message"
            for part in getattr(output, "content", [])
            if isinstance(getattr(part, "text", None), str)
        ]
        if not texts:
            raise SummarizerError(f"{type(self.model).__name__} returned no text")
        return "\n".join(texts)

    def __repr__(self) -> str:
        return f"ModelSummarizer({type(self.model).__name__})"
