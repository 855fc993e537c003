"""Random operations on a stack, checked against a plain list: the SDK's meaning, not ours.

The oracle is independent of memstack: a list of whole units (a message, a call with its
output, parallel calls with theirs, reasoning with the message it produced). ``get_items()``
is the list; ``get_items(limit=n)`` its newest ``n`` items, as the SDK's stores return them,
even when the cut leaves an output without its call. Orphans never arise here by accident:
every history is valid, so a stack whose layers change nothing must answer exactly as the
list does, over every backend.
"""

from __future__ import annotations

import asyncio
import itertools
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from memstack import build_stack, capabilities_of

from .conftest import SERVICES, Store, require_service
from .test_contract import STACKS

Unit = list[dict[str, Any]]

texts = st.text(max_size=24)
_ids = itertools.count()


def _call_id() -> str:
    return f"call_{next(_ids)}"


def _message(role: str, text: str) -> Unit:
    return [{"role": role, "content": text}]


def _tool_call(text: str, output: str) -> Unit:
    call = _call_id()
    return [
        {"type": "function_call", "call_id": call, "name": "lookup", "arguments": text},
        {"type": "function_call_output", "call_id": call, "output": output},
    ]


def _parallel_calls(a: str, b: str) -> Unit:
    first, second = _call_id(), _call_id()
    return [
        {"type": "function_call", "call_id": first, "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": second, "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": second, "output": b},
        {"type": "function_call_output", "call_id": first, "output": a},
    ]


def _reasoning(summary: str, text: str) -> Unit:
    return [
        {
            "type": "reasoning",
            "id": f"rs_{next(_ids)}",
            "summary": [{"type": "summary_text", "text": summary}],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        },
    ]


units = st.one_of(
    st.builds(_message, st.just("user"), texts),
    st.builds(_message, st.just("assistant"), texts),
    st.builds(_tool_call, texts, texts),
    st.builds(_parallel_calls, texts, texts),
    st.builds(_reasoning, texts, texts),
)


class StackMatchesList(RuleBasedStateMachine):
    """A stack must behave exactly like a list of the items it was given."""

    backend = "sqlite-file"
    stack_name = "passthrough"

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = tempfile.TemporaryDirectory()
        self.store = Store(self.backend, Path(self.tmp.name))
        self.stack = build_stack(
            self.store.open(f"stateful-{uuid.uuid4().hex}"), STACKS[self.stack_name]
        )
        self.caps = capabilities_of(self.stack)
        self.units: list[Unit] = []

    @property
    def items(self) -> list[dict[str, Any]]:
        return [item for unit in self.units for item in unit]

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    @rule(batch=st.lists(units, max_size=4))
    def add(self, batch: list[Unit]) -> None:
        self.run(self.stack.add_items([item for unit in batch for item in unit]))
        self.units.extend(batch)

    @rule(limit=st.one_of(st.none(), st.integers(0, 14)))
    def get(self, limit: int | None) -> None:
        items = self.items
        expected = items if limit is None else items[-limit:] if limit else []
        assert self.run(self.stack.get_items(limit)) == expected

    @rule(limit=st.integers(1, 3))
    def get_newest(self, limit: int) -> None:
        """The newest few: where a cut most often falls inside a unit."""
        self.get(limit)

    @rule()
    def pop_unit(self) -> None:
        """Undo the newest unit item by item, as the Runner's retry does."""
        if not self.units:
            assert self.run(self.stack.pop_item()) is None
            return
        for expected in reversed(self.units.pop()):
            assert self.run(self.stack.pop_item()) == expected

    @rule()
    def clear(self) -> None:
        self.run(self.stack.clear_session())
        self.units.clear()

    @precondition(lambda self: len(self.units) > 0 and self.caps.atomic)
    @rule(n=st.integers(1, 3))
    def delete_oldest_units(self, n: int) -> None:
        doomed = sum(len(unit) for unit in self.units[:n])
        assert self.run(self.caps.delete_oldest(doomed)) == doomed
        del self.units[:n]

    @invariant()
    def count_matches(self) -> None:
        assert self.run(self.caps.count()) == len(self.items)

    def teardown(self) -> None:
        try:
            self.run(self.stack.clear_session())
            self.run(self.store.aclose())
        finally:
            self.loop.close()
            self.tmp.cleanup()


BACKENDS = ["sqlite-file", "postgres", "mariadb", "redis"]
STATEFUL_STACKS = ["passthrough", "ttl", "encrypted", "window", "production order"]


@pytest.mark.parametrize("stack_name", STATEFUL_STACKS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_stack_matches_a_plain_list(backend: str, stack_name: str) -> None:
    if backend in SERVICES:
        require_service(*SERVICES[backend])
    machine = type("Machine", (StackMatchesList,), {"backend": backend, "stack_name": stack_name})
    case = machine.TestCase
    case.settings = settings(
        max_examples=25,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    case().runTest()
