"""Salient tokens: the definition behind needed-context recall and identifier placeholders."""

from __future__ import annotations

import pytest

from memstack.compaction.salient import occurs, salient_tokens


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # paths, with or without a leading ./ or /, trailing punctuation dropped
        ("open src/app/models.py.", ["src/app/models.py"]),
        ("ls ./run.sh /tmp/out", ["./run.sh", "/tmp/out"]),
        # dotted names: modules, files, attributes
        ("see models.py and np.array", ["models.py", "np.array"]),
        # identifiers that look like code; plain words are not salient
        (
            "call parse_date on maxSize in HAT001 via JFK",
            ["parse_date", "maxSize", "HAT001", "JFK"],
        ),
        ("The Column would Save everything", []),
        ("__init__ and _private", ["__init__", "_private"]),
        # numbers of three characters or more
        (
            "lines 7, 42, 120 and 3.14 on 2024-05-01 at 12:30",
            ["120", "3.14", "2024-05-01", "12:30"],
        ),
        # quoted strings, also scanned for the other kinds
        ('grep -n "def save" x', ["def save"]),
        ("it's 'fix_it now' done", ["fix_it now", "fix_it"]),
        ("run `make test` please", ["make test"]),
        # apostrophes do not open quotes; too-short quotes are ignored
        ("don't stop, isn't it", []),
        ('a "ab" b', []),
        # each token once, in order of first appearance
        ("x_y then a/b then x_y", ["x_y", "a/b"]),
    ],
)
def test_salient_tokens(text: str, expected: list[str]) -> None:
    assert salient_tokens(text) == expected


@pytest.mark.parametrize(
    ("token", "text", "found"),
    [
        ("100", "took 100 ms", True),
        ("100", "took 1000 ms", False),
        ("models.py", "app/models.py:12", True),
        ("parse", "parse_date", False),
        ("src/a.py", "./src/a.py", True),
        ("x_y", "x_y", True),
        ("abc", "", False),
        ("abc", "zabc abc", True),
    ],
)
def test_occurs_needs_a_boundary_on_both_sides(token: str, text: str, found: bool) -> None:
    assert occurs(token, text) is found
