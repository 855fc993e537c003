"""The ``openai`` client for memstack's own model calls (summaries, memory extraction).

    >>> from memstack.model_client import chat_client
    >>> client = chat_client(model="gpt-4.1-mini", api_key="sk-test", layer="Example")
    >>> type(client()).__name__, client() is client()
    ('AsyncOpenAI', True)

Any OpenAI-compatible endpoint: pass ``client=`` (shared, configured by you) or
``base_url=``/``api_key=``; with neither, ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` are
read now. Summarisers are built with every stack, so they do not own a client: all those
of one endpoint (base URL, key, retries) use the process's client for it, one per event
loop (``memstack.resources``). Every failure here is a ``ConfigurationError`` naming
``layer``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from memstack.errors import ConfigurationError
from memstack.resources import Endpoint, model_client

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["chat_client", "endpoint"]


def endpoint(
    *, base_url: str | None, api_key: str | None, max_retries: int, layer: str
) -> Endpoint:
    """The endpoint these options name, the ``openai`` package's environment filled in."""
    api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
    base_url = base_url if base_url is not None else os.environ.get("OPENAI_BASE_URL")
    if api_key is None:
        raise ConfigurationError(
            "cannot create the OpenAI client: pass api_key= or set OPENAI_API_KEY", layer=layer
        )
    return Endpoint(base_url=base_url, api_key=api_key, max_retries=max_retries)


def chat_client(
    *,
    model: object,
    client: AsyncOpenAI | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    max_retries: int = 2,
    layer: str,
) -> Callable[[], AsyncOpenAI]:
    """``() -> client``: ``client`` itself, or the process's for ``base_url``/``api_key``.

    Ask it at each call: the process's client is the running loop's. ``model`` is checked.
    """
    if not isinstance(model, str) or not model:
        raise ConfigurationError("model must be a non-empty model name", layer=layer)
    if client is not None:
        if base_url is not None or api_key is not None:
            raise ConfigurationError("pass client or base_url/api_key, not both", layer=layer)
        own = client
        return lambda: own
    return model_client(
        endpoint(base_url=base_url, api_key=api_key, max_retries=max_retries, layer=layer)
    )
