"""memstack.options: one checker for every layer's constructor options."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from memstack.errors import ConfigurationError
from memstack.options import BatchSize, Count, Flag, MaybePositiveDuration, Options


class Demo(Options, layer="DemoLayer"):
    size: Count = 1
    ttl: MaybePositiveDuration = None
    batch: BatchSize = 10
    on: Flag = False


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"size": 0}, "size must be an int >= 1, not 0"),
        ({"size": True}, "size must be an int >= 1, not True"),
        ({"size": 2.0}, "size must be an int >= 1, not 2.0"),
        ({"ttl": float("nan")}, "ttl must be seconds > 0"),
        ({"ttl": timedelta(0)}, "ttl must be seconds > 0"),
        ({"batch": 10_001}, "batch must be an int from 1 to 10000, not 10001"),
        ({"on": 1}, "on must be True or False, not 1"),
        ({"sise": 3}, "unknown option 'sise' \\(options: size, ttl, batch, on\\)"),
    ],
)
def test_a_wrong_value_names_the_layer_the_option_and_what_it_accepts(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        Demo.check(**values)
    assert caught.value.layer == "DemoLayer"


def test_values_are_normalised_and_frozen() -> None:
    options = Demo.check(size=3, ttl=timedelta(minutes=5), batch=10_000)
    assert (options.size, options.ttl, options.batch, options.on) == (3, 300.0, 10_000, False)
    with pytest.raises(ValueError):
        options.size = 4  # type: ignore[misc]
