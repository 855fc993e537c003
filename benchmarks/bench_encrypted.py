"""Encrypted storage side by side: bare SQLite vs memstack's EncryptedSession vs the SDK's.

    python benchmarks/bench_encrypted.py                 # ~10k real items, 3 rounds
    python benchmarks/bench_encrypted.py --items 2000 --rounds 1

Every variant stores the same items (real transcripts from ../shared/data, customer
service and coding runs interleaved) into its own SQLite file through the SDK's
``SQLiteSession``, written in turn-sized batches (``_shared.long_history``). Reported, as
medians over rounds (each round runs every variant, order rotated): write time for all
items, a tail read (``get_items(limit=50)``, what the Runner does each turn with a
session limit), a full read, and the stored bytes (sum of ``message_data`` and the file
size after a checkpoint and VACUUM). Reads are warm: each is the median of repeated
reads by the same session in this process (200 tail reads, 5 full reads), so memstack's
variants find their opened envelopes in the process cache, as in a long-running server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _shared import long_history
from agents.extensions.memory import EncryptedSession as SdkEncryptedSession
from agents.memory import Session, SQLiteSession
from cryptography.fernet import Fernet

from memstack.bench.transcripts import DATA_DIR
from memstack.crypto import generate_key
from memstack.history import valid_view
from memstack.layers import EncryptedSession

DATA = DATA_DIR
BATCH = 8  # items per add_items: about one agent turn with a tool call or two


MEMSTACK_KEY, SDK_KEY = generate_key(), Fernet.generate_key().decode()
VARIANTS: dict[str, Callable[[SQLiteSession], Session]] = {
    "bare SQLiteSession": lambda store: store,
    "memstack Encrypted": lambda store: EncryptedSession(store, key=MEMSTACK_KEY),
    "memstack, compress off": lambda store: EncryptedSession(
        store, key=MEMSTACK_KEY, compress=False
    ),
    "SDK EncryptedSession": lambda store: SdkEncryptedSession("bench", store, SDK_KEY, ttl=10**9),
}


def stored_bytes(path: Path) -> tuple[int, int]:
    """Bytes of ``message_data`` and of the database file once compacted."""
    with sqlite3.connect(path) as db:
        data = db.execute(
            "SELECT SUM(LENGTH(CAST(message_data AS BLOB))) FROM agent_messages"
        ).fetchone()[0]
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db = sqlite3.connect(path)
    db.execute("VACUUM")
    db.close()
    return int(data), path.stat().st_size


async def measure(
    make: Callable[[SQLiteSession], Session], items: list[dict[str, Any]], tail: int, folder: Path
) -> dict[str, float]:
    path = folder / "store.db"
    store = SQLiteSession("bench", db_path=path)
    session = make(store)
    started = time.perf_counter()
    for start in range(0, len(items), BATCH):
        await session.add_items(items[start : start + BATCH])  # type: ignore[arg-type]
    write = time.perf_counter() - started

    tails = []
    for _ in range(200):
        started = time.perf_counter()
        got = await session.get_items(limit=tail)
        tails.append(time.perf_counter() - started)
    # A limit that cuts a call from its output: memstack's top layer leaves the output out.
    assert got in (items[-tail:], valid_view(items[-tail:])), "tail read returned something else"
    fulls = []
    for _ in range(5):
        started = time.perf_counter()
        got = await session.get_items()
        fulls.append(time.perf_counter() - started)
    assert got == items, "full read returned something else"
    store.close()
    data, file_size = stored_bytes(path)
    return {
        "write_s": write,
        "tail_ms": statistics.median(tails) * 1e3,
        "full_ms": statistics.median(fulls) * 1e3,
        "data_bytes": data,
        "file_bytes": file_size,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tail", type=int, default=50)
    args = parser.parse_args()

    items = long_history(args.items)
    plaintext = sum(len(json.dumps(item).encode()) for item in items)
    print(
        f"{len(items)} items, {plaintext / 1e6:.2f} MB as the SDK stores them (json.dumps); "
        f"{args.rounds} round(s), medians; tail = get_items(limit={args.tail})"
    )
    results: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    names = list(VARIANTS)
    for round_ in range(args.rounds):
        # Rotate the order each round so drift on a noisy machine hits every variant.
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            with tempfile.TemporaryDirectory() as folder:
                results[name].append(await measure(VARIANTS[name], items, args.tail, Path(folder)))

    def med(name: str, field: str) -> float:
        return statistics.median(r[field] for r in results[name])

    bare = "bare SQLiteSession"
    header = (
        f"{'variant':<24}{'write s':>9}{'tail ms':>9}{'× bare':>8}{'full ms':>9}{'× bare':>8}"
        f"{'data MB':>9}{'× plain':>9}{'file MB':>9}{'× bare':>8}"
    )
    print(header)
    print("-" * len(header))
    for name in names:
        print(
            f"{name:<24}{med(name, 'write_s'):>9.2f}"
            f"{med(name, 'tail_ms'):>9.2f}{med(name, 'tail_ms') / med(bare, 'tail_ms'):>8.2f}"
            f"{med(name, 'full_ms'):>9.0f}{med(name, 'full_ms') / med(bare, 'full_ms'):>8.2f}"
            f"{med(name, 'data_bytes') / 1e6:>9.2f}{med(name, 'data_bytes') / plaintext:>9.2f}"
            f"{med(name, 'file_bytes') / 1e6:>9.2f}"
            f"{med(name, 'file_bytes') / med(bare, 'file_bytes'):>8.2f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
