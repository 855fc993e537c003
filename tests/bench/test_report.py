"""The benchmark's figures: in-context recall and the cost above a call with no history."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from memstack.bench.replay import CallRecord, StrategyResult
from memstack.bench.report import summary_rows, table, write_outputs

HALVES = Path(__file__).resolve().parents[2] / "benchmarks" / "tokens_halves.py"


def record(strategy: str, conversation: str, cost: float, kept: int, in_context: int) -> CallRecord:
    return CallRecord(
        strategy, "airline", conversation, 0, 1000, 0, 10, cost, True, 10, kept, in_context, 6.0
    )


def results() -> list[StrategyResult]:
    full = StrategyResult("full history", "baseline")
    full.calls = [record("full history", c, 10.0, 10, 10) for c in ("a", "b")]
    ours = StrategyResult("ours", "memstack")
    ours.calls = [record("ours", c, 8.0, 9, 6) for c in ("a", "b")]
    return [full, ours]


def test_rows_carry_both_recalls_and_the_share_of_history_cost() -> None:
    full, ours = summary_rows(results())
    assert full["needed_context_recall_in_context"] == 1.0
    assert ours["needed_context_recall"] == pytest.approx(0.9)
    assert ours["needed_context_recall_in_context"] == pytest.approx(0.6)
    assert ours["cost_vs_full"] == pytest.approx(0.8)
    # 6.0 of every call is paid with no history at all: 2.0 of the full 4.0 above it remain
    assert ours["history_cost_vs_full"] == pytest.approx(0.5)
    assert full["history_cost_vs_full"] == pytest.approx(1.0)
    lines = table([full, ours]).splitlines()
    assert "in context" in lines[0] and "history vs full" in lines[0]
    assert "60.0%" in lines[-1] and "50%" in lines[-1]


def test_summary_json_csv_and_the_halves_script_agree(tmp_path: Path) -> None:
    rows = summary_rows(results())
    write_outputs(results(), rows, tmp_path, meta={})
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["strategies"][1]["needed_context_recall_in_context"] == pytest.approx(0.6)
    with (tmp_path / "calls.csv").open() as file:
        first = next(csv.DictReader(file))
    assert first["needed_kept_in_context"] == "10" and first["floor_cost"] == "6.0"
    halves = subprocess.run(
        [sys.executable, str(HALVES), str(tmp_path / "calls.csv")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    ours = next(line for line in halves.splitlines() if line.strip().startswith("ours"))
    assert ours.split() == ["ours", "80%", "50%", "/", "90.0%", "60.0%", "|"] * 1 + [
        "80%", "50%", "/", "90.0%", "60.0%"
    ]  # fmt: skip
