"""Tests find the shared data through the benchmarks' locator (``MEMSTACK_DATA``), not a path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import shared_data

ROOT = Path(__file__).resolve().parents[1]
# One data-reading test of each file that reads the shared transcripts.
READERS = [
    "tests/test_tokens.py::test_real_transcript_counts_are_plausible",
    "tests/test_history.py::test_shared_transcripts_are_present",
    "tests/compaction/test_transcripts.py::test_every_conversation_replays_valid_within_budget_and_faithful",
    "tests/layers/test_encrypted.py::test_stored_bytes_are_smaller_than_plaintext_on_real_histories",
    "tests/layers/test_window.py::test_replayed_transcripts",
    "tests/layers/test_window.py::test_hysteresis_on_real_transcripts_moves_less",
    "tests/test_cli.py::test_bench_tokens_on_a_small_file",
]


def pytest_run(data: Path, *nodes: str, ci: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMSTACK_DATA": str(data), "CI": "true" if ci else "false"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *nodes],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )


def test_every_data_test_looks_where_memstack_data_points(tmp_path: Path):
    result = pytest_run(tmp_path, *READERS)
    assert result.returncode == 0, result.stdout[-3000:]
    summary = result.stdout.splitlines()[-1]
    assert "skipped" in summary and "passed" not in summary, result.stdout[-3000:]
    # Every one skipped, naming the directory it was sent to.
    reasons = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    assert reasons and all(f"{tmp_path}/" in line for line in reasons), reasons
    assert all("set MEMSTACK_DATA" in line for line in reasons)


def test_under_ci_missing_data_fails_instead_of_skipping(tmp_path: Path):
    result = pytest_run(tmp_path, READERS[0], ci=True)
    assert result.returncode == 1
    assert "CI=true" in result.stdout


def test_a_data_directory_elsewhere_is_used(tmp_path: Path):
    source = shared_data("airline_tau.jsonl")
    first = source.read_text(encoding="utf-8").splitlines(keepends=True)[:1]
    (tmp_path / "airline_tau.jsonl").write_text("".join(first), encoding="utf-8")
    result = pytest_run(tmp_path, READERS[0])
    assert result.returncode == 0, result.stdout[-3000:]
    assert "1 passed" in result.stdout


def test_no_test_names_an_absolute_data_directory():
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("*.py")
        if path.name != Path(__file__).name
        and ('"/work/shared' in path.read_text() or '"shared" / "data"' in path.read_text())
    ]
    assert offenders == []


@pytest.mark.parametrize("node", READERS)
def test_every_reader_exists(node: str):
    path, _, name = node.partition("::")
    assert f"def {name}(" in (ROOT / path).read_text()


def test_default_transcripts_are_the_files_of_conversations_with_items(tmp_path, monkeypatch):
    from memstack.bench import transcripts

    (tmp_path / "chats.jsonl").write_text('{"id": "a", "items": []}\n')
    (tmp_path / "locomo.jsonl").write_text('{"id": "l", "sessions": [], "qa": []}\n')
    (tmp_path / "notes.txt").write_text("not data\n")
    monkeypatch.setattr(transcripts, "DATA_DIR", tmp_path)
    assert transcripts.default_transcripts() == [tmp_path / "chats.jsonl"]
