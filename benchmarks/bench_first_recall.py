"""The first ``recall`` in a fresh process, with the default (semantic) store.

    python benchmarks/bench_first_recall.py            # 5 fresh processes
    python benchmarks/bench_first_recall.py --runs 10

Each run is a new Python process that opens a SQLite file holding 1,000 memories (written
once, before the runs, with their vectors) and times, with ``time.perf_counter``: importing
``memstack.memory``, opening the store, and the first ``recall`` — which loads the ONNX
model (sha256 check included), the tokenizer and the scope's vectors, and embeds the
question. Target: first recall <= 1 s. The CPU time the process spent in that recall is
printed too: on a shared machine the wall time mostly measures the queue for a core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from memstack.bench.memory_bench import load_locomo
from memstack.bench.transcripts import DATA_DIR
from memstack.memory import MemoryStore

TARGET_S = 1.0
_CHILD = """
import time
start = time.perf_counter()
import asyncio, json, sys
from memstack.memory import MemoryStore
imported = time.perf_counter()

async def main():
    store = MemoryStore.from_url(sys.argv[1])
    opened, cpu = time.perf_counter(), time.process_time()
    found = await store.recall("u", "What did Caroline research?", max_tokens=1000)
    done, cpu_done = time.perf_counter(), time.process_time()
    await store.close()
    print(json.dumps({"import": imported - start, "first_recall": done - opened,
                      "cpu": cpu_done - cpu, "found": len(found)}))

asyncio.run(main())
"""


async def _fill(url: str) -> None:
    [conversation, *_] = load_locomo(DATA_DIR / "locomo_dev.jsonl")
    store = MemoryStore.from_url(url)
    try:
        texts = [turn.line for turn in conversation.turns][:1000]
        await store.remember_many([store.new_memory("u", t, source="observed") for t in texts])
    finally:
        await store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        url = f"sqlite:///{Path(scratch) / 'first.db'}"
        asyncio.run(_fill(url))
        runs = []
        for _ in range(args.runs):
            done = subprocess.run(
                [sys.executable, "-c", _CHILD, url], capture_output=True, text=True, check=True
            )
            runs.append(json.loads(done.stdout))
    firsts = sorted(run["first_recall"] for run in runs)
    cpus = sorted(run["cpu"] for run in runs)
    imports = sorted(run["import"] for run in runs)
    print(
        f"{args.runs} fresh processes: first recall median {statistics.median(firsts):.2f} s, "
        f"max {firsts[-1]:.2f} s (CPU time median {statistics.median(cpus):.2f} s); "
        f"import memstack.memory median {statistics.median(imports):.2f} s"
    )
    ok = statistics.median(firsts) <= TARGET_S
    print("ok" if ok else "ABOVE TARGET", f"(target {TARGET_S:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
