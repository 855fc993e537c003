"""Tests find the shared data through the benchmarks' locator (``MEMSTACK_DATA``), not a path."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from .conftest import shared_data

ROOT = Path(__file__).resolve().parents[1]
# The locator (tests/conftest.py): every read of the shared data goes through one of these,
# which skip when it is absent and fail under CI=true.
LOCATORS = {"shared_data", "shared_transcripts"}
# What the locator itself reads: a test naming these directly would bypass the CI check.
RAW = {"DATA_DIR", "default_transcripts", "MEMSTACK_DATA"}


def _test_modules() -> list[Path]:
    here = Path(__file__).resolve()
    return [
        path
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path != here and path != ROOT / "tests" / "conftest.py"
    ]


def _names(node: ast.AST) -> set[str]:
    """Every name a node mentions: calls, references, attributes, parameters, strings."""
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
        elif isinstance(sub, ast.arg):
            found.add(sub.arg)  # a fixture that reads the data, taken as a parameter
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            found.add(sub.value)
    return found


def _definitions(tree: ast.Module) -> dict[str, ast.AST]:
    """Module-level functions and assignments, and test methods as ``Class::name``."""
    defs: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            defs[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for method in node.body:
                if isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
                    defs[f"{node.name}::{method.name}"] = method
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    defs[target.id] = node
    return defs


def data_readers() -> list[str]:
    """Every test that reads the shared data, found in the source, not listed by hand.

    A definition reads it when it mentions a locator, or a function, fixture or module-level
    value of its module that reads it (to a fixed point); the readers are the tests among them.
    """
    readers: list[str] = []
    for path in _test_modules():
        defs = _definitions(ast.parse(path.read_text(encoding="utf-8")))
        mentions = {name: _names(node) for name, node in defs.items()}
        reading = {name for name, names in mentions.items() if names & LOCATORS}
        while True:
            more = {
                name
                for name, names in mentions.items()
                if name not in reading and names & {r.rpartition("::")[2] for r in reading}
            }
            if not more:
                break
            reading |= more
        relative = path.relative_to(ROOT)
        readers += [
            f"{relative}::{name}"
            for name in sorted(reading)
            if name.rpartition("::")[2].startswith("test_")
        ]
    return readers


READERS = data_readers()


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
    result = pytest_run(tmp_path, *READERS, ci=True)
    summary = result.stdout.splitlines()[-1]
    # Every reader fails (or its module fails to collect): none passes, none skips.
    assert result.returncode in (1, 2), result.stdout[-3000:]
    assert "skipped" not in summary and "passed" not in summary, result.stdout[-3000:]
    assert "CI=true" in result.stdout


def test_a_data_directory_elsewhere_is_used(tmp_path: Path):
    source = shared_data("airline_tau.jsonl")
    first = source.read_text(encoding="utf-8").splitlines(keepends=True)[:1]
    (tmp_path / "airline_tau.jsonl").write_text("".join(first), encoding="utf-8")
    result = pytest_run(tmp_path, "tests/test_tokens.py::test_real_transcript_counts_are_plausible")
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


def test_the_readers_are_found_by_reading_the_tests():
    # Known readers, one per way of reaching the locator: direct, through a helper, through a
    # module-level value, and the two that once skipped under CI by looking for the data
    # themselves. The discovery must find them; it is not limited to them.
    for known in [
        "tests/test_tokens.py::test_real_transcript_counts_are_plausible",
        "tests/layers/test_window.py::test_replayed_transcripts",
        "tests/test_history.py::test_real_transcripts",
        "tests/bench/test_cache_aware.py::test_coding_agent_recipe_changes_the_prefix_rarely_and_keeps_the_task",
        "tests/memory/test_cli_and_recipe.py::test_bench_memory_writes_summary",
    ]:
        assert known in READERS, (known, READERS)
    assert "tests/test_tokens.py::test_known_token_ids" not in READERS


def test_no_test_reads_the_data_around_the_locator():
    """Only the locator looks at ``DATA_DIR``: a test doing it itself could skip under CI.

    Pointing the benchmarks' module at a directory of the test's own (a monkeypatched
    ``DATA_DIR``) is not reading the shared data.
    """
    offenders = []
    for path in _test_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            names = _names(node)
            if isinstance(node, ast.ImportFrom):
                names = {alias.name for alias in node.names}
            own_directory = "setattr" in names and "tmp_path" in names
            if names & RAW and not own_directory:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_default_transcripts_are_the_files_of_conversations_with_items(tmp_path, monkeypatch):
    from memstack.bench import transcripts

    (tmp_path / "chats.jsonl").write_text('{"id": "a", "items": []}\n')
    (tmp_path / "locomo.jsonl").write_text('{"id": "l", "sessions": [], "qa": []}\n')
    (tmp_path / "notes.txt").write_text("not data\n")
    monkeypatch.setattr(transcripts, "DATA_DIR", tmp_path)
    assert transcripts.default_transcripts() == [tmp_path / "chats.jsonl"]
