"""Do the token-cost figures hold on other transcripts? Split one run's conversations in two.

    python benchmarks/tokens_halves.py bench-results/calls.csv [--source swe_coding]

Reads the per-call CSV that ``memstack bench tokens`` writes and prints, for two disjoint
halves of each transcript set (conversations alternately by id), every strategy's cost
relative to full history, its cost above a call with no history relative to full history's
(the history kept), and its needed-context recall, lenient and in context. A strategy
tuned on the whole set that only works on part of it shows up as two halves that disagree.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calls", type=Path, help="calls.csv from memstack bench tokens")
    parser.add_argument("--source", help="only this transcript set")
    args = parser.parse_args()
    with args.calls.open(encoding="utf-8") as file:
        rows = [row for row in csv.DictReader(file) if args.source in (None, row["source"])]
    conversations: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        if row["conversation"] not in conversations[row["source"]]:
            conversations[row["source"]].append(row["conversation"])
    half = {
        conversation: index % 2
        for ids in conversations.values()
        for index, conversation in enumerate(sorted(ids))
    }
    # (source, half, strategy) -> [cost, needed, kept, kept in context, floor cost]
    totals: dict[tuple[str, int, str], list[float]] = defaultdict(lambda: [0.0] * 5)
    for row in rows:
        total = totals[(row["source"], half[row["conversation"]], row["strategy"])]
        total[0] += float(row["cost"])
        total[1] += int(row["needed"])
        total[2] += int(row["needed_kept"])
        total[3] += int(row.get("needed_kept_in_context") or 0)
        total[4] += float(row.get("floor_cost") or 0.0)
    strategies = list(dict.fromkeys(row["strategy"] for row in rows))
    width = max(map(len, strategies), default=0)  # recipe rows name their layers: long
    for source in conversations:
        print(
            f"\n{source}: cost vs full, history vs full / needed-context recall, lenient and "
            "in context; half A | half B"
        )
        for strategy in strategies:
            cells = []
            for part in (0, 1):
                cost, needed, kept, in_context, floor = totals[(source, part, strategy)]
                full, _, _, _, full_floor = totals[(source, part, "full history")]
                history = (cost - floor) / (full - full_floor) * 100 if full > full_floor else 100
                recall = kept / needed * 100 if needed else 100.0
                strict = in_context / needed * 100 if needed else 100.0
                cells.append(
                    f"{cost / (full or 1.0) * 100:4.0f}% {history:4.0f}% / "
                    f"{recall:5.1f}% {strict:5.1f}%"
                )
            print(f"  {strategy:{width}}  {cells[0]}  |  {cells[1]}")


if __name__ == "__main__":
    main()
