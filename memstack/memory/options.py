"""A recipe's ``[memory]`` table, checked like a layer's options.

    >>> from memstack.memory.options import MemoryOptions
    >>> MemoryOptions.check(url="sqlite:///memory.db").url
    'sqlite:///memory.db'
    >>> MemoryOptions.check(url="sqlite:///m.db", keyy={"env": "K"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    memstack.errors.ConfigurationError: MemoryStore: unknown option 'keyy' (options: url, key, ...)

The table is TOML, so only what TOML can say is here (a clock or a token counter is
passed in code). Checking it when the recipe is loaded makes a misspelt field, a wrong
type or an unknown URL scheme the same one-line error the ``[backend]`` table and the
layers give, naming the file and the table, before anything is opened.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

from memstack.memory.database import engine_url
from memstack.options import Flag, MaybeCount, Options

__all__ = ["MemoryOptions"]


def _url(value: object) -> object:
    if not isinstance(value, str) or not value:
        raise ValueError("not a string")
    return value


def _known_scheme(value: str) -> str:
    engine_url(value)  # ConfigurationError naming the schemes long-term memory accepts
    return value


def _text(value: object) -> object:
    if not isinstance(value, str) or not value:
        raise ValueError("not a string")
    return value


def _embedder(value: object) -> object:
    if value is not None and (not isinstance(value, str) or not value):
        raise ValueError("not a name")
    return value


def _table(value: object) -> object:
    if not isinstance(value, dict):
        raise ValueError("not a table")
    return value


class MemoryOptions(Options, layer="MemoryStore"):
    """The ``[memory]`` table: ``url`` and the ``MemoryStore`` options a recipe can set."""

    url: Annotated[
        str,
        BeforeValidator(_url),
        AfterValidator(_known_scheme),
        Field(description="a SQL URL (sqlite:///…, postgresql://…, mysql://…, mariadb://…)"),
    ]
    key: Any = None  # a secret reference, resolved by the recipe
    keyring: Any = None
    create_tables: Flag = True
    table_prefix: Annotated[
        str, BeforeValidator(_text), Field(description="a non-empty string")
    ] = "memstack_memor"
    embedder: Annotated[
        str | None, BeforeValidator(_embedder), Field(description="an embedder name")
    ] = None
    max_memory_tokens: MaybeCount = 1000
    engine_kwargs: Annotated[
        dict[str, Any], BeforeValidator(_table), Field(description="a table of engine options")
    ] = Field(default_factory=dict)
