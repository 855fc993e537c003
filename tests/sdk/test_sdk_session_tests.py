"""The Agents SDK's own session tests, through every kind of stack.

The tests come from the sdist of the installed openai-agents, fetched at test time (never
copied here): ``memstack.testing.sdk_suite``. Each must pass through each stack, or be
listed, with its reason, in ``differences.toml``; so a new failure is always news.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import pytest

from memstack.crypto import generate_key
from memstack.testing.sdk_suite import (
    SdkSuiteError,
    SdkSuiteReport,
    fetch_sdk_tests,
    run_sdk_session_tests_through,
)

from ..conftest import IN_CI

_KEY = generate_key()
_COMPACTION = {
    "layer": "compaction",
    "keep_last_turns": 2,
    "trigger": {"tokens": 60_000, "target": 30_000},
    "strategy": [
        {"mask": {"keep_last_turns": 2, "keep_last_outputs": 4, "min_chars": 400}},
        {"summarize": {"max_tokens": 1500, "summarizer": "extractive"}},  # offline
    ],
}
STACKS: dict[str, list[dict[str, Any]]] = {
    "passthrough": [{"layer": "passthrough"}],
    "ttl": [{"layer": "ttl", "ttl": "1d"}],
    "encrypted": [{"layer": "encrypted", "key": _KEY}],
    "window": [{"layer": "window", "max_tokens": 100_000}],
    "production": [
        {"layer": "ttl", "ttl": "30d", "idle_ttl": "14d"},
        {"layer": "encrypted", "key": _KEY},
        _COMPACTION,
        {"layer": "window", "max_tokens": 100_000, "model": "gpt-4.1", "low_watermark": 0.7},
    ],
}
DIFFERENCES = tomllib.loads((Path(__file__).parent / "differences.toml").read_text())["difference"]


def listed(stack: str) -> tuple[set[str], set[str]]:
    """Tests listed as failing through ``stack``, and those of them that may also pass."""
    must, may = set(), set()
    for entry in DIFFERENCES:
        if entry["stacks"] == "all" or stack in entry["stacks"]:
            (may if entry.get("may_pass") else must).update(entry["tests"])
    return must, may


@pytest.fixture(scope="module")
def sdk_tests() -> Path:
    try:
        return fetch_sdk_tests()
    except SdkSuiteError as exc:
        if IN_CI or os.environ.get("MEMSTACK_SDK_TESTS_REQUIRED"):
            pytest.fail(f"the SDK's session tests are needed here: {exc}")
        pytest.skip(f"the SDK's session tests could not be fetched: {exc}")


@pytest.fixture(scope="module")
def reports(sdk_tests: Path) -> dict[str, SdkSuiteReport]:
    """Every stack's run, from one child pytest (a child per stack took seconds more each)."""
    return run_sdk_session_tests_through(STACKS, sdk_tests)


@pytest.mark.parametrize("stack", list(STACKS))
def test_the_sdks_session_tests_pass_through_the_stack(
    reports: dict[str, SdkSuiteReport], stack: str
) -> None:
    report = reports[stack]
    must, may = listed(stack)
    ran = set(report.passed) | set(report.failed)
    assert len(ran) >= 80, report.summary()  # the three files hold 86 tests in 0.24.0
    assert not report.skipped, report.summary()
    unlisted = {test: why for test, why in report.failed.items() if test not in must | may}
    assert not unlisted, "new failures through the stack:\n" + report.summary()
    stale = sorted(must - set(report.failed))
    assert not stale, f"listed in differences.toml but passed (remove them): {stale}"


def test_every_listed_test_exists(sdk_tests: Path) -> None:
    """A listed test that the SDK renamed or removed would hide nothing: say so."""
    names = {
        test.split("::")[0]: (sdk_tests / test.split("::")[0]).read_text()
        for entry in DIFFERENCES
        for test in entry["tests"]
    }
    for entry in DIFFERENCES:
        for test in entry["tests"]:
            file, function = test.split("::")
            assert f"def {function.split('[')[0]}(" in names[file], test
        assert entry["stacks"] == "all" or set(entry["stacks"]) <= set(STACKS), entry
        assert entry["reason"].strip(), entry
