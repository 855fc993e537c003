"""Random operation sequences against a stack and a plain list model of the same history."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from memstack import LayerSpec, build_stack, capabilities_of, open_backend
from memstack.history import valid_view

texts = st.text(max_size=30)
items = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, texts),
    st.builds(lambda t: {"role": "assistant", "content": t}, texts),
    st.builds(
        lambda n, a: {"type": "function_call", "call_id": f"c{n}", "name": "f", "arguments": a},
        st.integers(0, 10**6),
        texts,
    ),
)


class StackMatchesList(RuleBasedStateMachine):
    """The stack must behave exactly like a list, whatever the sequence of operations."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = tempfile.TemporaryDirectory()
        self.store = open_backend(f"sqlite:///{Path(self.tmp.name) / 'h.db'}", "stateful")
        self.stack = build_stack(self.store, [LayerSpec("passthrough")] * 2)
        self.caps = capabilities_of(self.stack)
        self.model: list[dict[str, Any]] = []

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    @rule(batch=st.lists(items, max_size=5))
    def add(self, batch: list[dict[str, Any]]) -> None:
        self.run(self.stack.add_items(batch))
        self.model.extend(batch)

    @rule(limit=st.one_of(st.none(), st.integers(0, 12)))
    def get(self, limit: int | None) -> None:
        expected = self.model if limit is None else self.model[-limit:] if limit else []
        # The top of a stack leaves out what the API would refuse (a call never answered).
        expected = valid_view(expected)
        assert self.run(self.stack.get_items(limit)) == expected

    @rule()
    def pop(self) -> None:
        expected = self.model.pop() if self.model else None
        assert self.run(self.stack.pop_item()) == expected

    @rule()
    def clear(self) -> None:
        self.run(self.stack.clear_session())
        self.model.clear()

    @precondition(lambda self: len(self.model) > 0)
    @rule(n=st.integers(0, 6))
    def delete_oldest(self, n: int) -> None:
        assert self.run(self.caps.delete_oldest(n)) == min(n, len(self.model))
        del self.model[:n]

    @invariant()
    def count_matches(self) -> None:
        assert self.run(self.caps.count()) == len(self.model)

    def teardown(self) -> None:
        self.store.close()  # type: ignore[attr-defined]
        self.loop.close()
        self.tmp.cleanup()


TestStackMatchesList = StackMatchesList.TestCase
TestStackMatchesList.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
