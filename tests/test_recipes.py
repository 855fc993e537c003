"""Recipes: loading, validation messages, secrets, overrides."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import pytest

from memstack import PassthroughSession, RecipeError, SessionLayer
from memstack.recipes import from_recipe, load_recipe
from memstack.stack import LAYERS, LayerSpec
from memstack.testing import InMemorySession


class Keyed(SessionLayer):
    """A layer with a secret option and a duration, for recipe tests."""

    def __init__(self, inner, *, key: str = "", ttl: timedelta | float = 0, size: int = 1):
        super().__init__(inner)
        if size < 1:
            from memstack import ConfigurationError

            raise ConfigurationError(f"size must be >= 1, got {size}", layer="Keyed")
        self.key, self.ttl, self.size = key, ttl, size


@pytest.fixture(autouse=True)
def keyed_layer(monkeypatch):
    monkeypatch.setitem(LAYERS, "keyed", f"{__name__}:Keyed")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipe.toml"
    path.write_text(text)
    return path


def test_builds_bottom_to_top(tmp_path: Path):
    path = write(
        tmp_path,
        f"""
[backend]
url = "sqlite:///{tmp_path}/r.db"

[[layers]]
layer = "passthrough"

[[layers]]
layer = "keyed"
size = 3
""",
    )
    stack = from_recipe(path, session_id="u1")
    assert isinstance(stack, Keyed) and stack.size == 3
    assert isinstance(stack.inner, PassthroughSession)
    assert stack.session_id == "u1"


def test_secrets_come_from_the_environment(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("RECIPE_TEST_KEY", "s3cret")
    stack = from_recipe(
        {
            "backend": {"url": "sqlite://:memory:"},
            "layers": [{"layer": "keyed", "key": {"env": "RECIPE_TEST_KEY"}, "ttl": "30d"}],
        },
        session_id="u1",
    )
    assert stack.key == "s3cret" and stack.ttl == timedelta(days=30)
    assert (
        "s3cret"
        not in load_recipe(  # the description names the variable only
            {
                "backend": {"url": "sqlite://"},
                "layers": [{"layer": "keyed", "key": {"env": "RECIPE_TEST_KEY"}}],
            }
        ).describe()
    )


def provide_key(name: str) -> str:
    return f"from-provider-{name}"


def test_secrets_from_a_named_provider():
    stack = from_recipe(
        {
            "backend": {"url": "sqlite://"},
            "layers": [
                {"layer": "keyed", "key": {"provider": f"{__name__}:provide_key", "name": "k1"}}
            ],
        },
        session_id="u1",
    )
    assert stack.key == "from-provider-k1"


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        (
            [{"layer": "keyed", "key": "inline"}],
            r"layers\[0\] \(keyed\): field 'key' holds a secret; inline secrets are refused",
        ),
        (
            [{"layer": "keyed", "key": {"env": "MEMSTACK_SURELY_UNSET"}}],
            r"layers\[0\] \(keyed\): field 'key' reads environment variable "
            r"'MEMSTACK_SURELY_UNSET', which is not set",
        ),
        (
            [{"layer": "keyed", "colour": 1}],
            r"layers\[0\] \(keyed\): Keyed: unknown option\(s\) colour; allowed: key, ttl, size",
        ),
        ([{"layer": "nope"}], r"layers\[0\] \(nope\): unknown layer 'nope'; known layers:"),
        ([{"size": 1}], r"layers\[0\]: field 'layer' is required; allowed layers:"),
        (
            [{"layer": "keyed", "key": {"provider": "no.such:thing"}}],
            r"layers\[0\] \(keyed\): field 'key': key provider 'no.such:thing' not found",
        ),
    ],
)
def test_validation_names_source_layer_and_field(layers, message):
    with pytest.raises(RecipeError, match=r"^<recipe>: " + message):
        load_recipe({"backend": {"url": "sqlite://"}, "layers": layers}).validate(resolve=True)


def test_secrets_are_resolved_only_when_building(monkeypatch):
    recipe = load_recipe(
        {
            "backend": {"url": "sqlite://"},
            "layers": [{"layer": "keyed", "key": {"env": "RECIPE_LATE_KEY"}}],
        }
    )
    assert "env:RECIPE_LATE_KEY" in recipe.describe()
    with pytest.raises(RecipeError, match="'RECIPE_LATE_KEY', which is not set"):
        recipe.build("u1")
    monkeypatch.setenv("RECIPE_LATE_KEY", "late")
    assert recipe.build("u1").key == "late"


def test_value_errors_surface_at_validate(tmp_path: Path):
    recipe = load_recipe(
        {"backend": {"url": "sqlite://"}, "layers": [{"layer": "keyed", "size": 0}]}
    )
    with pytest.raises(
        RecipeError, match=r"layers\[0\] \(keyed\): Keyed: size must be >= 1, got 0"
    ):
        recipe.validate()


def test_file_errors(tmp_path: Path):
    with pytest.raises(RecipeError, match="no such recipe file"):
        load_recipe(tmp_path / "missing.toml")
    with pytest.raises(RecipeError, match="not valid TOML"):
        load_recipe(write(tmp_path, "[backend\nurl="))
    with pytest.raises(RecipeError, match=r"\[backend\]: field 'url' is required"):
        load_recipe(write(tmp_path, "[backend]\n"))
    with pytest.raises(RecipeError, match="unknown top-level key"):
        load_recipe(write(tmp_path, "[backend]\nurl='sqlite://'\n[extra]\n"))


def test_overrides(tmp_path: Path):
    recipe = load_recipe(
        {"backend": {"url": "postgresql://prod/db"}, "layers": [{"layer": "keyed", "size": 2}]},
        url="sqlite://",
        keyed={"size": 5},
    )
    assert recipe.url == "sqlite://" and recipe.layers[0].options["size"] == 5
    with pytest.raises(RecipeError, match="overrides for layers not in the recipe: window"):
        load_recipe({"backend": {"url": "sqlite://"}, "layers": []}, window={"max_items": 1})


PROVIDER_CALLS: list[str] = []


def recording_provider(name: str) -> str:
    PROVIDER_CALLS.append(name)
    return f"provided-{name}"


def test_validate_needs_no_secret_and_reads_none(monkeypatch):
    monkeypatch.delenv("RECIPE_PROD_KEY", raising=False)
    PROVIDER_CALLS.clear()
    recipe = load_recipe(
        {
            "backend": {"url": "sqlite://", "password": {"env": "RECIPE_DB_PASSWORD"}},
            "layers": [
                {"layer": "keyed", "key": {"env": "RECIPE_PROD_KEY"}},
                {"layer": "encrypted", "keyring": {"provider": f"{__name__}:recording_provider"}},
                {"layer": "encrypted", "key": {"env": "RECIPE_PROD_KEY"}},
            ],
        }
    )
    assert recipe.validate() == [
        "[backend].password: env:RECIPE_DB_PASSWORD",
        "layers[0] (keyed).key: env:RECIPE_PROD_KEY",
        f"layers[1] (encrypted).keyring: provider:{__name__}:recording_provider",
        "layers[2] (encrypted).key: env:RECIPE_PROD_KEY",
    ]
    assert PROVIDER_CALLS == []  # a provider may reach a vault: validate never calls it
    with pytest.raises(RecipeError, match="'RECIPE_DB_PASSWORD', which is not set"):
        recipe.validate(resolve=True)


def test_validate_without_secrets_still_checks_everything_else():
    def validate(layer: dict[str, object]) -> None:
        load_recipe({"backend": {"url": "sqlite://"}, "layers": [layer]}).validate()

    with pytest.raises(RecipeError, match="compress_min_bytes"):
        validate({"layer": "encrypted", "key": {"env": "X"}, "compress_min_bytes": -1})
    with pytest.raises(RecipeError, match=r"key provider 'no\.such:thing' not found"):
        validate({"layer": "encrypted", "keyring": {"provider": "no.such:thing"}})
    with pytest.raises(RecipeError, match="exactly one of key= or keyring="):
        validate({"layer": "encrypted", "key": {"env": "X"}, "keyring": {"env": "Y"}})


def test_validate_resolve_checks_the_url_scheme():
    recipe = load_recipe({"backend": {"url": "foo://x"}})
    assert recipe.validate() == []  # the form only
    with pytest.raises(RecipeError, match=r"<recipe>: \[backend\]: no backend loads foo:// URLs"):
        recipe.validate(resolve=True)


def test_missing_required_option_is_a_recipe_error_at_load():
    recipe = {
        "backend": {"url": "sqlite://"},
        "layers": [{"layer": "passthrough"}, {"layer": "ttl"}],
    }
    message = (
        r"^<recipe>: layers\[1\] \(ttl\): TTLSession: "
        r"missing required option\(s\) ttl; allowed: ttl, "
    )
    with pytest.raises(RecipeError, match=message):
        load_recipe(recipe)
    with pytest.raises(RecipeError, match=message):
        from_recipe(recipe, session_id="u1")
    # an override may supply it
    assert load_recipe(recipe, ttl={"ttl": "1h"}).validate() == []


def test_missing_required_option_is_a_recipe_error_when_stacking():
    # a Recipe assembled in code, not through load_recipe, is checked when stacked
    loaded = load_recipe({"backend": {"url": "sqlite://"}})
    recipe = dataclasses.replace(loaded, layers=(LayerSpec("compaction"),))
    message = (
        r"^<recipe>: layers\[0\] \(compaction\): CompactionSession: "
        r"missing required option\(s\) strategy;"
    )
    with pytest.raises(RecipeError, match=message):
        recipe.validate()
    with pytest.raises(RecipeError, match=message):
        recipe.stack_over(InMemorySession("u1"))


def test_the_memory_layers_store_comes_from_the_recipe(tmp_path: Path):
    recipe = load_recipe(
        {
            "backend": {"url": "sqlite://"},
            "memory": {"url": f"sqlite:///{tmp_path}/memory.db"},
            "layers": [{"layer": "memory", "scope": "u1"}],
        }
    )
    assert recipe.layers[0].options == {"scope": "u1"}
    assert recipe.validate() == []


def test_stacks_built_from_one_recipe_share_their_policies(monkeypatch, tmp_path: Path):
    # Thousands of live stacks of one recipe hold one of each immutable policy, not one each.
    from memstack import CompactionSession, EncryptedSession, SlidingWindowSession, TTLSession
    from memstack.crypto import generate_key

    monkeypatch.setenv("SHARE_KEY", generate_key())
    path = write(
        tmp_path,
        """
