"""A recipe's ``[memory]`` as a new user meets it: scope per user, keyless forgetting, errors.

Each test replays a defect of a first trial (issue 23) through the CLI or ``from_recipe``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memstack import from_recipe
from memstack.crypto import generate_key
from memstack.errors import RecipeError
from memstack.memory import MemoryStore
from memstack.recipes import load_recipe

from ..forked import run_memstack

KEY = generate_key()
ROOT = Path(__file__).resolve().parents[2]


def memstack(*args: str, key: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MEMORY_KEY", "ASSISTANT_KEY")}
    if key:
        env["MEMORY_KEY"] = env["ASSISTANT_KEY"] = KEY
    return run_memstack(*args, env=env, timeout=120)


def assistant(tmp_path: Path, *, extra: str = "") -> Path:
    """The shipped personal-assistant recipe, its databases moved into ``tmp_path``."""
    text = (ROOT / "recipes" / "personal-assistant.toml").read_text()
    text = text.replace("sqlite:///assistant.db", f"sqlite:///{tmp_path / 'chat.db'}")
    text = text.replace("sqlite:///assistant-memory.db", f"sqlite:///{tmp_path / 'memory.db'}")
    path = tmp_path / "assistant.toml"
    path.write_text(text + extra)
    return path


def seed(tmp_path: Path, scope: str, *texts: str) -> None:
    async def run() -> None:
        store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'memory.db'}", key=KEY)
        try:
            for text in texts:
                await store.remember(scope, text, kind="preference")
        finally:
            await store.close()

    asyncio.run(run())


def stored(tmp_path: Path, scope: str) -> list[str]:
    async def run() -> list[str]:
        store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'memory.db'}", key=KEY)
        try:
            return [m.text for m in await store.list_memories(scope)]
        finally:
            await store.close()

    return asyncio.run(run())


# -- the memory scope is the user of the session id -------------------------------------------
async def test_assistant_recipe_recalls_the_users_memories_in_each_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASSISTANT_KEY", KEY)
    recipe = assistant(tmp_path)
    await asyncio.to_thread(seed, tmp_path, "bob", "Bob prefers answers in French")
    for thread in ("bob:t1", "bob:t2"):
        session = from_recipe(recipe, session_id=thread)
        await session.add_items([{"role": "user", "content": "What language do I want?"}])
        items = await session.get_items()
        assert items[0]["role"] == "developer", thread
        assert "Bob prefers answers in French" in items[0]["content"]
    other = from_recipe(recipe, session_id="ann:t1")
    await other.add_items([{"role": "user", "content": "What language do I want?"}])
    assert [item["role"] for item in await other.get_items()] == ["user"]


def test_a_session_id_naming_no_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASSISTANT_KEY", KEY)
    with pytest.raises(
        RecipeError, match=r"session id 'bob' does not match .*'\{user\}:\{thread\}'"
    ):
        from_recipe(assistant(tmp_path), session_id="bob")


def test_user_sessions_pattern_and_explicit_scope(tmp_path: Path) -> None:
    recipe = load_recipe(
        assistant(tmp_path, extra='\n[governance]\nuser_sessions = "tenant/{user}/{thread}"\n')
    )
    assert recipe.memory_scope("tenant/bob/t1") == "bob"
    assert recipe.sample_session_id() == "tenant/user-1/thread-1"
    fixed = load_recipe(assistant(tmp_path), memory={"scope": "team"})
    assert fixed.memory_scope("anything") == "team"


def test_validate_says_which_scope_a_session_gets(tmp_path: Path) -> None:
    recipe = str(assistant(tmp_path))
    default = memstack("validate", recipe, key=False)
    assert default.returncode == 0, default.stderr
    assert "memory scope: session 'user-1:thread-1' → scope 'user-1'" in default.stdout
    bob = memstack("validate", recipe, "--session", "bob:t1", key=False)
    assert "memory scope: session 'bob:t1' → scope 'bob'" in bob.stdout
    bad = memstack("validate", recipe, "--session", "bob", key=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "session id 'bob' does not match" in bad.stderr


# -- forgetting a whole scope needs no key ----------------------------------------------------
def test_cli_forgets_a_user_and_a_scope_without_the_memory_key(tmp_path: Path) -> None:
    recipe = str(assistant(tmp_path))
    seed(tmp_path, "bob", "Bob prefers answers in French")
    seed(tmp_path, "ann", "Ann prefers tea", "Ann likes trains")
    user = memstack("forget", recipe, "--user", "bob", key=False)
    assert user.returncode == 0, user.stderr
    assert "removed 1 memory" in user.stdout
    scope = memstack("memory", "forget", recipe, "--scope", "ann", "--all", key=False)
    assert scope.returncode == 0, scope.stderr
    assert scope.stdout.strip() == "forgot 2 memories of scope 'ann'"
    assert stored(tmp_path, "bob") == [] and stored(tmp_path, "ann") == []
    # By key the memory key is needed (its digest finds the rows), and the error says so.
    by_key = memstack("memory", "forget", recipe, "--scope", "ann", "--key", "diet", key=False)
    assert by_key.returncode == 2 and "ASSISTANT_KEY" in by_key.stderr


# -- [memory] errors are one line, exit 2, naming file and table --------------------------------
@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('url = "foo://x"', "[memory]: MemoryStore: url must be a SQL URL"),
        ('url = "sqlite:///m.db"\nkeyy = { env = "K" }', "unknown option 'keyy'"),
        (
            "url = 5",
            "url must be a SQL URL (sqlite:///…, postgresql://…, mysql://…, mariadb://…), not 5",
        ),
        ('table_prefix = "x"', "url is required"),
        ('url = "sqlite:///m.db"\nmax_memory_tokens = 0', "max_memory_tokens must be None or"),
        ('url = "sqlite+pysqlite:///m.db"', "pysqlite driver is not async"),
    ],
)
@pytest.mark.parametrize("resolve", [False, True])
def test_memory_table_errors(tmp_path: Path, table: str, message: str, resolve: bool) -> None:
    path = tmp_path / "r.toml"
    path.write_text(
        f'[backend]\nurl = "sqlite:///{tmp_path / "c.db"}"\n\n[memory]\n{table}\n\n'
        '[[layers]]\nlayer = "memory"\n'
    )
    result = memstack("validate", str(path), *(["--resolve"] if resolve else []))
    assert result.returncode == 2, result
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"memstack: error: {path}: [memory]: "), result.stderr
    assert message in result.stderr


def _memory_recipe(tmp_path: Path, url: str, *, layer: bool = True) -> Path:
    path = tmp_path / "r.toml"
    path.write_text(
        f'[backend]\nurl = "sqlite:///{tmp_path / "c.db"}"\n\n[memory]\nurl = "{url}"\n\n'
        + ('[[layers]]\nlayer = "memory"\n' if layer else "")
    )
    return path


def test_validate_warns_of_a_memory_driver_this_machine_lacks(tmp_path: Path) -> None:
    """A CI machine without the [postgres] extra validates a PostgreSQL memory recipe with a
    warning, as it does a [backend] URL it cannot load; ``--resolve`` makes it the error."""
    shim = tmp_path / "shim"  # asyncpg unimportable in a fresh interpreter, as if not installed
    shim.mkdir()
    (shim / "asyncpg.py").write_text("raise ImportError('No module named asyncpg')\n")
    path = _memory_recipe(tmp_path, "postgresql://app@127.0.0.1:1/test")
    above = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(shim), above]))}

    def validate(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "memstack", "validate", str(path), *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)

    formed = validate()
    assert formed.returncode == 0, formed.stderr
    assert f"ok: {path}" in formed.stdout
    assert formed.stderr == (
        f"warning: {path}: [memory]: MemoryStore: cannot open postgresql:// URLs: No module "
        "named asyncpg (pip install memstack[postgres] or memstack[mysql]) "
        "(an error with --resolve)\n"
    )
    resolved = validate("--resolve")
    assert resolved.returncode == 2, resolved
    assert resolved.stderr == (
        f"memstack: error: {path}: [memory]: MemoryStore: cannot open postgresql:// URLs: "
        "No module named asyncpg (pip install memstack[postgres] or memstack[mysql])\n"
    )


@pytest.mark.parametrize("layer", [True, False], ids=["memory-layer", "forget-only"])
def test_validate_warns_of_a_memory_driver_plugin_this_machine_lacks(
    tmp_path: Path, layer: bool
) -> None:
    # Without a memory layer the table still serves `forget` and `memstack memory`.
    path = _memory_recipe(tmp_path, "postgresql+nosuchdriver://x/y", layer=layer)
    formed = memstack("validate", str(path))
    assert formed.returncode == 0, formed.stderr
    assert formed.stderr.count("\n") == 1, formed.stderr
    assert formed.stderr.startswith(f"warning: {path}: [memory]: "), formed.stderr
    assert "Can't load plugin" in formed.stderr and "(an error with --resolve)" in formed.stderr
    resolved = memstack("validate", str(path), "--resolve")
    assert resolved.returncode == 2, resolved
    assert resolved.stderr.startswith(f"memstack: error: {path}: [memory]: "), resolved.stderr
    assert "Can't load plugin" in resolved.stderr


# -- the CLI's output is its own --------------------------------------------------------------
def test_cli_prints_no_model_loader_progress_bars(tmp_path: Path) -> None:
    recipe = assistant(tmp_path)  # the default embedder: the ONNX model loads in this command
    seed(tmp_path, "ann", "Ann has a cat called Miso")
    found = memstack("memory", "search", str(recipe), "--scope", "ann", "cat")
    assert found.returncode == 0, found.stderr
    assert "Miso" in found.stdout
    assert found.stderr == "\n1 memory, 22 tokens\n"  # no bar, nothing else


# -- a memory the recipe's memory layer could never inject is refused -------------------------
def _tokens_of(count: int) -> str:
    """A text of exactly ``count`` o200k tokens."""
    from memstack.tokens import TokenCounter

    text = "apple" + " apple" * (count - 1)
    assert TokenCounter().count_text(text) == count
    return text


async def test_the_recipe_refuses_memories_its_memory_layer_could_never_inject(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its memory layer injects 600 tokens; a memory that fits the store's default cap
    (1,000) but not that block would be stored, searched and never seen (issue 23)."""
    from memstack.errors import MemoryTooLargeError

    monkeypatch.setenv("ASSISTANT_KEY", KEY)
    path = assistant(tmp_path)
    store = load_recipe(path).open_memory()
    try:
        longest = store.max_memory_tokens
        assert longest is not None and 500 < longest < 600
        with pytest.raises(MemoryTooLargeError, match="max_memory_tokens"):
            await store.remember("bob", _tokens_of(longest + 1), kind="fact")
        # The longest accepted, dated and qualified (the most a line adds), is injected.
        await store.remember(
            "bob", _tokens_of(longest), kind="fact", source="inferred", valid_from=1.7e9
        )
    finally:
        await store.close()
    session = from_recipe(path, session_id="bob:t1")
    await session.add_items([{"role": "user", "content": "apple?"}])
    [block, _] = await session.get_items()
    assert block["role"] == "developer" and _tokens_of(longest) in block["content"]


