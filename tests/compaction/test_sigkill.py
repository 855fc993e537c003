"""kill -9 at random moments while writing and compacting: nothing is ever lost."""

from __future__ import annotations

import asyncio
import os
import random
import time
from multiprocessing.process import BaseProcess
from pathlib import Path

from memstack.compaction import Mask
from memstack.compaction.records import is_record, parse_record
from memstack.history import history_problems

from ..forked import CONTEXT, redirect
from .sigkill_child import main, open_session, turn


def _write_until_killed(db: str, out: str) -> None:
    """The child: ``sigkill_child.main`` with its stdout in ``out``, line by line."""
    redirect(1, out, os.O_WRONLY | os.O_TRUNC)
    asyncio.run(main(db))


def _wait_until_ready(out: Path, child: BaseProcess, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not out.read_text().startswith("ready\n"):
        assert child.is_alive(), f"the child ended before it was ready: {child}"
        assert time.monotonic() < deadline, f"the child never said ready: {child}"
        time.sleep(0.005)


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
    out = tmp_path / "child.out"
    rng = random.Random(20240521)
    acked = rounds = 0
    last_lines: list[str] = []  # what each child printed last: where the kill landed
    while rounds < 8 or (len(set(last_lines)) < 2 and rounds < 16):
        out.write_text("")
        child = CONTEXT.Process(target=_write_until_killed, args=(str(db), str(out)))
        child.start()
        _wait_until_ready(out, child)
        time.sleep(rng.uniform(0.02, 0.5))
        child.kill()  # SIGKILL
        child.join(timeout=30)
        assert child.exitcode == -9, child.exitcode
        lines = out.read_text().split("\n")
        acks = [int(line.split()[1]) for line in lines if line.startswith("acked")]
        acked = max([acked, *acks])
        last_lines.append(([line.split()[0] for line in lines if line] or ["ready"])[-1])
        acked = asyncio.run(check(db, acked))
        rounds += 1
    assert acked > 20
    # Kills landed inside a compaction and outside one.
    assert {"compacting", "acked"} <= set(last_lines), last_lines
