"""The ``memstack`` command line, a process per command: output, exit codes, one-line errors."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memstack.crypto import generate_key

from .conftest import shared_data
from .forked import run_memstack

KEY = generate_key()
OTHER_KEY = generate_key()


def memstack(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "MEMSTACK_CLI_KEY": KEY, **(env or {})}
    full_env.pop("OPENAI_API_KEY", None)
    return run_memstack(*args, env=full_env, cwd=cwd, timeout=timeout)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("memstack: error: "), lines[0]
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    path = tmp_path / "stack.toml"
    path.write_text(f"""
[backend]
url = "sqlite:///{tmp_path / "cli.db"}"

[[layers]]
layer = "ttl"
ttl = "30d"

[[layers]]
layer = "encrypted"
key = {{ env = "MEMSTACK_CLI_KEY" }}

[[layers]]
layer = "window"
max_items = 3
""")
    return path


def history(tmp_path: Path) -> Path:
    path = tmp_path / "history.jsonl"
    items = [
        {"role": "user", "content": "Where is order A-1042?"},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "shipped"},
        {"role": "assistant", "content": "It has shipped."},
        {"role": "user", "content": "Thanks"},
    ]
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def test_help_lists_every_command():
    result = memstack("--help")
    assert result.returncode == 0
    for command in (
        "validate",
        "inspect",
        "stats",
        "purge",
        "rotate",
        "export",
        "import",
        "demo",
        "bench",
        "adopt",
        "repair",
    ):
        assert command in result.stdout


def test_validate_shows_the_chain(recipe: Path):
    result = memstack("validate", str(recipe))
    assert result.returncode == 0, result.stderr
    assert "ok: " in result.stdout
    assert "store(sqlite:///" in result.stdout
    assert "→ ttl(" in result.stdout and "→ encrypted(key=env:MEMSTACK_CLI_KEY)" in result.stdout
    assert KEY not in result.stdout


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "[backend]\nurl='sqlite://'\n[[layers]]\nlayer='window'\nmax_itemz=3\n",
            r"layers[0] (window): SlidingWindowSession: unknown option(s) max_itemz; allowed:",
        ),
        (
            "[backend]\nurl='sqlite://'\n[[layers]]\nlayer='encrypted'\nkey='inline'\n",
            "field 'key' holds a secret; inline secrets are refused",
        ),
        (
            "[backend]\nurl='sqlite://'\n[[layers]]\nlayer='window'\nmax_items=0\n",
            "layers[0] (window): SlidingWindowSession: max_items",
        ),
    ],
)
def test_validate_bad_fields_exit_2(tmp_path: Path, text: str, expected: str):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    result = memstack("validate", str(path))
    assert result.returncode == 2
    assert expected in one_line_error(result)


def test_missing_recipe_file(tmp_path: Path):
    result = memstack("validate", str(tmp_path / "nope.toml"))
    assert result.returncode == 2
    assert "nope.toml: no such recipe file" in one_line_error(result)


def test_import_inspect_stats_export_round_trip(recipe: Path, tmp_path: Path):
    imported = memstack("import", str(recipe), "--session", "u1", str(history(tmp_path)))
    assert imported.returncode == 0, imported.stderr
    assert "imported 5 items into session 'u1'" in imported.stdout

    inspected = memstack("inspect", str(recipe), "--session", "u1")
    assert inspected.returncode == 0, inspected.stderr
    lines = inspected.stdout.splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines if line[:1].isalpha()}
    assert rows["SlidingWindowSession"][0] == "1"  # the window shows the last user turn
    assert rows["EncryptedSession"][0] == "5" and rows["TTLSession"][0] == "5"
    assert rows["SQLiteSession"][0] == "5"
    assert "what the model is sent (1 item)" in inspected.stdout

    stats = memstack("stats", str(recipe), "--session", "u1")
    assert stats.returncode == 0, stats.stderr
    assert "history items   5" in stats.stdout and "view items      1" in stats.stdout

    out = tmp_path / "export.jsonl"
    exported = memstack("export", str(recipe), "--session", "u1", "-o", str(out))
    assert exported.returncode == 0, exported.stderr
    assert out.read_text() == history(tmp_path).read_text().replace('": ', '": ').replace(
        ", ", ", "
    )
    assert [json.loads(line) for line in out.read_text().splitlines()] == [
        json.loads(line) for line in history(tmp_path).read_text().splitlines()
    ]
    # The database holds no plaintext: the layers encrypt before storing.
    assert b"A-1042" not in (tmp_path / "cli.db").read_bytes()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "bad.jsonl:2: not JSON"),
        # JSON that no store keeps faithfully: named by its line too (a new-user trial).
        ('{"role": "user", "content": NaN}', "bad.jsonl:2: (message), field content: nan"),
        # Another layer's record (an export through a stack with compaction, a raw TTL
        # row): stored, it would reach the model or fail every later read.
        (
            '{"type": "memstack.compaction", "v": 1, "summary": []}',
            "bad.jsonl:2: a CompactionSession record, which no layer of this stack reads",
        ),
        (
            '{"__memstack_ttl__": 1, "t": 0.0, "item": {"role": "user", "content": "x"}}',
            "bad.jsonl:2: a TTLSession record, which no layer of this stack reads",
        ),
    ],
)
def test_import_rejects_bad_lines(recipe: Path, tmp_path: Path, line: str, message: str):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(f'{{"role": "user", "content": "ok"}}\n{line}\n')
    result = memstack("import", str(recipe), "--session", "u1", str(bad))
    assert result.returncode == 2
    assert message in one_line_error(result)


def test_a_path_that_cannot_be_opened_is_bad_input_named_in_one_line(recipe: Path, tmp_path: Path):
    """Found by a new-user trial: these exited 1 with a raw ``FileNotFoundError``."""
    missing = tmp_path / "nope.jsonl"
    result = memstack("bench", "tokens", str(missing), "--recipe", str(recipe))
    assert result.returncode == 2
    assert f"{missing}: cannot open: No such file or directory" in one_line_error(result)
    assert (
        memstack("import", str(recipe), "--session", "u3", str(history(tmp_path))).returncode == 0
    )
    out = tmp_path / "no-such-dir" / "x.jsonl"
    result = memstack("export", str(recipe), "--session", "u3", "-o", str(out))
    assert result.returncode == 2
    assert f"{out}: cannot open: No such file or directory" in one_line_error(result)


def test_a_negative_audit_limit_is_refused(recipe: Path):
    assert memstack("audit", str(recipe), "--limit", "2").returncode == 0
    result = memstack("audit", str(recipe), "--limit", "-1")
    assert result.returncode == 2 and "--limit" in result.stderr.splitlines()[-1]


def test_reading_commands_write_nothing(tmp_path: Path):
    """Found by a new-user trial: ``inspect``, ``stats`` and ``export`` through a recipe
    with TTL dated (rewrote) the rows of a session another recipe, without TTL, wrote; the
    app's own recipe then could not read it."""
    import sqlite3

    db = tmp_path / "app.db"
    layers = {
        "app": '[[layers]]\nlayer = "encrypted"\nkey = { env = "MEMSTACK_CLI_KEY" }\n',
        "ttl": '[[layers]]\nlayer = "ttl"\nttl = "30d"\n'
        '[[layers]]\nlayer = "encrypted"\nkey = { env = "MEMSTACK_CLI_KEY" }\n',
    }
    recipes = {}
    for name, text in layers.items():
        recipes[name] = tmp_path / f"{name}.toml"
        recipes[name].write_text(f'[backend]\nurl = "sqlite:///{db}"\n{text}')
    imported = memstack("import", str(recipes["app"]), "--session", "u:t", str(history(tmp_path)))
    assert imported.returncode == 0, imported.stderr

    def rows() -> list[str]:
        with sqlite3.connect(db) as conn:
            return [r for (r,) in conn.execute("select message_data from agent_messages")]

    before = rows()
    for command in ("inspect", "stats", "export"):
        result = memstack(command, str(recipes["ttl"]), "--session", "u:t")
        assert result.returncode == 0, result.stderr
        assert rows() == before, command
    stats = memstack("stats", str(recipes["app"]), "--session", "u:t")
    assert stats.returncode == 0 and "history items   5" in stats.stdout