async def test_an_explicit_max_memory_tokens_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASSISTANT_KEY", KEY)
    path = assistant(tmp_path)
    path.write_text(path.read_text().replace("[memory]\n", "[memory]\nmax_memory_tokens = 900\n"))
    store = load_recipe(path).open_memory()
    try:
        assert store.max_memory_tokens == 900
    finally:
        await store.close()


def test_a_memory_layer_with_its_own_store_does_not_cap_the_memory_table() -> None:
    """A layer given a store in code never injects from ``[memory]``'s: its block size is
    no reason to refuse what the tools or ``memstack memory`` store there."""
    own = MemoryStore.from_url("sqlite://:memory:")
    recipe = load_recipe(
        {
            "backend": {"url": "sqlite://:memory:"},
            "memory": {"url": "sqlite://:memory:"},
            "layers": [{"layer": "memory", "store": own, "max_tokens": 60}],
        }
    )
    assert recipe.open_memory().max_memory_tokens == 1000  # the store's own default


def test_a_sync_memory_driver_without_a_memory_layer_names_file_and_table(tmp_path: Path) -> None:
    # The table still serves `forget` and `memstack memory`: its error names it as with a layer.
    path = _memory_recipe(tmp_path, "sqlite+pysqlite:///m.db", layer=False)
    for resolve in ([], ["--resolve"]):
        result = memstack("validate", str(path), *resolve)
        assert result.returncode == 2, result
        assert result.stderr.startswith(f"memstack: error: {path}: [memory]: "), result.stderr
        assert "pysqlite driver is not async" in result.stderr
