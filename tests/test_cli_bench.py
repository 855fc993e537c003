"""``memstack bench``: real summaries through an OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import IN_CI, shared_data
from .fake_openai_server import CHAT, FakeOpenAI, Status
from .forked import run_memstack


def bench(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    return run_memstack("bench", *args, env={**clean, **env}, timeout=600)


def one_long_conversation(tmp_path: Path) -> Path:
    """The first coding run: long enough for the 8k-trigger stack to summarise."""
    first = shared_data("swe_coding.jsonl").read_text(encoding="utf-8").splitlines()[0]
    path = tmp_path / "one.jsonl"
    path.write_text(first + "\n", encoding="utf-8")
    return path


def test_real_summaries_call_the_endpoint(tmp_path: Path):
    transcript = one_long_conversation(tmp_path)
    with FakeOpenAI() as server:
        result = bench(
            "tokens",
            str(transcript),
            "--real-summaries",
            "--out",
            str(tmp_path / "out"),
            env={"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": server.url},
        )
        calls = server.bodies(CHAT)
    assert result.returncode == 0, result.stderr
    assert calls, "no summary was asked of the endpoint"
    assert all(body["model"] == "gpt-4.1-mini" for body in calls)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["meta"]["summaries"] == "model"
    names = [row["strategy"] for row in summary["strategies"] if row["kind"] == "memstack"]
    assert names and not any("extractive" in name for name in names)
    assert "stand-in summaries]" not in result.stdout


def test_without_the_flag_summaries_are_extractive_and_labelled(tmp_path: Path):
    transcript = one_long_conversation(tmp_path)
    with FakeOpenAI() as server:
        result = bench(
            "tokens",
            str(transcript),
            "--out",
            str(tmp_path / "out"),
            env={"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": server.url},
        )
        assert server.bodies(CHAT) == []
    assert result.returncode == 0, result.stderr
    assert "[extractive stand-in summaries]" in result.stdout


def test_real_summaries_without_a_key_fail_before_replaying(tmp_path: Path):
    result = bench("tokens", str(one_long_conversation(tmp_path)), "--real-summaries", env={})
    assert result.returncode == 2
    assert "--real-summaries needs OPENAI_API_KEY" in result.stderr


def test_a_failing_endpoint_fails_the_run_instead_of_skewing_it(tmp_path: Path):
    transcript = one_long_conversation(tmp_path)
    with FakeOpenAI() as server:
        server.chat.extend([Status(400, "model not found")] * 5)
        result = bench(
            "tokens",
            str(transcript),
            "--real-summaries",
            "--out",
            str(tmp_path / "out"),
            env={"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": server.url},
        )
    assert result.returncode == 1
    assert "model not found" in result.stderr


# -- after a non-editable install ----------------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """memstack installed from this checkout as a user gets it: a built wheel, not editable."""
    target = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if build.returncode != 0:
        message = f"cannot build memstack's wheel: {build.stderr.strip()[-500:]}"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return target


def run_installed(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    # The installed copy comes first on the path, before this checkout's editable install.
    env["PYTHONPATH"] = str(site)
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )


def test_the_installed_package_is_the_one_run(installed: Path, tmp_path: Path):
    result = run_installed(
        installed, "-c", "import memstack; print(memstack.__file__)", cwd=tmp_path
    )
    assert result.stdout.strip() == str(installed / "memstack" / "__init__.py")


def test_script_benchmarks_outside_a_checkout_say_they_need_one(installed: Path, tmp_path: Path):
    result = run_installed(installed, "-m", "memstack", "bench", "overhead", cwd=tmp_path)
    assert result.returncode == 2
    error = result.stderr.strip()
    assert error.startswith("memstack: error: memstack bench overhead runs "), error
    assert "needs a checkout" in error and "git clone" in error
    assert "Traceback" not in result.stderr


def test_script_benchmarks_run_inside_a_checkout_with_the_package_installed(installed: Path):
    result = run_installed(installed, "-m", "memstack", "bench", "window", "--help", cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "--skip-replay" in result.stdout  # the script's own help: the script ran


def test_bench_tokens_works_installed_and_says_what_it_left_out(installed: Path, tmp_path: Path):
    small = tmp_path / "two.jsonl"
    lines = shared_data("airline_tau.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    small.write_text("".join(lines[:2]), encoding="utf-8")
    result = run_installed(
        installed, "-m", "memstack", "bench", "tokens", str(small), "--out", "out", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "the shipped recipes' stacks are left out" in result.stderr
    assert "full history" in result.stdout and "8k trigger" in result.stdout