def test_wrong_key_is_one_line_and_exit_1(recipe: Path, tmp_path: Path):
    assert (
        memstack("import", str(recipe), "--session", "u2", str(history(tmp_path))).returncode == 0
    )
    result = memstack(
        "inspect", str(recipe), "--session", "u2", env={"MEMSTACK_CLI_KEY": OTHER_KEY}
    )
    assert result.returncode == 1
    error = one_line_error(result)
    assert "EncryptedSession session 'u2'" in error and "key" in error


def test_debug_shows_the_traceback(recipe: Path, tmp_path: Path):
    memstack("import", str(recipe), "--session", "u3", str(history(tmp_path)))
    result = memstack(
        "--debug", "inspect", str(recipe), "--session", "u3", env={"MEMSTACK_CLI_KEY": OTHER_KEY}
    )
    assert result.returncode != 0 and "Traceback" in result.stderr


REFUSED = "postgresql+asyncpg://postgres@127.0.0.1:1/test"  # nothing listens on port 1


@pytest.mark.parametrize("layers", [False, True], ids=["bare store", "layers"])
def test_unreachable_database(tmp_path: Path, layers: bool):
    path = tmp_path / "store.toml"
    ttl = "[[layers]]\nlayer = 'ttl'\nttl = '30d'\n"
    path.write_text("[backend]\nurl = 'sqlite://'\n" + ttl * layers)
    result = memstack("stats", str(path), "--session", "u1", "--url", REFUSED)
    assert result.returncode == 1
    error = one_line_error(result)  # the store named, then the cause: a BackendError
    assert "session 'u1': SQLAlchemySession failed: ConnectionRefusedError" in error, error


