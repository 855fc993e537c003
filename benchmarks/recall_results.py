"""Every LoCoMo question's search and recall on a filled store, as JSON: to diff two trees.

    PYTHONHASHSEED=0 PYTHONPATH=/work/main python benchmarks/recall_results.py \
        sqlite:////tmp/copy.db --scope big --out /tmp/main.json
    PYTHONHASHSEED=0 PYTHONPATH=. python benchmarks/recall_results.py \
        sqlite:////tmp/copy.db --scope big --out /tmp/branch.json
    cmp /tmp/main.json /tmp/branch.json

A speed change must not move results: per question, the ``search`` ids and scores (as
``float.hex``, to the bit) at ``--limit``, and the ``recall`` ids, tokens and text at
``--tokens``. The clock is fixed, so precedence's age decay is the same in every run; run
it on a copy of a ``bench_memory_scale.py --keep`` file (the default store, semantic recall
on).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from memstack.bench.memory_bench import load_locomo
from memstack.bench.transcripts import DATA_DIR
from memstack.memory import MemoryStore

# Any fixed time after the file was filled: the same ages in every run.
FIXED_NOW = 1_800_000_000.0


async def results(url: str, scope: str, limit: int, tokens: int) -> list[dict[str, Any]]:
    questions = [q.text for c in load_locomo(DATA_DIR / "locomo_dev.jsonl") for q in c.questions]
    store = MemoryStore.from_url(url, clock=lambda: FIXED_NOW)
    found: list[dict[str, Any]] = []
    try:
        for question in questions:
            searched = await store.search(scope, question, limit=limit)
            recalled = await store.recall(scope, question, max_tokens=tokens)
            found.append(
                {
                    "question": question,
                    "search": [[memory.id, score.hex()] for memory, score in searched],
                    "recall": [memory.id for memory in recalled.memories],
                    "tokens": recalled.tokens,
                    "text": recalled.text,
                }
            )
    finally:
        await store.close()
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--scope", default="big")
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--tokens", type=int, default=1_000)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    found = asyncio.run(results(args.url, args.scope, args.limit, args.tokens))
    args.out.write_text(json.dumps(found, indent=0, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(found)} questions -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
