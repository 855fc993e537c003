"""``memstack.json_text``: json.loads's answers, by the C scanner where a text allows."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstack.json_text import loads, scan

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(JSON, st.sampled_from(["", " ", "\n", "\t "]), st.sampled_from(["", " ", "\r\n"]))
def test_loads_answers_as_json_loads(value: object, before: str, after: str) -> None:
    text = before + json.dumps(value) + after
    assert loads(text) == json.loads(text)


@pytest.mark.parametrize(
    "text", ["", " ", "{", '{"a":1}x', '{"a":1} {"b":2}', "[1,]", "nul", "'a'", '{"a":1},{"b":2}']
)
def test_loads_refuses_as_json_loads(text: str) -> None:
    with pytest.raises(ValueError) as expected:
        json.loads(text)
    with pytest.raises(ValueError) as found:
        loads(text)
    assert str(found.value) == str(expected.value)


def test_loads_reads_what_json_loads_reads_beyond_strict_json() -> None:
    for text in ("NaN", "[Infinity,-Infinity]", '"\\ud800"', "1e400", "12345678901234567890"):
        assert repr(loads(text)) == repr(json.loads(text))


def test_scan_reads_a_value_where_it_starts_and_says_where_it_ends() -> None:
    text = '[{"n":1},{"role":"user"}]'
    assert scan(text, 1) == ({"n": 1}, 8)
    assert scan(text, 9) == ({"role": "user"}, len(text) - 1)
    for at in (0 + 8, len(text), 100):  # a comma, the end, past it
        with pytest.raises(ValueError, match=f"no JSON value at index {at}"):
            scan(text, at)
