"""``memstack memory …`` on a recipe's ``[memory]`` table, and the shipped assistant recipe."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from memstack.crypto import generate_key
from memstack.errors import RecipeError
from memstack.layers.memory import MemorySession
from memstack.memory import MemoryStore
from memstack.recipes import load_recipe

from ..conftest import shared_data
from ..forked import run_memstack

KEY = generate_key()
ROOT = Path(__file__).resolve().parents[2]


def memstack(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMORY_KEY": KEY}
    # "should not hang": the memory benchmark is slow on a busy machine
    return run_memstack(*args, env=env, timeout=600)


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    path = tmp_path / "assistant.toml"
    path.write_text(f"""
[backend]
url = "sqlite:///{tmp_path / "chat.db"}"

[memory]
url = "sqlite:///{tmp_path / "memory.db"}"
key = {{ env = "MEMORY_KEY" }}

[[layers]]
layer = "memory"
max_tokens = 300
""")
    return path


def test_memory_commands_round_trip(
    recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_KEY", KEY)

    async def seed() -> str:
        store = load_recipe(recipe).open_memory()
        try:
            await store.remember("ana", "Prefers window seats on flights", kind="preference")
            await store.remember("ana", "prefers window seats on flights!", kind="preference")
            memory = await store.remember("ana", "Has a cat called Miso", kind="fact")
            return memory.id
        finally:
            await store.close()

    cat_id = asyncio.run(seed())
    listed = memstack("memory", "list", str(recipe), "--scope", "ana")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("\n") == 3 and "Miso" in listed.stdout

    found = memstack("memory", "search", str(recipe), "--scope", "ana", "flight seat")
    assert "window seats" in found.stdout and "Miso" not in found.stdout

    shown = memstack("memory", "show", str(recipe), "--scope", "ana", cat_id)
    assert json.loads(shown.stdout.split("history:")[0])["text"] == "Has a cat called Miso"
    assert "remembered" in shown.stdout

    dry = memstack("memory", "consolidate", str(recipe), "--scope", "ana", "--dry-run")
    assert dry.stdout.startswith("merge") and "would change 1" in dry.stderr
    assert memstack("memory", "consolidate", str(recipe), "--scope", "ana").returncode == 0
    listed = memstack("memory", "list", str(recipe), "--scope", "ana", "--all")
    assert listed.stdout.count("\n") == 3  # merged, not deleted

    out = tmp_path / "export.jsonl"
    memstack("memory", "export", str(recipe), "--scope", "ana", "-o", str(out))
    assert len(out.read_text().splitlines()) == 3

    refused = memstack("memory", "forget", str(recipe), "--scope", "ana")
    assert refused.returncode == 2 and "--all" in refused.stderr
    forgot = memstack("memory", "forget", str(recipe), "--scope", "ana", "--all")
    assert forgot.stdout.strip() == "forgot 3 memories of scope 'ana'"
    # Encrypted, then erased (the whole phrase: four letters can turn up in base64 by chance).
    assert b"cat called Miso" not in (tmp_path / "memory.db").read_bytes()


def test_forget_by_an_unknown_id_says_so(recipe: Path, tmp_path: Path) -> None:
    async def seed() -> str:
        store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'memory.db'}", key=KEY)
        try:
            return (await store.remember("ana", "Has a cat called Miso")).id
        finally:
            await store.close()

    cat_id = asyncio.run(seed())
    missing = memstack("memory", "forget", str(recipe), "--scope", "ana", "--id", "nope")
    assert missing.returncode == 2, missing
    assert missing.stdout == ""
    assert missing.stderr == "memstack: error: no memory 'nope' in scope 'ana'\n"
    # The id exists, but in another scope: not found either, and nothing is deleted.
    elsewhere = memstack("memory", "forget", str(recipe), "--scope", "bob", "--id", cat_id)
    assert elsewhere.returncode == 2 and f"no memory '{cat_id}' in scope 'bob'" in elsewhere.stderr
    found = memstack("memory", "forget", str(recipe), "--scope", "ana", "--id", cat_id)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "forgot 1 memory of scope 'ana'"
    # A key or a scope that matches nothing is already as asked: "forgot 0", exit 0.
    for selector in (["--key", "diet"], ["--all"]):
        none = memstack("memory", "forget", str(recipe), "--scope", "ana", *selector)
        assert none.returncode == 0, none.stderr
        assert none.stdout.strip() == "forgot 0 memories of scope 'ana'"


def test_memory_embed_command_backfills_vectors(recipe: Path, tmp_path: Path) -> None:
    async def seed() -> None:
        url = f"sqlite:///{tmp_path / 'memory.db'}"
        store = MemoryStore.from_url(url, key=KEY, embedder=None)
        await store.remember("ana", "Has a cat called Miso")
        await store.close()

    asyncio.run(seed())
    plain = recipe.read_text()
    recipe.write_text(plain.replace("[memory]\n", '[memory]\nembedder = "none"\n'))
    refused = memstack("memory", "embed", str(recipe), "--scope", "ana")
    assert refused.returncode == 2 and "needs a store with an embedder" in refused.stderr
    recipe.write_text(plain.replace("[memory]\n", '[memory]\nembedder = "hashing"\n'))
    done = memstack("memory", "embed", str(recipe), "--scope", "ana")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "embedded 1 memory of scope 'ana'"
    again = memstack("memory", "embed", str(recipe), "--scope", "ana")
    assert again.stdout.strip() == "embedded 0 memories of scope 'ana'"


def test_bench_memory_writes_summary(tmp_path: Path) -> None:
    locomo = tmp_path / "tiny.jsonl"
    data_file = shared_data("locomo_dev.jsonl")  # skips, or fails under CI=true, when absent
    source = data_file.read_text().splitlines()[0]
    data = json.loads(source)
    data["sessions"] = data["sessions"][:3]
    turns = {t["dia_id"] for s in data["sessions"] for t in s["turns"]}
    data["qa"] = [q for q in data["qa"] if set(q.get("evidence", [])) <= turns][:10]
    locomo.write_text(json.dumps(data) + "\n")
    result = memstack("bench", "memory", str(locomo), "--tokens", "300", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    rows = {row["strategy"]: row for row in summary["strategies"]}
    memstack_rows = {
        f"memstack {what}, {how} (300 tok)"
        for what in ("full-text", "+ all-MiniLM-L6-v2-int8")
        for how in ("defaults", "tuned on all", "left-out")
    }
    assert set(rows) == {
        "full context",
        "recent 300 tokens",
        "naive BM25 (300 tok)",
        *memstack_rows,
    }
    for row in rows.values():
        assert row["questions"] == len(data["qa"])
        assert 0 <= row["evidence_recall"] <= 1
    assert rows["full context"]["evidence_recall"] == 1.0
    for name in memstack_rows:
        assert rows[name]["mean_tokens"] <= 300
    # One conversation: nothing to choose on when it is left out, so the defaults decide.
    [fold] = summary["selection"]["full-text"]["folds"]
    assert fold["chosen"] == summary["selection"]["full-text"]["configs"][0]["config"]
    assert (tmp_path / "table.txt").exists()


def test_shipped_personal_assistant_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSISTANT_KEY", KEY)
    recipe = load_recipe(ROOT / "recipes" / "personal-assistant.toml", memory={"scope": "u1"})
    recipe.validate()
    assert recipe.describe().endswith("memory(max_tokens=600, scope='u1')")
    assert isinstance(recipe.open_memory(), MemoryStore)


def test_memory_layer_without_memory_table_is_a_recipe_error() -> None:
    recipe = load_recipe({"backend": {"url": "sqlite://:memory:"}, "layers": [{"layer": "memory"}]})
    with pytest.raises(RecipeError, match=r"no \[memory\] table"):
        recipe.validate()


def test_memory_table_refuses_inline_keys() -> None:
    with pytest.raises(RecipeError, match="inline secrets are refused"):
        load_recipe({"backend": {"url": "sqlite://:memory:"}, "memory": {"url": "x", "key": "k"}})


def test_recipe_builds_a_memory_session() -> None:
    recipe = load_recipe(
        {
            "backend": {"url": "sqlite://:memory:"},
            "memory": {"url": "sqlite://:memory:"},
            "layers": [{"layer": "memory", "scope": "ana"}],
        }
    )
    session = recipe.build("chat")
    assert isinstance(session, MemorySession) and session.scope == "ana"