@pytest.mark.parametrize(
    "args",
    [
        ["stats", "plain", "--session", "u1"],
        ["inspect", "plain", "--session", "u1"],
        ["export", "plain", "--session", "u1"],
        ["import", "plain", "--session", "u1", "HISTORY"],
        ["repair", "plain", "--session", "u1"],
        ["purge", "ttl", "--session", "u1"],
        ["purge", "ttl", "--session", "u1", "--older-than", "1d"],
        ["purge", "ttl", "--all"],
        ["rotate", "ttl", "--session", "u1"],
        ["rotate", "ttl", "--all"],
        ["adopt", "ttl", "--session", "u1"],
        ["adopt", "ttl", "--all"],
        ["sessions", "ttl"],
        ["forget", "ttl", "--user", "ann"],
        ["audit", "ttl"],
    ],
    ids=" ".join,
)
def test_every_command_reports_an_unreachable_store_as_backend_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
):
    from memstack.cli import main
    from memstack.errors import BackendError

    monkeypatch.setenv("MEMSTACK_CLI_KEY", KEY)
    recipes = {
        "plain": "",
        "ttl": "[[layers]]\nlayer = 'ttl'\nttl = '30d'\n"
        "[[layers]]\nlayer = 'encrypted'\nkey = { env = 'MEMSTACK_CLI_KEY' }\n",
    }
    path = tmp_path / f"{args[1]}.toml"
    path.write_text("[backend]\nurl = 'sqlite://'\n" + recipes[args[1]])
    argv = [str(path) if a == args[1] else a for a in args]
    argv = [str(history(tmp_path)) if a == "HISTORY" else a for a in argv]
    with pytest.raises(BackendError, match="ConnectionRefusedError"):
        main(["--debug", *argv, "--url", REFUSED])


def test_rotate_and_purge(recipe: Path, tmp_path: Path):
    assert (
        memstack("import", str(recipe), "--session", "u4", str(history(tmp_path))).returncode == 0
    )
    rotated = memstack("rotate", str(recipe), "--session", "u4")
    assert rotated.returncode == 0, rotated.stderr
    assert "re-encrypted" in rotated.stdout
    purged = memstack("purge", str(recipe), "--session", "u4")
    assert purged.returncode == 0, purged.stderr
    assert "purged 0 expired items" in purged.stdout
    # Key-free purge by the store's own write time: no key in the environment at all.
    by_age = memstack(
        "purge", str(recipe), "--session", "u4", "--older-than", "0s", env={"MEMSTACK_CLI_KEY": ""}
    )
    assert by_age.returncode == 0, by_age.stderr
    assert "no key used" in by_age.stdout


