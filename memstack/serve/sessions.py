"""Where a request's session comes from: a stack built from a recipe, or the bare SDK store.

    sessions = RecipeSessions("recipes/personal-assistant.toml")
    stack = sessions.open("ana", "trip-planning")   # session id "ana:trip-planning"

Both open a new session object per request, as a handler would; what they share between
requests is what the library shares (``memstack.dispose`` releases it). ``BareSessions``
is the SDK's documented production pattern, ``SQLAlchemySession(session_id,
engine=one_shared_engine)``, served by the same code so that ``memstack bench server``
compares the two over one path.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Protocol

from agents.memory import Session

import memstack
from memstack.errors import RecipeError
from memstack.recipes import load_recipe
from memstack.stack import LayerSpec

__all__ = ["BareSessions", "RecipeSessions", "Sessions", "session_id_of"]


def session_id_of(user: str, thread: str) -> str:
    """The session id of a user's thread: ``"{user}:{thread}"``, as governance expects."""
    return f"{user}:{thread}"


class Sessions(Protocol):
    """What the server asks for: a session per request, memory per user, a clean stop."""

    keeps_memory: bool  # whether ``remember`` has a long-term store to write to

    def open(self, user: str, thread: str) -> Session: ...

    async def remember(self, user: str, text: str, kind: str) -> str: ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    def describe(self) -> str: ...


class RecipeSessions:
    """A stack per request from a recipe; its memory layer, if any, scoped to the user."""

    def __init__(
        self, recipe: str | Path, *, url: str | None = None, memory_url: str | None = None
    ) -> None:
        self.source = str(recipe)
        # Parsed once, from the file, so that every error names it.
        self.recipe = load_recipe(recipe, url=url, memory_url=memory_url)
        self.has_memory = any(spec.layer == "memory" for spec in self.recipe.layers)
        self.keeps_memory = bool(self.recipe.memory)
        self._memory: Any = None

    def open(self, user: str, thread: str) -> Session:
        """The request's stack: ``Recipe.build``, what ``from_recipe`` does for a file."""
        recipe = self.recipe
        if self.has_memory:  # recalls for the request's user
            layers = tuple(
                LayerSpec(spec.layer, {**spec.options, "scope": user})
                if spec.layer == "memory"
                else spec
                for spec in recipe.layers
            )
            recipe = dataclasses.replace(recipe, layers=layers)
        return recipe.build(session_id_of(user, thread))

    async def remember(self, user: str, text: str, kind: str) -> str:
        if not self.recipe.memory:
            raise RecipeError(f"{self.source}: no [memory] table: this server keeps no memory")
        if self._memory is None:
            self._memory = self.recipe.open_memory()
        memory = await self._memory.remember(user, text, kind=kind)
        return str(memory.id)

    async def start(self) -> None:
        # Every secret read and every option checked before the first request arrives,
        # and what a first read loads (vocabularies, ciphers) loaded now, not by a request.
        self.recipe.validate(resolve=True)
        await memstack.warm_up(self.recipe)

    async def aclose(self) -> None:
        if self._memory is not None:
            await self._memory.close()
            self._memory = None

    def describe(self) -> str:
        return f"{self.source}: {self.recipe.describe()}"


class BareSessions:
    """``SQLAlchemySession(session_id, engine=one_shared_engine)``: the SDK's own pattern."""

    def __init__(self, url: str) -> None:
        from sqlalchemy.ext.asyncio import create_async_engine

        from memstack.backends.open import _DEFAULT_DRIVERS

        scheme, _, rest = url.partition("://")
        self.url = f"{_DEFAULT_DRIVERS.get(scheme, scheme)}://{rest}"
        self.engine = create_async_engine(self.url)
        self.keeps_memory = False

    def open(self, user: str, thread: str) -> Session:
        from agents.extensions.memory import SQLAlchemySession

        return SQLAlchemySession(session_id_of(user, thread), engine=self.engine)

    async def remember(self, user: str, text: str, kind: str) -> str:
        raise RecipeError("the bare SDK store keeps no long-term memory")

    async def start(self) -> None:
        from agents.extensions.memory import SQLAlchemySession

        # The tables once at startup, as the SDK's docs do; requests then skip the check.
        await SQLAlchemySession("-", engine=self.engine, create_tables=True).get_items(limit=1)

    async def aclose(self) -> None:
        await self.engine.dispose()

    def describe(self) -> str:
        return f"bare SQLAlchemySession over one shared engine ({self.engine.url!r})"
