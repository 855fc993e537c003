"""Stacks under the SDK's real Runner: run, run_sync, run_streamed, tools, pop_item undo."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from memstack import LayerSpec, build_stack
from memstack.testing.conversation import run_conversation

from .conftest import BACKENDS, SERVICES, Store, require_service


@pytest.mark.parametrize("depth", [0, 1, 3])
@pytest.mark.parametrize("backend", BACKENDS)
def test_runner_conversation(
    backend: str, depth: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    if backend in SERVICES:
        require_service(*SERVICES[backend])
    store = Store(backend, tmp_path)
    with caplog.at_level(logging.WARNING, logger="openai.agents"):
        remaining = run_conversation(
            lambda: build_stack(
                store.open(f"runner-{uuid.uuid4().hex}"), [LayerSpec("passthrough")] * depth
            ),
            cleanup=store.aclose,
        )
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    # user, call, output, reply; user, call, output, reply: the third turn was undone.
    assert len(remaining) == 8
