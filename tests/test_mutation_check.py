"""The mutation check's list stays true to the code: every mutant applies, names real tests."""

from __future__ import annotations

import pytest

from .mutants import MUTANTS, ROOT, Mutant

PROMISES = {"mask", "summaries", "ttl-expiry", "ttl-idle", "ttl-purge", "window", "aead"}
PROMISES |= {"redaction", "memory-layer-scope", "memory-recall-scope", "forget", "limit"}


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda mutant: mutant.name)
def test_every_mutant_applies_and_names_tests_that_exist(mutant: Mutant) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mutant.patch(mp)  # raises if its target was renamed
    for node in mutant.tests:
        path, _, name = node.partition("::")
        source = (ROOT / path).read_text(encoding="utf-8")
        assert not name or f"def {name}(" in source, node


def test_every_promise_of_the_readme_has_a_mutant() -> None:
    assert {p for p in PROMISES if not any(m.name.startswith(p) for m in MUTANTS)} == set()
