"""Stacks under the SDK's real Runner: run, run_sync, run_streamed, tools, pop_item undo."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstack import LayerSpec, build_stack

from .conftest import BACKENDS, runner_conversation


@pytest.mark.parametrize("depth", [0, 1, 3])
@pytest.mark.parametrize("backend", BACKENDS)
def test_runner_conversation(
    backend: str, depth: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runner_conversation(
        backend,
        tmp_path,
        caplog,
        lambda store: build_stack(store, [LayerSpec("passthrough")] * depth),
    )
