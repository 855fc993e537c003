"""The memory modules (and governance, which drives them) reach no object's private parts.

``MemoryStore`` is a facade over modules of plain functions; a module calling
``store._something`` would tie it to the facade's internals again.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "memstack"


def _private_uses(source: str) -> list[str]:
    """``x._name`` where ``x`` is not ``self`` or ``cls`` (dunders are public protocol)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize(
    "path",
    sorted([*(PACKAGE / "memory").glob("*.py"), *(PACKAGE / "governance").glob("*.py")]),
    ids=lambda path: f"{path.parent.name}/{path.name}",
)
def test_no_private_access_across_objects(path: Path) -> None:
    assert _private_uses(path.read_text(encoding="utf-8")) == []


def test_the_check_finds_a_private_call() -> None:
    source = "async def f(store):\n    await store._log(1)\n    self._ok()\n    x.__len__()\n"
    assert _private_uses(source) == ["line 2: store._log"]
