"""One stack builder for code, recipes and the command line.

    >>> from memstack import build_stack, LayerSpec
    >>> from memstack.testing import InMemorySession
    >>> stack = build_stack(InMemorySession("s1"), [LayerSpec("passthrough")])
    >>> stack
    InMemorySession(session_id='s1') → PassthroughSession()

Specs are listed bottom to top: the first wraps the store, the last is what the agent
talks to. A spec names a layer (``"window"``) or gives its class, plus keyword options;
duration options also take text such as ``"5m"`` (see ``memstack.durations``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

from agents.memory import Session

from memstack.base import SessionLayer
from memstack.durations import parse_durations
from memstack.errors import ConfigurationError

__all__ = ["LAYERS", "LayerSpec", "build_stack", "check_options", "resolve_layer"]

# Layer name -> "module:Class", imported on first use so unused layers cost nothing.
LAYERS: dict[str, str] = {
    "passthrough": "memstack.layers.passthrough:PassthroughSession",
    "window": "memstack.layers.window:SlidingWindowSession",
    "ttl": "memstack.layers.ttl:TTLSession",
    "encrypted": "memstack.layers.encrypted:EncryptedSession",
    "compaction": "memstack.layers.compaction:CompactionSession",
    "redact": "memstack.layers.redact:RedactSession",
    "memory": "memstack.layers.memory:MemorySession",
}


@dataclass(frozen=True)
class LayerSpec:
    """One layer of a stack: which layer, with which keyword options."""

    layer: str | type[SessionLayer]
    options: Mapping[str, Any] = field(default_factory=dict)


def resolve_layer(layer: str | type[SessionLayer]) -> type[SessionLayer]:
    if isinstance(layer, type):
        if not issubclass(layer, SessionLayer):
            raise ConfigurationError(f"{layer.__name__} is not a memstack SessionLayer")
        return layer
    target = LAYERS.get(layer)
    if target is None:
        known = ", ".join(sorted(LAYERS))
        raise ConfigurationError(f"unknown layer {layer!r}; known layers: {known}")
    module, _, name = target.partition(":")
    cls: type[SessionLayer] = getattr(import_module(module), name)
    return cls


@functools.cache  # per layer class: a stack is built per request
def _keywords(init: Callable[..., None]) -> tuple[list[str], bool, frozenset[str]]:
    """``init``'s keyword-only options, whether it takes any keyword, and the required ones."""
    params = inspect.signature(init).parameters
    allowed = [name for name, p in params.items() if p.kind is p.KEYWORD_ONLY]
    any_keyword = any(p.kind is p.VAR_KEYWORD for p in params.values())
    empty = inspect.Parameter.empty
    return allowed, any_keyword, frozenset(n for n in allowed if params[n].default is empty)


def check_options(
    cls: type[SessionLayer], options: Mapping[str, Any], *, supplied: Collection[str] = ()
) -> None:
    """Refuse unknown options and missing required ones, listing the options the layer takes.

    ``supplied`` names required options a caller adds later (a recipe's memory ``store``).
    """
    allowed, any_keyword, required = _keywords(cls.__init__)
    listed = ", ".join(allowed) or "none"
    if not any_keyword:
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise ConfigurationError(
                f"unknown option(s) {', '.join(unknown)}; allowed: {listed}", layer=cls.__name__
            )
    missing = sorted(required - set(options) - set(supplied))
    if missing:
        raise ConfigurationError(
            f"missing required option(s) {', '.join(missing)}; allowed: {listed}",
            layer=cls.__name__,
        )


def build_stack(base: Session, specs: Iterable[LayerSpec | str | type[SessionLayer]]) -> Session:
    """Wrap ``base`` in each layer of ``specs``, bottom to top."""
    session: Session = base
    for spec in specs:
        if not isinstance(spec, LayerSpec):
            spec = LayerSpec(spec)
        cls = resolve_layer(spec.layer)
        check_options(cls, spec.options)
        session = cls(session, **parse_durations(cls, spec.options))
    return session
