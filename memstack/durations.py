"""Durations: seconds as a number or a ``timedelta``, and in recipes as text like ``"30d"``.

    >>> from memstack.durations import parse_duration, parse_durations, seconds_of
    >>> parse_duration("5m")
    datetime.timedelta(seconds=300)
    >>> seconds_of(parse_duration("1.5h"))
    5400.0
    >>> from memstack.layers import TTLSession
    >>> parse_durations(TTLSession, {"purge_every": "5m", "purge_batch": 50})
    {'purge_every': datetime.timedelta(seconds=300), 'purge_batch': 50}

An option is a duration when its type accepts a ``timedelta`` (``Seconds``): recipes read
duration text for exactly those options, whatever they are called, so every duration
option of every layer and strategy takes ``"5m"`` the same way.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from memstack.errors import ConfigurationError

__all__ = ["Seconds", "duration_options", "parse_duration", "parse_durations", "seconds_of"]

#: A duration option's type: seconds, or a ``timedelta``.
Seconds = float | int | timedelta

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """``"30d"``, ``"12h"``, ``"15m"``, ``"90s"``, ``"2w"`` or plain seconds."""
    if match := _DURATION.match(text):
        return timedelta(seconds=float(match[1]) * _UNITS[match[2]])
    try:
        return timedelta(seconds=float(text))
    except ValueError:
        raise ConfigurationError(
            f"{text!r} is not a duration (write 30d, 12h, 15m, 90s or seconds)"
        ) from None


def seconds_of(value: Seconds) -> float:
    """A duration option's value in seconds."""
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _accepts(annotation: object, kind: type) -> bool:
    if annotation is kind:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_accepts(arg, kind) for arg in typing.get_args(annotation))
    return False


def duration_options(factory: Callable[..., Any]) -> frozenset[str]:
    """Names of ``factory``'s parameters whose type accepts a ``timedelta``."""
    # Cached per class or function, never per partial: a partial holds its arguments (a
    # summariser, its client) and the cache lives as long as the process.
    return _duration_options(factory.func if isinstance(factory, functools.partial) else factory)


@functools.cache
def _duration_options(target: Callable[..., Any]) -> frozenset[str]:
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return frozenset()
    # Postponed annotations are text: read them where they were written.
    init = getattr(target, "__init__", None) if isinstance(target, type) else target
    namespace = dict(getattr(init, "__globals__", {}))
    module = sys.modules.get(getattr(target, "__module__", ""), None)
    namespace.update(vars(module) if module is not None else {})
    names = set()
    for name, param in params.items():
        annotation = param.annotation
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, namespace)  # the declaring module's own text
            except Exception:
                continue
        if _accepts(annotation, timedelta) and not _accepts(annotation, str):
            names.add(name)
    return frozenset(names)


def parse_durations(factory: Callable[..., Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with text read as a ``timedelta`` for ``factory``'s duration options."""
    durations = duration_options(factory)
    parsed = dict(options)
    for name, value in options.items():
        if name in durations and isinstance(value, str):
            try:
                parsed[name] = parse_duration(value)
            except ConfigurationError as exc:
                raise ConfigurationError(f"field {name!r}: {exc}") from exc
    return parsed
