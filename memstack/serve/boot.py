"""Boot ``memstack serve`` in a child process and watch it: for tests and ``bench server``.

    with boot(["recipes/dev-sqlite.toml", "--url", "sqlite:////tmp/chat.db"]) as server:
        urllib.request.urlopen(f"{server.url}/healthz")
        print(server.rss_bytes(), server.pids())
    print(server.returncode, server.log)             # after SIGTERM and the lifespan

Linux only for ``pids`` and ``rss_bytes`` (they read ``/proc``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BootError", "Server", "boot", "free_port"]


class BootError(RuntimeError):
    """The server exited, or did not answer ``/healthz`` in time; ``log`` says why."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _children() -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                # The name (field 2) may hold spaces: the parent pid follows its ")".
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        found.setdefault(parent, []).append(int(entry))
    return found


@dataclass
class Server:
    """A running ``memstack serve``: its address, processes and log."""

    process: subprocess.Popen[bytes]
    url: str
    log_path: Path
    returncode: int | None = None
    log: str = field(default="", repr=False)

    def pids(self) -> list[int]:
        """The server process and every process under it (uvicorn's workers)."""
        tree, pids, todo = _children(), [], [self.process.pid]
        while todo:
            pid = todo.pop()
            pids.append(pid)
            todo.extend(tree.get(pid, []))
        return pids

    def rss_bytes(self) -> int:
        """Resident memory of the server and its workers together."""
        total = 0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/statm") as statm:
                    total += int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            except OSError:  # a worker that just exited
                continue
        return total

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, as a process manager stops it; waits for the lifespan to finish."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.returncode = self.process.returncode
        self.log = self.log_path.read_text(encoding="utf-8", errors="replace")
        return self.returncode


@contextmanager
def boot(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float = 60.0,
) -> Iterator[Server]:
    """``python -m memstack serve *args`` on a free port; stopped (SIGTERM) on exit."""
    port = free_port()
    # The child imports the same memstack as this process (a checkout, not an install).
    here = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    log_path = Path(tempfile.mkstemp(prefix="memstack-serve-", suffix=".log")[1])
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "memstack", "serve", *args, "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": path, **(env or {})},
            cwd=cwd,
        )
    server = Server(process, f"http://127.0.0.1:{port}", log_path)
    try:
        _wait_until_up(server, timeout)
        yield server
    finally:
        server.stop()
        log_path.unlink(missing_ok=True)


def _wait_until_up(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            server.stop()
            raise BootError(f"the server exited ({server.returncode}):\n{server.log}")
        try:
            with urllib.request.urlopen(f"{server.url}/healthz", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    server.stop()
    raise BootError(f"the server did not answer within {timeout:.0f} s:\n{server.log}")
