"""Compaction policies from plain mappings, as recipes (TOML) write them.

    >>> from memstack.compaction.config import strategy_from_config, trigger_from_config
    >>> trigger_from_config({"tokens": 60000, "target": 30000})
    Tokens(limit=60000, target=30000)
    >>> [type(s).__name__ for s in strategy_from_config(
    ...     [{"mask": {"keep_last_outputs": 3}}, {"summarize": {"summarizer": "extractive"}}])]
    ['Mask', 'Summarize']

Each strategy entry is a one-key table naming the kind: ``mask``, ``summarize`` or
``responses_compact``. A summariser is ``"extractive"`` or a one-key table:
``{ openai = { model = …, base_url = …, api_key = … } }`` or ``{ extractive = {…} }``.
A trigger is ``{ tokens = N }``, ``{ items = N }`` or ``{ turns = N }``, with an optional
``target``. A ``timeout`` may be written as a duration: ``"2m"``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from memstack.compaction.extractive import ExtractiveSummarizer
from memstack.compaction.masking import Mask
from memstack.compaction.strategies import ResponsesCompact, Summarize
from memstack.compaction.summarizer import OpenAIChatSummarizer
from memstack.compaction.triggers import Items, Tokens, Trigger, Turns
from memstack.durations import parse_durations
from memstack.errors import ConfigurationError

__all__ = ["strategy_from_config", "trigger_from_config"]

_TRIGGERS: dict[str, type[Tokens] | type[Items] | type[Turns]] = {
    "tokens": Tokens,
    "items": Items,
    "turns": Turns,
}
_SUMMARIZERS: dict[str, Callable[..., Any]] = {
    "extractive": ExtractiveSummarizer,
    "openai": OpenAIChatSummarizer,
}


def _one_key(value: object, what: str, allowed: Sequence[str]) -> tuple[str, Any]:
    if isinstance(value, str) and value in allowed:
        return value, {}
    if not isinstance(value, Mapping) or len(value) != 1 or next(iter(value)) not in allowed:
        raise ConfigurationError(
            f"{what} must be a one-key table naming one of {', '.join(allowed)}; got {value!r}"
        )
    kind, options = next(iter(value.items()))
    if not isinstance(options, Mapping):
        raise ConfigurationError(f"{what} {kind!r}: options must be a table, got {options!r}")
    return kind, dict(options)


def _build(factory: Callable[..., Any], what: str, options: Mapping[str, Any]) -> Any:
    try:
        return factory(**parse_durations(factory, options))
    except TypeError as exc:
        raise ConfigurationError(f"{what}: {exc}") from exc


def _summarizer(value: object) -> Any:
    if not isinstance(value, (str, Mapping)):
        return value  # already an object (code passing a mapping with one inside)
    kind, options = _one_key(value, "summarizer", list(_SUMMARIZERS))
    return _build(_SUMMARIZERS[kind], f"summarizer {kind!r}", options)


def _strategy(entry: object) -> Any:
    if not isinstance(entry, Mapping):
        return entry
    kind, options = _one_key(entry, "strategy", ["mask", "summarize", "responses_compact"])
    if kind == "mask":
        return _build(Mask, "strategy 'mask'", options)
    if kind == "summarize":
        if "summarizer" not in options:
            raise ConfigurationError("strategy 'summarize' needs a summarizer")
        summarizer = _summarizer(options.pop("summarizer"))
        return _build(functools.partial(Summarize, summarizer), "strategy 'summarize'", options)
    return _build(ResponsesCompact, "strategy 'responses_compact'", options)


def strategy_from_config(value: object) -> Any:
    """Strategy objects from mappings; objects pass through unchanged."""
    if isinstance(value, Sequence) and not isinstance(value, (str, Mapping)):
        return [_strategy(entry) for entry in value]
    return _strategy(value)


def trigger_from_config(value: object) -> Trigger | None:
    """A trigger from ``{tokens|items|turns = N, target = M}``; objects pass through."""
    if value is None or not isinstance(value, Mapping):
        return value  # type: ignore[return-value]
    kinds = [key for key in value if key in _TRIGGERS]
    extra = sorted(set(value) - {*kinds, "target"})
    if len(kinds) != 1 or extra:
        raise ConfigurationError(
            f"trigger must be {{ tokens|items|turns = N, target = M }}; got {dict(value)!r}"
        )
    kind = kinds[0]
    trigger: Trigger = _build(
        _TRIGGERS[kind], f"trigger {kind!r}", {"limit": value[kind], "target": value.get("target")}
    )
    return trigger
