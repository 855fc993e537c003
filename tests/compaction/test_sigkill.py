"""kill -9 at random moments while writing and compacting: nothing is ever lost."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from memstack.compaction import Mask
from memstack.compaction.records import is_record, parse_record
from memstack.history import history_problems

from .sigkill_child import open_session, turn

CHILD = Path(__file__).with_name("sigkill_child.py")
ROOT = Path(__file__).resolve().parents[2]


async def check(db: Path, acked: int) -> int:
    """All acknowledged turns are stored, in order; the view is valid. Returns turns stored."""
    session = open_session(str(db))
    try:
        stored = await session.inner.get_items()
        raw = [item for item in stored if not is_record(item)]
        for item in stored:
            if is_record(item):
                parse_record(item)  # every record that reached the store is whole
        assert len(raw) % 4 == 0, "a turn was written in part"
        turns = len(raw) // 4
        assert acked <= turns <= acked + 1, (acked, turns)  # at most the one in flight
        assert raw == [item for n in range(turns) for item in turn(n)]
        view = await session.get_items()
        assert history_problems(view) == []
        start = 1 if view and view[0].get("role") == "developer" else 0
        tail = view[start:]
        assert tail == Mask().apply(raw[len(raw) - len(tail) :])
        return turns
    finally:
        session.inner.close()  # type: ignore[attr-defined]


def test_sigkill_at_random_moments_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "killed.db"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    rng = random.Random(20240521)
    acked = rounds = 0
    last_lines: list[str] = []  # what each child printed last: where the kill landed
    while rounds < 8 or (len(set(last_lines)) < 2 and rounds < 16):
        child = subprocess.Popen(
            [sys.executable, str(CHILD), str(db)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=env,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.02, 0.5))
        child.kill()
        child.wait(timeout=30)
        lines = child.stdout.read().split("\n")
        child.stdout.close()
        acks = [int(line.split()[1]) for line in lines if line.startswith("acked")]
        acked = max([acked, *acks])
        last_lines.append(([line.split()[0] for line in lines if line] or ["ready"])[-1])
        acked = asyncio.run(check(db, acked))
        rounds += 1
    assert acked > 20
    # Kills landed inside a compaction and outside one.
    assert {"compacting", "acked"} <= set(last_lines), last_lines