def test_purge_by_age_counts_one_row_as_one_row(recipe: Path, tmp_path: Path):
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"role": "user", "content": "Hi"}) + "\n")
    assert memstack("import", str(recipe), "--session", "u5", str(one)).returncode == 0
    time.sleep(1.1)  # SQLite's write times are whole seconds: older than 0s is the one before
    by_age = memstack("purge", str(recipe), "--session", "u5", "--older-than", "0s")
    assert by_age.returncode == 0, by_age.stderr
    assert by_age.stdout.startswith("purged 1 row older than 0s"), by_age.stdout
    assert memstack("import", str(recipe), "--session", "u5", str(one)).returncode == 0
    time.sleep(1.1)
    every = memstack("purge", str(recipe), "--all", "--older-than", "0s")
    assert every.returncode == 0, every.stderr
    assert every.stdout.startswith("purged 1 row older than 0s"), every.stdout
    assert "from 1 session;" in every.stdout


def test_purge_without_a_ttl_layer_says_so(tmp_path: Path):
    path = tmp_path / "plain.toml"
    path.write_text(f"[backend]\nurl = 'sqlite:///{tmp_path / 'p.db'}'\n")
    result = memstack("purge", str(path), "--session", "u1")
    assert result.returncode == 2
    assert "no layer in this recipe has purge_expired()" in one_line_error(result)


def test_demo_runs_offline(tmp_path: Path):
    result = memstack("demo", "--url", f"sqlite:///{tmp_path / 'demo.db'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "scripted model (offline" in result.stdout
    assert "You first asked about order A-1042." in result.stdout
    assert "tokens sent" in result.stdout


def test_bench_tokens_on_a_small_file(tmp_path: Path):
    data = shared_data("airline_tau.jsonl")
    small = tmp_path / "two.jsonl"
    small.write_text("".join(data.read_text().splitlines(keepends=True)[:2]))
    result = memstack("bench", "tokens", str(small), "--out", str(tmp_path / "out"), timeout=300)
    assert result.returncode == 0, result.stderr
    assert "full history" in result.stdout and "memstack" in result.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["meta"]["conversations"] == 2
    memstack_rows = [row for row in summary["strategies"] if row["kind"] == "memstack"]
    assert memstack_rows and all(row["invalid_views"] == 0 for row in memstack_rows)
    assert all(0 <= row["needed_context_recall"] <= 1 for row in summary["strategies"])
    full = next(row for row in summary["strategies"] if row["strategy"] == "full history")
    assert full["needed_context_recall"] == 1.0 and full["needed_tokens"] > 0
    assert list(summary["by_source"]) == ["two"]
    assert (tmp_path / "out" / "calls.csv").exists()


def test_bench_runs_a_script_benchmark_with_its_own_options():
    # The smallest script benchmark that says what it was given: its options reach the script.
    result = memstack("bench", "encrypted", "--items", "120", "--rounds", "1", "--tail", "7")
    assert result.returncode == 0, result.stderr
    assert "120 items" in result.stdout and "get_items(limit=7)" in result.stdout
    assert "bare SQLiteSession" in result.stdout


def test_unknown_options_are_refused_outside_script_benchmarks():
    result = memstack("validate", "x.toml", "--bogus")
    assert result.returncode == 2
    assert "unrecognized arguments: --bogus" in result.stderr


def test_a_reader_that_closes_early_leaves_no_traceback(tmp_path: Path):
    from agents.memory import SQLiteSession

    db = tmp_path / "many.db"
    store = SQLiteSession("big", db_path=str(db))
    # Far more than a pipe holds (64 KiB), so the export is still writing when the reader goes.
    items = [{"role": "user", "content": f"message {n} " + "x" * 200} for n in range(3000)]
    asyncio.run(store.add_items(items))
    store.close()
    path = tmp_path / "plain.toml"
    path.write_text(f"[backend]\nurl = 'sqlite:///{db}'\n")
    # Buffered, as in a user's shell (unbuffered, a lone big write to a closed pipe is cut short
    # without an error: there is nothing to handle).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    process = subprocess.Popen(
        [sys.executable, "-m", "memstack", "export", str(path), "--session", "big"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdout is not None and process.stderr is not None
    assert json.loads(process.stdout.readline())["content"].startswith("message 0 ")
    process.stdout.close()  # as `| head -1` does
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=600) == 141  # 128 + SIGPIPE, as a shell reports `yes | head -1`
    assert stderr == "", stderr
