"""The ``openai`` client for memstack's own model calls (summaries, memory extraction).

    >>> from memstack.model_client import chat_client
    >>> client = chat_client(model="gpt-4.1-mini", api_key="sk-test", layer="Example")
    >>> type(client).__name__
    'AsyncOpenAI'

Any OpenAI-compatible endpoint: pass ``client=`` (shared, configured by you) or
``base_url=``/``api_key=``; with neither, the ``openai`` package reads ``OPENAI_API_KEY``
and ``OPENAI_BASE_URL``. Every failure here is a ``ConfigurationError`` naming ``layer``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstack.errors import ConfigurationError

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["chat_client"]


def chat_client(
    *,
    model: object,
    client: AsyncOpenAI | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    max_retries: int = 2,
    layer: str,
) -> AsyncOpenAI:
    """``client`` itself, or a new one for ``base_url``/``api_key``; ``model`` is checked."""
    if not isinstance(model, str) or not model:
        raise ConfigurationError("model must be a non-empty model name", layer=layer)
    if client is not None:
        if base_url is not None or api_key is not None:
            raise ConfigurationError("pass client or base_url/api_key, not both", layer=layer)
        return client
    from openai import AsyncOpenAI, OpenAIError

    try:
        return AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=max_retries)
    except OpenAIError as exc:
        raise ConfigurationError(f"cannot create the OpenAI client: {exc}", layer=layer) from exc
