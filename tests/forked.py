"""Processes of their own for tests, without paying memstack's import in each.

A new Python process spends about two seconds of CPU importing the Agents SDK before it
does anything, and the tests start well over a hundred: ``memstack`` commands, racing
writers, processes killed mid-write. ``CONTEXT`` forks each from a server that imported
memstack once and has run nothing since, so every one still has its own process-wide
state, environment, working directory and file descriptors. A few tests keep a real
``python -m memstack`` for what only the interpreter's own start and exit do (a closed
pipe, an installed package).
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

CONTEXT = multiprocessing.get_context("forkserver")
# One server per test process: every test that forks shares it, so one list for all.
CONTEXT.set_forkserver_preload(["tests.forkserver_preload"])


def redirect(fd: int, path: str, flags: int) -> None:
    """Points descriptor ``fd`` at ``path``, as a shell's ``<`` or ``>`` would."""
    opened = os.open(path, flags)
    os.dup2(opened, fd)
    os.close(opened)


def _run_main(
    argv: list[str], env: dict[str, str], cwd: str | None, stdin: str, out: str, err: str
) -> None:
    """The child: the environment, directory and descriptors given, then the CLI's ``main``."""
    import atexit

    os.environ.clear()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    redirect(0, stdin, os.O_RDONLY)
    redirect(1, out, os.O_WRONLY | os.O_TRUNC)
    redirect(2, err, os.O_WRONLY | os.O_TRUNC)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - multiprocessing swapped it for devnull
    sys.argv = ["memstack", *argv]
    from memstack.cli import main

    try:
        code = main(argv)
    finally:
        atexit._run_exitfuncs()  # as the interpreter would at exit; multiprocessing skips them
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(code)


def run_memstack(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    input: str | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """``memstack ARGS`` with ``env`` as its whole environment (default: this one's)."""
    environment = dict(os.environ if env is None else env)
    with tempfile.TemporaryDirectory(prefix="memstack-cli-") as scratch:
        stdin, out, err = (Path(scratch) / name for name in ("stdin", "stdout", "stderr"))
        stdin.write_text(input or "")
        out.touch()
        err.touch()
        child = CONTEXT.Process(
            target=_run_main,
            args=(
                list(args),
                environment,
                None if cwd is None else str(cwd),
                str(stdin),
                str(out),
                str(err),
            ),
        )
        child.start()
        child.join(timeout)
        if child.is_alive():
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired(["memstack", *args], timeout)
        code = child.exitcode
        assert code is not None
        return subprocess.CompletedProcess(
            ["memstack", *args],
            code,
            out.read_text(encoding="utf-8", errors="replace"),
            err.read_text(encoding="utf-8", errors="replace"),
        )
