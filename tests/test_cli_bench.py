"""``memstack bench``: real summaries through an OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .conftest import shared_data
from .fake_openai_server import CHAT, FakeOpenAI, Status


def bench(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    return subprocess.run(
        [sys.executable, "-m", "memstack", "bench", *args],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=600,
    )


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
    assert "[extractive summaries]" not in result.stdout


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
    assert "[extractive summaries]" in result.stdout


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
