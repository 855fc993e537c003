"""Durations: every duration option reads "5m" in a recipe, found by its type, not its name."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from memstack import RecipeError
from memstack.compaction import ResponsesCompact, Summarize
from memstack.durations import duration_options, parse_duration
from memstack.layers import CompactionSession, TTLSession
from memstack.recipes import from_recipe

from .conftest import REDIS_URL, require_service


def stack(*layers: dict[str, Any], url: str = "sqlite://:memory:", **backend: Any) -> Any:
    return from_recipe({"backend": {"url": url, **backend}, "layers": list(layers)}, session_id="d")


def test_every_ttl_duration_reads_text():
    ttl = stack({"layer": "ttl", "ttl": "30d", "idle_ttl": "12h", "purge_every": "5m"})
    assert isinstance(ttl, TTLSession)
    assert (ttl.ttl, ttl.idle_ttl, ttl.purge_every) == (30 * 86400, 12 * 3600, 300)


def test_a_strategy_timeout_reads_text():
    compaction = stack(
        {
            "layer": "compaction",
            "strategy": [
                {"mask": {}},
                {"summarize": {"summarizer": "extractive", "timeout": "2m"}},
            ],
        }
    )
    assert isinstance(compaction, CompactionSession)
    assert isinstance(compaction.compactor, Summarize)
    assert compaction.compactor.timeout == 120.0
    assert ResponsesCompact(model="m", client=object(), timeout=timedelta(seconds=9)).timeout == 9  # type: ignore[arg-type]


def test_duration_options_are_found_by_type_not_name():
    assert duration_options(TTLSession) == {"ttl", "idle_ttl", "purge_every"}
    assert duration_options(Summarize) == {"timeout"}
    # Counts are not durations, even where text would look like one.
    assert "purge_batch" not in duration_options(TTLSession)


@pytest.mark.parametrize(
    ("options", "field"),
    [({"purge_every": "soon"}, "purge_every"), ({"idle_ttl": "5 parsecs"}, "idle_ttl")],
)
def test_a_bad_duration_names_the_layer_and_field(options, field):
    with pytest.raises(RecipeError) as error:
        stack({"layer": "ttl", "ttl": "1h", **options})
    assert "layers[0] (ttl)" in str(error.value)
    assert f"field {field!r}" in str(error.value)
    assert "is not a duration" in str(error.value)


def test_text_in_a_count_option_is_refused_not_read_as_seconds():
    with pytest.raises(RecipeError, match="purge_batch"):
        stack({"layer": "ttl", "ttl": "1h", "purge_batch": "5m"})


async def test_the_redis_stores_own_ttl_reads_text():
    require_service("Redis", REDIS_URL)
    store = stack({"layer": "ttl", "ttl": "1h"}, url=REDIS_URL, ttl="2h").backend
    try:
        assert store._ttl == 7200  # the SDK's RedisSession takes whole seconds
    finally:
        await store.close()


def test_parse_duration_units():
    assert [
        parse_duration(t).total_seconds() for t in ("90s", "15m", "1.5h", "2d", "1w", "42")
    ] == [90, 900, 5400, 172800, 604800, 42]
