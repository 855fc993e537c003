"""A ``CompactionSession``'s options, checked in one place; policies from plain mappings.

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

``CompactionOptions`` turns the constructor's arguments into checked policies: the
strategy split into its two roles (a ``Mask`` for the view, a ``Compactor`` that
summarises), the rules between options applied, with the messages users see. The two
checks that need the wrapped store (a server-side conversation, an atomic store for
``mode="rewrite"``) stay with the layer.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Annotated, Any, Literal, Self

from pydantic import BeforeValidator, Field, SkipValidation, model_validator

from memstack.compaction.extractive import ExtractiveSummarizer
from memstack.compaction.json_parts import field_table
from memstack.compaction.masking import Mask
from memstack.compaction.quoting import QuotingSummarizer
from memstack.compaction.strategies import Compactor, ResponsesCompact, Summarize
from memstack.compaction.summarizer import OpenAIChatSummarizer
from memstack.compaction.triggers import Items, Tokens, Trigger, Turns
from memstack.durations import parse_durations
from memstack.errors import ConfigurationError
from memstack.options import Counter, Flag, ModelName, Options, Size

__all__ = ["CompactionOptions", "strategy_from_config", "trigger_from_config"]

_TRIGGERS: dict[str, type[Tokens] | type[Items] | type[Turns]] = {
    "tokens": Tokens,
    "items": Items,
    "turns": Turns,
}
_SUMMARIZERS: dict[str, Callable[..., Any]] = {
    "extractive": ExtractiveSummarizer,
    "openai": OpenAIChatSummarizer,
    "quoting": QuotingSummarizer,
}


# Summarisers that hold nothing but their options: built once per configuration and shared
# by every stack built from it, like masks and triggers. A model summariser holds a client
# and stays its stack's own (freed with it; the client is the process's).
_PURE_SUMMARIZERS = frozenset({"extractive", "quoting"})
# Policies built from plain tables, by the table: a server builds a stack per request or
# keeps thousands alive, and each would otherwise hold its own copies of the same policies.
_BUILT: dict[Hashable, Any] = {}
_BUILT_MAX = 256


def _frozen(value: object) -> Hashable:
    """``value`` (plain TOML-like data) as a key; ``TypeError`` for anything else."""
    if isinstance(value, Mapping):
        return (dict, tuple((key, _frozen(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return (list, tuple(_frozen(item) for item in value))
    if value is None or isinstance(value, str | int | float):
        return (type(value), value)  # the type: 1, 1.0 and True are equal keys otherwise
    raise TypeError(f"not plain data: {type(value).__name__}")


def _shared(what: str, config: object, build: Callable[[], Any]) -> Any:
    """``build()``, shared with every earlier build from an equal plain ``config``."""
    try:
        key = (what, _frozen(config))
    except TypeError:
        return build()  # objects inside: nothing says two builds are alike
    found = _BUILT.get(key)
    if found is None:
        found = build()
        if len(_BUILT) < _BUILT_MAX:
            _BUILT[key] = found
    return found


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
    if _is_pure(entry):
        return _shared("strategy", entry, lambda: _build_strategy(entry))
    return _build_strategy(entry)


def _is_pure(entry: Mapping[str, Any]) -> bool:
    """Whether the strategy ``entry`` builds holds no resource (no model client)."""
    if "mask" in entry:
        return True
    summarize = entry.get("summarize")
    if not isinstance(summarize, Mapping):
        return False
    summarizer = summarize.get("summarizer")
    if isinstance(summarizer, str):
        return summarizer in _PURE_SUMMARIZERS
    return isinstance(summarizer, Mapping) and set(summarizer) <= _PURE_SUMMARIZERS


def _build_strategy(entry: Mapping[str, Any]) -> Any:
    kind, options = _one_key(entry, "strategy", ["mask", "summarize", "responses_compact"])
    if kind == "mask":
        return _build(Mask, "strategy 'mask'", options)
    if kind == "summarize":
        if "summarizer" not in options:
            raise ConfigurationError("strategy 'summarize' needs a summarizer")
        summarizer = _summarizer(options.pop("summarizer"))
        return _build(Summarize, "strategy 'summarize'", {**options, "summarizer": summarizer})
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
    options = {"limit": value[kind], "target": value.get("target")}
    trigger: Trigger = _shared(
        "trigger", value, lambda: _build(_TRIGGERS[kind], f"trigger {kind!r}", options)
    )
    return trigger


def _split_strategy(strategy: object) -> tuple[Mask | None, Compactor | None]:
    """``strategy`` (one policy or a list) as its mask and its compactor, each optional."""
    parts = list(strategy) if isinstance(strategy, list | tuple) else [strategy]
    masks = [p for p in parts if isinstance(p, Mask)]
    compactors = [p for p in parts if not isinstance(p, Mask) and isinstance(p, Compactor)]
    if not parts or len(masks) + len(compactors) != len(parts):
        raise ValueError(
            "strategy must be Mask(...), Summarize(...), ResponsesCompact(...) or a list of "
            f"them, got {strategy!r}"
        )
    if len(masks) > 1 or len(compactors) > 1:
        raise ValueError("strategy takes at most one Mask and one of Summarize/ResponsesCompact")
    return (masks[0] if masks else None), (compactors[0] if compactors else None)


def _tool_names(value: object) -> object:
    if isinstance(value, str) or not isinstance(value, Sequence | frozenset | set):
        raise ValueError("not a list of tool names")
    if not all(isinstance(name, str) and name for name in value):
        raise ValueError("tool names must be non-empty strings")
    return tuple(value)


ToolNames = Annotated[
    tuple[str, ...], BeforeValidator(_tool_names), Field(description="a list of tool names")
]


class CompactionOptions(Options, layer="CompactionSession"):
    """Checked from ``strategy=``, ``trigger=`` and the rest of the constructor's options."""

    mask: SkipValidation[Mask | None] = None
    compactor: SkipValidation[Compactor | None] = None
    trigger: SkipValidation[Trigger | None] = None
    keep_last_turns: Size = 1
    mode: Annotated[Literal["append", "rewrite"], Field(description="'append' or 'rewrite'")] = (
        "append"
    )
    on_error: Annotated[Literal["warn", "raise"], Field(description="'warn' or 'raise'")] = "warn"
    carry_fields: Flag = False
    carry_beyond_turn: ToolNames = ()
    carry_turn_fields: SkipValidation[Mapping[str, tuple[str, ...]]] = Field(default_factory=dict)
    cooldown: Size = 0
    counter: Counter = None
    model: ModelName = None

    @model_validator(mode="before")
    @classmethod
    def _policies(cls, values: dict[str, Any]) -> dict[str, Any]:
        values = dict(values)
        try:  # recipes write policies as plain tables
            strategy = strategy_from_config(values.pop("strategy", None))
            trigger = trigger_from_config(values.get("trigger"))
        except ConfigurationError as exc:
            raise ValueError(exc.reason) from exc
        values["mask"], values["compactor"] = _split_strategy(strategy)
        if trigger is not None and not isinstance(trigger, Trigger):
            raise ValueError(
                f"trigger must be Tokens(...), Items(...) or Turns(...), not {trigger!r}"
            )
        values["trigger"] = trigger
        try:
            values["carry_turn_fields"] = dict(
                field_table(values.get("carry_turn_fields"), owner="CompactionSession")
            )
        except ConfigurationError as exc:
            raise ValueError(exc.reason) from exc
        return values

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.trigger is not None and self.compactor is None:
            raise ValueError(
                "a trigger needs a strategy that compacts (Summarize or ResponsesCompact); "
                "Mask alone applies on every read"
            )
        if self.model is not None and self.counter is not None:
            raise ValueError("pass model or counter, not both")
        if self.carry_fields and (
            self.mask is None
            or not self.mask.keep_fields
            or not isinstance(self.compactor, Summarize)
        ):
            raise ValueError(
                "carry_fields needs a Mask with keep_fields (what is carried) and Summarize "
                "(what covers the rest)"
            )
        if self.carry_beyond_turn and not self.carry_fields:
            raise ValueError("carry_beyond_turn needs carry_fields = true")
        if self.carry_turn_fields and not self.carry_fields:
            raise ValueError("carry_turn_fields needs carry_fields = true")
        missing = sorted(
            set(self.carry_beyond_turn) - set(self.mask.keep_fields if self.mask else ())
        )
        if missing:
            raise ValueError(
                f"carry_beyond_turn names tools without keep_fields in the Mask: {missing}"
            )
        if self.cooldown and self.trigger is None:
            raise ValueError("cooldown needs a trigger (it delays the trigger's compactions)")
        if self.mode == "rewrite" and self.compactor is None:
            raise ValueError("mode='rewrite' needs Summarize or ResponsesCompact")
        trigger, compactor = self.trigger, self.compactor
        if (
            isinstance(trigger, Tokens)
            and isinstance(compactor, Summarize)
            and trigger.target is not None
            and trigger.target + compactor.max_tokens >= trigger.limit
        ):
            raise ValueError(
                f"trigger.target ({trigger.target}) + the summary's max_tokens "
                f"({compactor.max_tokens}) must stay below trigger.limit ({trigger.limit}),"
                " or a compacted view could fire the trigger again at once"
            )
        return self
