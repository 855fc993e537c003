"""Plain-text tables for the command line.

>>> print(table(["name", "n"], [("a", 1), ("bb", 22)]))
name  n
----  --
a     1
bb    22
>>> counted(1, "memory", "memories"), counted(3, "session")
('1 memory', '3 sessions')
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["counted", "table"]


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    cells = [list(map(str, headers)), *[list(map(str, row)) for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and its noun, singular for exactly one ("1 session", "2 sessions")."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
