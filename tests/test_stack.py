"""The one stack builder used by code, recipes and the CLI."""

from __future__ import annotations

import pytest

from memstack import ConfigurationError, LayerSpec, PassthroughSession, SessionLayer, build_stack
from memstack.testing import InMemorySession


class Tagged(SessionLayer):
    def __init__(self, inner, *, tag: str = "x") -> None:
        super().__init__(inner)
        self.tag = tag

    def repr_options(self) -> dict[str, object]:
        return {"tag": self.tag}


def test_specs_are_applied_bottom_to_top():
    stack = build_stack(
        InMemorySession("s"),
        [LayerSpec(Tagged, {"tag": "bottom"}), "passthrough", LayerSpec(Tagged, {"tag": "top"})],
    )
    assert [type(layer).__name__ for layer in stack] == [
        "Tagged",
        "PassthroughSession",
        "Tagged",
        "InMemorySession",
    ]
    assert repr(stack) == (
        "InMemorySession(session_id='s') → Tagged(tag='bottom') → PassthroughSession() → "
        "Tagged(tag='top')"
    )


def test_no_specs_returns_the_store():
    store = InMemorySession("s")
    assert build_stack(store, []) is store


def test_classes_and_names_are_equivalent():
    by_name = build_stack(InMemorySession("s"), [LayerSpec("passthrough")])
    by_class = build_stack(InMemorySession("s"), [PassthroughSession])
    assert type(by_name) is type(by_class) is PassthroughSession


def test_unknown_layer_lists_the_known_ones():
    with pytest.raises(
        ConfigurationError, match=r"unknown layer 'nope'; known layers: .*passthrough"
    ):
        build_stack(InMemorySession("s"), ["nope"])


def test_unknown_option_names_layer_field_and_allowed():
    with pytest.raises(
        ConfigurationError, match=r"^Tagged: unknown option\(s\) colour; allowed: tag$"
    ):
        build_stack(InMemorySession("s"), [LayerSpec(Tagged, {"colour": "red"})])


def test_non_layer_class_is_refused():
    with pytest.raises(ConfigurationError, match="not a memstack SessionLayer"):
        build_stack(InMemorySession("s"), [InMemorySession])  # type: ignore[list-item]


class Required(SessionLayer):
    def __init__(self, inner, *, ttl: float, size: int, tag: str = "x") -> None:
        super().__init__(inner)


def test_missing_required_option_names_layer_missing_and_allowed():
    with pytest.raises(
        ConfigurationError,
        match=r"^Required: missing required option\(s\) size, ttl; allowed: ttl, size, tag$",
    ):
        build_stack(InMemorySession("s"), [LayerSpec(Required, {"tag": "y"})])


def test_missing_required_option_of_a_named_layer():
    with pytest.raises(
        ConfigurationError, match=r"^TTLSession: missing required option\(s\) ttl; allowed: ttl, "
    ):
        build_stack(InMemorySession("s"), [LayerSpec("ttl")])
    with pytest.raises(ConfigurationError, match=r"^TTLSession: missing required option\(s\) ttl;"):
        build_stack(InMemorySession("s"), ["ttl"])
