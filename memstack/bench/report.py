"""Benchmark output: the terminal table, CSV and JSON files, and PNG plots."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from memstack.bench.quality import Retention
from memstack.bench.replay import StrategyResult

__all__ = ["sources", "summary_rows", "table", "write_outputs"]

HEADERS = [
    "strategy",
    "calls",
    "input Mtok",
    "cached %",
    "cost $",
    "vs full",
    "invalid",
    "needed recall",
    "in context",
    "history vs full",
    "facts kept",
    "tool results kept",
]


def sources(results: Sequence[StrategyResult]) -> list[str]:
    """The transcript sets in a run, in order of first appearance."""
    return list(dict.fromkeys(call.source for call in results[0].calls)) if results else []


def summary_rows(results: Sequence[StrategyResult]) -> list[dict[str, Any]]:
    baseline = next((r for r in results if r.name == "full history"), results[0])
    base_cost = baseline.total("cost") or 1.0
    base_history = baseline.total("cost") - baseline.total("floor_cost")
    rows = []
    for result in results:
        inputs = result.total("input_tokens")
        needed = result.total("needed")
        rows.append(
            {
                "strategy": result.name,
                "kind": result.kind,
                "calls": len(result.calls),
                "input_tokens": int(inputs),
                "cached_tokens": int(result.total("cached_tokens")),
                "output_tokens": int(result.total("output_tokens")),
                "cached_share": result.total("cached_tokens") / inputs if inputs else 0.0,
                "cost_usd": result.total("cost"),
                "cost_vs_full": result.total("cost") / base_cost,
                "invalid_views": result.invalid,
                "needed_context_recall": result.total("needed_kept") / needed if needed else 1.0,
                "needed_context_recall_in_context": (
                    result.total("needed_kept_in_context") / needed if needed else 1.0
                ),
                "needed_tokens": int(needed),
                "history_cost_vs_full": _history_share(result, base_history),
                "fact_retention": Retention.mean([s for _, s in result.fact_retention]),
                "tool_retention": Retention.mean([s for _, s in result.tool_retention]),
            }
        )
    return rows


def _history_share(result: StrategyResult, base_history: float) -> float:
    """Cost above a call with no history, relative to full history's (history kept)."""
    above = result.total("cost") - result.total("floor_cost")
    return above / base_history if base_history > 0 else 1.0


def table(rows: Sequence[dict[str, Any]]) -> str:
    cells = [HEADERS] + [
        [
            row["strategy"],
            str(row["calls"]),
            f"{row['input_tokens'] / 1e6:.2f}",
            f"{row['cached_share'] * 100:.0f}%",
            f"{row['cost_usd']:.2f}",
            f"{row['cost_vs_full'] * 100:.0f}%",
            str(row["invalid_views"]),
            f"{row['needed_context_recall'] * 100:.1f}%",
            f"{row['needed_context_recall_in_context'] * 100:.1f}%",
            f"{row['history_cost_vs_full'] * 100:.0f}%",
            f"{row['fact_retention'] * 100:.0f}%",
            f"{row['tool_retention'] * 100:.0f}%",
        ]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in cells) for i in range(len(HEADERS))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _in_context(row: dict[str, Any]) -> float:
    return float(row.get("needed_context_recall_in_context", row["needed_context_recall"]))


def write_outputs(
    results: Sequence[StrategyResult],
    rows: Sequence[dict[str, Any]],
    out: Path,
    *,
    meta: dict[str, Any],
    by_source: dict[str, list[dict[str, Any]]] | None = None,
) -> list[Path]:
    """``calls.csv`` (one row per call), ``summary.json``, and PNG plots if matplotlib is there."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "calls.csv", out / "summary.json"]
    with written[0].open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=list(asdict(results[0].calls[0])))
        writer.writeheader()
        for result in results:
            writer.writerows(asdict(call) for call in result.calls)
    summary = {"meta": meta, "strategies": list(rows), "by_source": by_source or {}}
    written[1].write_text(json.dumps(summary, indent=2))
    written.extend(_plots(results, out))
    if by_source:
        written.extend(_scatter(by_source, out))
    return written


def _plots(results: Sequence[StrategyResult], out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    paths = []
    figure, axis = plt.subplots(figsize=(9, 5))
    for result in results:
        by_call: dict[int, float] = defaultdict(float)
        for call in result.calls:
            by_call[call.call] += call.cost
        total, xs, ys = 0.0, [], []
        for index in sorted(by_call):
            total += by_call[index]
            xs.append(index + 1)
            ys.append(total)
        axis.plot(xs, ys, label=result.name)
    axis.set(
        xlabel="model call within a conversation",
        ylabel="cumulative cost, all conversations ($)",
        title="Cumulative cost per call, per strategy",
    )
    axis.legend(fontsize=8)
    figure.tight_layout()
    paths.append(out / "cumulative_cost.png")
    figure.savefig(paths[-1], dpi=110)
    plt.close(figure)

    longest = max(
        {call.conversation for call in results[0].calls},
        key=lambda cid: sum(call.conversation == cid for call in results[0].calls),
    )
    figure, axis = plt.subplots(figsize=(9, 5))
    for result in results:
        calls = [call for call in result.calls if call.conversation == longest]
        axis.plot([c.call + 1 for c in calls], [c.input_tokens for c in calls], label=result.name)
    axis.set(xlabel="model call", ylabel="input tokens", title=f"Input tokens per call: {longest}")
    axis.legend(fontsize=8)
    figure.tight_layout()
    paths.append(out / "input_tokens.png")
    figure.savefig(paths[-1], dpi=110)
    plt.close(figure)
    return paths


def _scatter(by_source: dict[str, list[dict[str, Any]]], out: Path) -> list[Path]:
    """Cost against needed-context recall, one point per strategy, one panel per set."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    figure, axes = plt.subplots(1, len(by_source), figsize=(7 * len(by_source), 6), squeeze=False)
    for axis, (source, rows) in zip(axes[0], by_source.items(), strict=True):
        for row in rows:
            marker = "o" if row["kind"] == "memstack" else "s"
            x = row["cost_vs_full"] * 100
            y, strict = row["needed_context_recall"] * 100, _in_context(row) * 100
            # Hollow: lenient recall; filled: in context; a line joins a strategy's two.
            (dot,) = axis.plot([x], [strict], marker=marker, linestyle="none")
            axis.plot([x], [y], marker=marker, linestyle="none", fillstyle="none",
                      color=dot.get_color())  # fmt: skip
            axis.plot([x, x], [strict, y], color=dot.get_color(), linewidth=0.8, alpha=0.6)
            axis.annotate(
                row["strategy"], (x, strict), fontsize=6, xytext=(3, 3), textcoords="offset points"
            )
        axis.set(
            xlabel="cost, % of full history",
            ylabel="needed-context recall, % (filled: in context; hollow: lenient)",
            title=f"{source}: cost vs recall (circles: memstack)",
        )
        axis.grid(alpha=0.3)
    figure.tight_layout()
    path = out / "cost_vs_recall.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return [path]