[backend]
url = "sqlite://:memory:"

[[layers]]
layer = "ttl"
ttl = "30d"

[[layers]]
layer = "encrypted"
keyring = { provider = "memstack.crypto:keyring_from_env", active = "SHARE_KEY" }

[[layers]]
layer = "compaction"
trigger = { tokens = 6000, target = 3000 }
strategy = [{ mask = { keep_last_outputs = 4 } }, { summarize = { summarizer = "extractive" } }]

[[layers]]
layer = "window"
max_tokens = 10000
low_watermark = 0.7
""",
    )
    recipe = load_recipe(path)
    a, b = (recipe.stack_over(InMemorySession(name)) for name in ("a", "b"))
    assert a.find(TTLSession).expiry is b.find(TTLSession).expiry
    assert a.find(EncryptedSession).keys is b.find(EncryptedSession).keys
    ca, cb = a.find(CompactionSession), b.find(CompactionSession)
    assert (ca.mask, ca.compactor, ca.trigger) == (cb.mask, cb.compactor, cb.trigger)
    assert ca.mask is cb.mask and ca.compactor is cb.compactor and ca.trigger is cb.trigger
    assert ca.counter is cb.counter
    wa, wb = a.find(SlidingWindowSession), b.find(SlidingWindowSession)
    assert wa.budget is wb.budget and wa.low is wb.low and wa.counter is wb.counter
    # Changed options are other policies, never an earlier stack's.
    other = load_recipe(path, compaction={"trigger": {"items": 6000}}).stack_over(
        InMemorySession("c")
    )
    assert other.find(CompactionSession).trigger != ca.trigger
    monkeypatch.setenv("SHARE_KEY", generate_key())
    rotated = recipe.stack_over(InMemorySession("d"))
    assert rotated.find(EncryptedSession).keys is not a.find(EncryptedSession).keys


def test_memory_url_overrides_the_memory_tables_url(tmp_path: Path) -> None:
    """Found by a new-user trial: ``memory={"url": …}`` is the memory *layer*'s options."""
    shipped = Path(__file__).resolve().parents[1] / "recipes" / "personal-assistant.toml"
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    recipe = load_recipe(shipped, url=f"sqlite:///{tmp_path / 'chat.db'}", memory_url=url)
    assert recipe.memory["url"] == url
    with pytest.raises(RecipeError, match=r"memory_url.*no \[memory\] table"):
        load_recipe({"backend": {"url": "sqlite://:memory:"}}, memory_url=url)
    with pytest.raises(RecipeError, match=r"\[memory\].*url"):
        load_recipe(shipped, memory_url="foo://x")
