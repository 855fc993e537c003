"""The stack's view, applied to every model call inside one run.

    from agents import RunConfig, Runner
    from memstack import input_filter

    config = RunConfig(call_model_input_filter=input_filter(stack))
    await Runner.run(agent, "Fix the failing test", session=stack, run_config=config)

The SDK reads the session once, at the start of a run, and then sends the growing input
(that history plus every tool call and output of this run) on each model call; a session
layer only shapes the next run. This filter applies the same view transforms to each of
those calls — every layer's, found by walking the stack given (pass its top), bottom to
top, as the layers themselves would apply: compaction's masking, the window's budget,
memory's recall — then the guard every stack applies to its views.
Summaries are not made here: a model call must not wait for one.

A layer takes part by having ``filter_model_input(items) -> items`` (sync or async).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from agents.memory import Session

from memstack.base import iter_chain
from memstack.errors import ConfigurationError
from memstack.history import valid_view

if TYPE_CHECKING:
    from agents.run_config import CallModelData, ModelInputData

__all__ = ["ModelInputFilter", "input_filter"]

logger = logging.getLogger("memstack.model_input")

Item = dict[str, Any]
Transform = Callable[[list[Item]], "list[Item] | Awaitable[list[Item]]"]


class ModelInputFilter:
    """A ``RunConfig.call_model_input_filter`` applying a stack's view transforms in order."""

    def __init__(self, transforms: Sequence[tuple[str, Transform]]) -> None:
        self.transforms = list(transforms)

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        from agents.run_config import ModelInputData

        items: list[Item] = list(data.model_data.input)  # type: ignore[arg-type]
        for _, transform in self.transforms:
            result = transform(items)
            items = list(await result if inspect.isawaitable(result) else result)
        items = valid_view(items)  # the same guard as the top of the stack
        return ModelInputData(input=items, instructions=data.model_data.instructions)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"ModelInputFilter({' → '.join(name for name, _ in self.transforms) or 'nothing'})"


def input_filter(stack: Session) -> ModelInputFilter:
    """The filter for ``stack`` (its top layer): each layer's in-run transform, bottom first."""
    if not isinstance(stack, Session):
        raise ConfigurationError(f"stack must be a Session, not {type(stack).__name__}")
    transforms: list[tuple[str, Transform]] = []
    for session in reversed(list(iter_chain(stack))):
        own = getattr(session, "filter_model_input", None)
        if callable(own):
            transforms.append((type(session).__name__, own))
    return ModelInputFilter(transforms)
