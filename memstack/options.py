"""Constructor options checked in one place: one pydantic model per layer.

    >>> from memstack.options import Count, Options
    >>> class Demo(Options, layer="Demo"):
    ...     size: Count = 1
    >>> Demo.check(size=3).size
    3
    >>> Demo.check(size=0)
    Traceback (most recent call last):
    ...
    memstack.errors.ConfigurationError: Demo: size must be an int >= 1, not 0

Each type below carries a ``description`` of what it accepts; a failed check raises
``ConfigurationError`` naming the layer, the field, that description and the value given,
so every layer words its errors alike and a constructor holds no hand-written checks.
Rules across fields are ``model_validator``s raising ``ValueError`` with the message
(``raise ValueError(…) from err`` keeps ``err`` as the ``ConfigurationError``'s cause).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta
from typing import Annotated, Any, ClassVar, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
)

from memstack.errors import ConfigurationError

__all__ = [
    "BatchSize",
    "Count",
    "Counter",
    "Duration",
    "Flag",
    "Fraction",
    "MaybeCount",
    "MaybeDuration",
    "MaybeFraction",
    "MaybePositiveDuration",
    "ModelName",
    "Options",
    "Size",
    "must_be_callable",
    "shared",
]


class Options(BaseModel):
    """Base of a layer's options: frozen, no unknown names, no silent coercion."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)
    layer: ClassVar[str] = ""

    def __init_subclass__(cls, *, layer: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.layer = layer or cls.layer

    @classmethod
    def check(cls, **values: Any) -> Self:
        """The options, or ``ConfigurationError`` naming the first one that is wrong."""
        try:
            return cls(**values)
        except ValidationError as exc:
            raise ConfigurationError(_message(cls, exc), layer=cls.layer or None) from _cause(exc)


def _cause(exc: ValidationError) -> BaseException | None:
    # pydantic's own report only repeats the message; a validator's ``raise … from err``
    # (a policy table that failed to build) is worth keeping.
    error = exc.errors(include_url=False)[0].get("ctx", {}).get("error")
    return error.__cause__ if isinstance(error, BaseException) else None


def _message(model: type[BaseModel], exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    if not error["loc"]:  # a rule across fields: its ValueError says everything
        return str(error.get("ctx", {}).get("error", error["msg"]))
    name = str(error["loc"][0])
    if error["type"] == "extra_forbidden":
        known = ", ".join(model.model_fields)
        return f"unknown option {name!r} (options: {known})"
    field = model.model_fields.get(name)
    wanted = field.description if field is not None and field.description else error["msg"]
    if error["type"] == "missing":
        return f"{name} is required ({wanted})"
    return f"{name} must be {wanted}, not {error['input']!r}"


def _int(value: object) -> object:
    # bool is an int to Python but never a count here; floats are not silently truncated.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("not an int")
    return value


def _number(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("not a number")
    if not math.isfinite(value):
        raise ValueError("not finite")
    return float(value)


def _seconds(value: object) -> object:
    if isinstance(value, timedelta):
        return value.total_seconds()
    return _number(value)


def _maybe(check: Callable[[object], object]) -> Callable[[object], object]:
    return lambda value: None if value is None else check(value)


def _at_least(low: float, *, strict: bool = False) -> Callable[[Any], Any]:
    def bounded(value: Any) -> Any:
        if value is not None and (value < low or (strict and value == low)):
            raise ValueError("out of range")
        return value

    return bounded


def _up_to(high: int) -> Callable[[int], int]:
    def bounded(value: int) -> int:
        if value > high:
            raise ValueError("out of range")
        return value

    return bounded


def _between(low: float, high: float) -> Callable[[Any], Any]:
    def bounded(value: Any) -> Any:
        if value is not None and not low < value < high:
            raise ValueError("out of range")
        return value

    return bounded


Count = Annotated[
    int, BeforeValidator(_int), AfterValidator(_at_least(1)), Field(description="an int >= 1")
]
MaybeCount = Annotated[
    int | None,
    BeforeValidator(_maybe(_int)),
    AfterValidator(_at_least(1)),
    Field(description="None or an int >= 1"),
]
Size = Annotated[
    int, BeforeValidator(_int), AfterValidator(_at_least(0)), Field(description="an int >= 0")
]
BatchSize = Annotated[
    int,
    BeforeValidator(_int),
    AfterValidator(_at_least(1)),
    AfterValidator(_up_to(10_000)),
    Field(description="an int from 1 to 10000"),
]
Fraction = Annotated[
    float,
    BeforeValidator(_number),
    AfterValidator(_between(0, 1)),
    Field(description="a number with 0 < x < 1"),
]
MaybeFraction = Annotated[
    float | None,
    BeforeValidator(_maybe(_number)),
    AfterValidator(_between(0, 1)),
    Field(description="None or a number with 0 < x < 1"),
]
Duration = Annotated[
    float,
    BeforeValidator(_seconds),
    AfterValidator(_at_least(0)),
    Field(description="seconds >= 0 (a number or timedelta)"),
]
MaybePositiveDuration = Annotated[
    float | None,
    BeforeValidator(_maybe(_seconds)),
    AfterValidator(_at_least(0, strict=True)),
    Field(description="seconds > 0 (a number or timedelta) or None"),
]
MaybeDuration = Annotated[
    float | None,
    BeforeValidator(_maybe(_seconds)),
    AfterValidator(_at_least(0)),
    Field(description="seconds >= 0 (a number or timedelta) or None"),
]


def _flag(value: object) -> object:
    if not isinstance(value, bool):
        raise ValueError("not a bool")
    return value


Flag = Annotated[bool, BeforeValidator(_flag), Field(description="True or False")]


def _counter(value: object) -> object:
    if value is not None and not callable(getattr(value, "count_item", None)):
        raise ValueError("no count_item")
    return value


#: A token counter: ``memstack.tokens.TokenCounter`` or anything with ``count_item(item)``.
Counter = Annotated[
    Any,
    BeforeValidator(_counter),
    Field(description="None or an object with a count_item(item) method"),
]
ModelName = Annotated[str | None, Field(description="None or a model name")]


def must_be_callable(value: object) -> object:
    """A ``BeforeValidator`` for fields holding a callable (a clock, a hook)."""
    if not callable(value):
        raise ValueError("not callable")
    return value


P = TypeVar("P")
_SHARED: dict[Any, Any] = {}
_SHARED_MAX = 1024


def shared(policy: P) -> P:
    """The first kept policy equal to ``policy`` (of the same type), else ``policy`` itself.

    For small immutable policies a layer derives from its options (a window's budget, a
    TTL's expiry): thousands of live stacks built alike then hold one of each, not one each.
    """
    key = (type(policy), policy)
    found = _SHARED.get(key)
    if found is not None:
        return found  # type: ignore[no-any-return]
    if len(_SHARED) < _SHARED_MAX:
        _SHARED.setdefault(key, policy)
    return policy
