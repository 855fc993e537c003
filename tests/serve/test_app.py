"""The example server booted under uvicorn, over real HTTP: SQLite file and PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx2
import pytest

from memstack.crypto import generate_key
from memstack.serve.boot import Server, boot

from ..conftest import POSTGRES_URL, require_service
from ..fake_openai_server import CHAT, FakeOpenAI

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "personal-assistant.toml"


@pytest.fixture
def fake_model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def booted(
    url: str, tmp_path: Path, *extra: str, env: dict[str, str] | None = None
) -> AbstractContextManager[Server]:
    """personal-assistant.toml with its sessions and its memory at ``url``."""
    args = [str(RECIPE), "--url", url, "--memory-url", url, *extra]
    return boot(args, env={"ASSISTANT_KEY": generate_key(), **(env or {})}, cwd=tmp_path)


def check_clean_shutdown(server: Server) -> None:
    assert server.returncode in (0, -15), server.log  # uvicorn re-raises the SIGTERM
    assert "Application shutdown complete" in server.log
    assert "memstack serve: resources disposed" in server.log
    assert "Traceback" not in server.log, server.log


async def test_sqlite_file_with_an_agent(tmp_path: Path, fake_model: FakeOpenAI) -> None:
    """Turns run through the SDK Runner; the model is sent what memory pins."""
    env = {"OPENAI_BASE_URL": fake_model.url, "OPENAI_API_KEY": "test-key"}
    with booted(f"sqlite:///{tmp_path}/chat.db", tmp_path, "--model", "m", env=env) as server:
        async with httpx2.AsyncClient(base_url=server.url, timeout=30) as http:
            fact = {"text": "Ana is vegetarian", "kind": "preference"}
            made = await http.post("/users/ana/memories", json=fact)
            assert made.status_code == 201, made.text
            for message in ("Dinner ideas?", "And for lunch?"):
                turn = await http.post("/users/ana/threads/t1", json={"message": message})
                assert turn.status_code == 200, turn.text
                assert turn.json()["reply"]
            items = (await http.get("/users/ana/threads/t1")).json()["items"]
            other = (await http.get("/users/bob/threads/t1")).json()["items"]
    check_clean_shutdown(server)
    # Two runs, stored across requests; memory pinned at the head of the view.
    roles = [item.get("role") for item in items]
    assert roles == ["developer", "user", "assistant", "user", "assistant"]
    assert "vegetarian" in items[0]["content"]
    assert [items[1]["content"], items[3]["content"]] == ["Dinner ideas?", "And for lunch?"]
    assert other == []  # another user's thread: no history, no memory of Ana
    sent = fake_model.bodies(CHAT)
    assert len(sent) == 2
    assert "vegetarian" in str(sent[1]["messages"])  # injected into the model call
    assert "Dinner ideas?" in str(sent[1]["messages"])  # the first turn, read back


async def test_postgresql_echo(tmp_path: Path) -> None:
    """No model: get_items, then add_items of the turn; history persists between requests."""
    require_service("PostgreSQL", POSTGRES_URL)
    path = f"/users/u-{uuid.uuid4().hex[:12]}/threads/t1"
    with booted(POSTGRES_URL, tmp_path) as server:
        async with httpx2.AsyncClient(base_url=server.url, timeout=30) as http:
            first = (await http.post(path, json={"message": "one"})).json()
            fact = {"text": "Likes green tea", "kind": "preference"}
            memories = path.split("/threads")[0] + "/memories"
            made = await http.post(memories, json=fact)
            bad_kind = await http.post(memories, json={**fact, "kind": "rumour"})
            second = (await http.post(path, json={"message": "two"})).json()
            bad = await http.post(path, content=b"not json")
            items = (await http.get(path)).json()["items"]
            stats = (await http.get("/stats")).json()
    check_clean_shutdown(server)
    # What the process shares: one engine for sessions and memory, a cache within its budget
    # that the later reads of the thread hit.
    assert stats["engines"] >= 1
    assert 0 < stats["cache"]["bytes"] <= stats["cache"]["max_bytes"]
    kinds = stats["cache"]["kinds"].values()
    assert sum(kind["hits"] for kind in kinds) > 0
    assert sum(kind["bytes"] for kind in kinds) == stats["cache"]["bytes"]
    assert made.status_code == 201
    assert bad_kind.status_code == 400 and "kind must be one of" in bad_kind.json()["error"]
    assert (first["seen"], first["memory"], first["last_user_message"]) == (0, False, None)
    # The memory block, then the first turn's two items.
    assert (second["seen"], second["memory"], second["last_user_message"]) == (3, True, "one")
    assert bad.status_code == 400
    assert "green tea" in items[0]["content"]
    assert [(i["role"], i["content"]) for i in items[1:]] == [
        ("user", "one"),
        ("assistant", "You said: one"),
        ("user", "two"),
        ("assistant", "You said: two"),
    ]
