"""The ``Embedder`` protocol, and numpy loaded only when vectors are made.

    >>> from memstack.memory.embedder import Embedder
    >>> from memstack.memory.vectors import HashingEmbedder
    >>> isinstance(HashingEmbedder(dim=8), Embedder)
    True

Its own module so that embedders which wrap another (``memstack.memory.granularity``)
and the named ones (``memstack.memory.vectors``) share it without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from memstack.errors import ConfigurationError

__all__ = ["Embedder", "load_numpy"]

_LAYER = "MemoryStore"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of ``dim`` floats; ``name`` identifies the model."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def load_numpy() -> Any:
    """numpy, or a ``ConfigurationError`` saying which extra installs it."""
    try:
        import numpy
    except ImportError as exc:
        raise ConfigurationError(
            "semantic recall needs numpy: pip install 'memstack[embed]'", layer=_LAYER
        ) from exc
    return numpy
