"""benchmarks/README.md and the scripts beside it name the same files and the same options."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
README = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
SCRIPTS = sorted(path.name for path in BENCHMARKS.glob("*.py"))
# A Python file named in prose or code: bench_x.py, benchmarks/x.py, memstack/bench/y.py …
NAMED = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*_?[a-z][a-z0-9_]*\.py)\b")
# A command line in a code span or block: the script (or `memstack bench NAME`), its options.
COMMAND = re.compile(
    r"(?:(?:benchmarks/)?\b(_?[a-z][a-z0-9_]*\.py)|memstack bench ([a-z]+))((?:[ \t]+[^\s`|]+)*)"
)


def missing_files(text: str) -> list[str]:
    """Python files ``text`` names that do not exist: a bare name is one in benchmarks/."""
    missing = []
    for name in NAMED.findall(text):
        path = ROOT / name if "/" in name and not name.startswith("benchmarks/") else None
        if path is None:
            path = BENCHMARKS / name.removeprefix("benchmarks/")
        if not path.is_file():
            missing.append(name)
    return missing


def test_every_python_file_the_readme_names_exists():
    assert missing_files(README) == []


def test_every_script_is_described():
    headings = [line.lower() for line in README.splitlines() if line.startswith("## ")]
    for script in SCRIPTS:
        assert script in README, f"benchmarks/README.md does not mention {script}"
        if script.startswith("bench_"):
            words = script.removesuffix(".py").replace("_", " ")
            assert any(script in h or words in h for h in headings), (
                f"{script} has no section of its own (a '## ' heading naming it)"
            )


def options(script: str) -> set[str]:
    return set(re.findall(r"""["'](--[a-z][a-z0-9-]*)["']""", (BENCHMARKS / script).read_text()))


def commands(text: str) -> list[tuple[str, list[str]]]:
    spans = re.findall(r"`([^`\n]+)`", text) + re.findall(r"^ {4}(python .+)$", text, re.M)
    found = []
    for span in spans:
        for script, bench, rest in COMMAND.findall(span):
            script = script or f"bench_{bench}.py"
            if (BENCHMARKS / script).is_file():
                found.append((script, re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest)))
    return found


@pytest.mark.parametrize("where", ["benchmarks/README.md", *(f"benchmarks/{s}" for s in SCRIPTS)])
def test_every_option_a_command_line_gives_a_script_exists(where: str):
    text = (ROOT / where).read_text(encoding="utf-8")
    for script, flags in commands(text):
        unknown = sorted(set(flags) - options(script) - {"--help"})
        assert unknown == [], f"{where}: {script} has no option {unknown}"


def test_the_checks_above_can_fail():
    assert commands("`python benchmarks/bench_scale.py --no-such-flag 3`") == [
        ("bench_scale.py", ["--no-such-flag"])
    ]
    assert commands("`memstack bench window --rounds 7 --bogus`") == [
        ("bench_window.py", ["--rounds", "--bogus"])
    ]
    assert missing_files("see `benchmarks/_production.py` and memstack/bench/needed.py") == [
        "benchmarks/_production.py"
    ]


def defaults(script: str) -> dict[str, str]:
    """``--flag -> default`` as the script's argparse gives it (literal defaults only)."""
    tree = ast.parse((BENCHMARKS / script).read_text(encoding="utf-8"))
    found = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
            continue
        flag = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else ""
        for keyword in node.keywords:
            if keyword.arg == "default" and isinstance(keyword.value, ast.Constant):
                found[str(flag)] = str(keyword.value.value)
    return found


def same(stated: str, actual: str | None) -> bool:
    stated = stated.replace(",", "") if stated.replace(",", "").isdigit() else stated
    try:
        return actual is not None and float(stated) == float(actual)
    except ValueError:
        return stated == actual


def table_defaults(text: str) -> list[tuple[str, dict[str, str]]]:
    """Rows of the README's script table: the script and the defaults its last cell states."""
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        script = re.fullmatch(r"`python benchmarks/(\w+\.py)[^`]*`", cells[0])
        if len(cells) == 4 and script:
            pairs = re.findall(r"(--[a-z-]+) ([^\s`-][^\s`]*)", cells[3])
            rows.append((script.group(1), dict(pairs)))
    return rows


def test_the_defaults_the_readme_states_are_the_scripts():
    rows = table_defaults(README)
    assert {script for script, _ in rows} >= {s for s in SCRIPTS if s.startswith("bench_")}
    for script, stated in rows:
        actual = defaults(script)
        wrong = {flag: (value, actual.get(flag)) for flag, value in stated.items()
                 if not same(value, actual.get(flag))}  # fmt: skip
        assert wrong == {}, f"{script}: README default -> script default: {wrong}"
