"""Recipes: a TOML file (or mapping) that names a store and the layers over it.

    >>> from memstack.recipes import from_recipe
    >>> stack = from_recipe(
    ...     {"backend": {"url": "sqlite://:memory:"}, "layers": [{"layer": "passthrough"}]},
    ...     session_id="u1",
    ... )
    >>> stack
    SQLiteSession(session_id='u1', db_path=':memory:') → PassthroughSession()

A recipe has a ``[backend]`` table (``url`` plus options for ``open_backend``) and an
ordered ``[[layers]]`` array, bottom to top; each entry's ``layer`` names the layer and
every other key is an option. Secrets never live in the file: an option that holds one
(``key``, ``password``, …) must be ``{ env = "NAME" }`` or
``{ provider = "module:function", … }``; a literal value is refused. Every duration option
(any option typed ``Seconds``: ``ttl``, ``purge_every``, a strategy's ``timeout``, …) may
be written ``"30d"``, ``"12h"``, ``"15m"``, ``"90s"``. An optional ``[governance]`` table sets
whole-store jobs: ``user_sessions`` (which session ids belong to a user, default
``"{user}:{thread}"``), ``audit_key`` (a secret reference) and ``actor``. An optional
``[cache]`` table sets the process's one cache budget: ``max_bytes = "256MB"``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.memory import Session

import memstack.cache as cache
from memstack.backends import open_backend
from memstack.durations import parse_duration
from memstack.errors import ConfigurationError, MissingDriverError, RecipeError
from memstack.stack import LAYERS, LayerSpec, build_stack, check_options, resolve_layer

if TYPE_CHECKING:
    from memstack.governance.users import UserSessions

__all__ = ["Recipe", "from_recipe", "load_recipe", "parse_duration"]

SECRET_OPTIONS = frozenset(
    {
        "key",
        "keys",
        "keyring",
        "password",
        "secret",
        "api_key",
        "legacy_sdk_key",
        "hash_key",
        "audit_key",
    }
)
GOVERNANCE_FIELDS = ("user_sessions", "audit_key", "actor")
# Required layer options a recipe fills in itself when it stacks: the memory layer's
# ``store`` is opened from the ``[memory]`` table.
RECIPE_SUPPLIED: Mapping[str, frozenset[str]] = {"memory": frozenset({"store"})}


@dataclass(frozen=True)
class Recipe:
    """A validated recipe: where it came from, its store URL and options, its layers."""

    source: str
    url: str
    backend_options: Mapping[str, Any]
    layers: tuple[LayerSpec, ...]
    governance: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: The ``[memory]`` table: a long-term ``MemoryStore`` (``url``, ``key``/``keyring``, …).
    memory: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def build(self, session_id: str) -> Session:
        """Open the store for ``session_id`` and stack the layers over it."""
        return self.stack_over(self.open_store(session_id))

    def open_store(self, session_id: str) -> Session:
        """Only the store, with no layer over it (and no layer's secret resolved)."""
        options = self._backend_options(resolve=True)
        try:
            return open_backend(self.url, session_id, **options)
        except ConfigurationError as exc:
            raise RecipeError(f"{self.source}: [backend]: {exc}") from exc

    def stack_over(self, session: Session) -> Session:
        """These layers over an already open ``session`` (a store or a test double).

        Secret references are resolved here, not when the recipe is loaded, so a job that
        only needs the store (a key-free purge) runs without the secrets.
        """
        return self._stack_over(session, resolve=True)

    def validate(self, *, resolve: bool = False) -> list[str]:
        """Construct every layer over an in-memory store: checks option values offline.

        Secrets are not needed: each reference is checked for form (a provider must be
        importable) and a generated stand-in takes its place, so CI can check a recipe
        without production secrets. ``resolve=True`` reads them as ``build`` would, and
        checks that a backend loads the store URL's scheme and that the ``[memory]`` URL's
        driver is installed (connecting nowhere).
        Returns the references left unresolved, as ``"layers[1] (encrypted).key: env:X"``.
        """
        from memstack.backends.open import check_url
        from memstack.testing.memory import InMemorySession

        self._backend_options(resolve=resolve)
        if resolve:  # not by default: a dialect may come from a plugin CI does not install
            try:
                check_url(self.url)
            except ConfigurationError as exc:
                raise RecipeError(f"{self.source}: [backend]: {exc}") from exc
            self._check_memory_driver()
        self._stack_over(InMemorySession(self.sample_session_id()), resolve=resolve)
        if resolve:
            return []
        tables = [
            ("[backend]", self.backend_options),
            ("[governance]", self.governance),
            ("[memory]", self.memory),
        ]
        tables += [(_where(i, spec.layer), spec.options) for i, spec in enumerate(self.layers)]
        return [
            f"{where}.{field}: {_shown(value)}"
            for where, options in tables
            for field, value in _references(options)
        ]

    def _check_memory_driver(self) -> None:
        """The ``[memory]`` URL's driver loads here, memory layer or not (``forget`` and
        ``memstack memory`` open the store too)."""
        if not self.memory:
            return
        from memstack.memory.database import load_driver

        try:
            load_driver(self.memory["url"])
        except ConfigurationError as exc:
            raise RecipeError(f"{self.source}: [memory]: {exc}") from exc

    def open_memory(self, *, resolve: bool = True, keys: bool = True) -> Any:
        """The ``MemoryStore`` of the ``[memory]`` table (secrets resolved now).

        ``keys=False`` opens it without its key or keyring, reading no secret: enough to
        forget a whole scope or one memory by id (a retention job, ``forget --user``),
        which match on plain columns; searching, reading or writing needs the key.
        ``resolve=False`` (``validate``) puts stand-ins for what this machine cannot give:
        secrets, and an in-memory store for a URL whose driver is not installed here.
        """
        from memstack.memory import MemoryStore

        if not self.memory:
            raise RecipeError(f"{self.source}: no [memory] table (needed by the memory layer)")
        options = {
            key: _resolve_secret(
                value, source=self.source, where="[memory]", field=key, resolve=resolve
            )
            for key, value in self.memory.items()
            if keys or (key not in SECRET_OPTIONS and not _is_reference(value))
        }
        url = options.pop("url")
        try:
            store = MemoryStore.from_url(url, **options)
        except MissingDriverError as exc:
            if resolve:
                raise RecipeError(f"{self.source}: [memory]: {exc}") from exc
            # Checking only (``validate``, which warns of it): another machine may have the
            # driver, so the layers are checked over an in-memory stand-in, as over the
            # generated stand-ins of secrets. Its engine options are that driver's.
            options.pop("engine_kwargs", None)
            store = MemoryStore.from_url("sqlite://:memory:", **options)
        except ConfigurationError as exc:
            raise RecipeError(f"{self.source}: [memory]: {exc}") from exc
        if keys and "max_memory_tokens" not in options:
            self._fit_memories(store)
        return store

    def _fit_memories(self, store: Any) -> None:
        """Cap the memories ``store`` accepts at what every memory layer here can inject.

        A memory longer than a layer's block would be stored and searched but never shown
        to the model; refused, the caller learns it (``README``, "Sizes"). The store's own
        default (1,000 tokens) stays the cap when the blocks are bigger.
        """
        from memstack.layers.memory import DEFAULT_MAX_TOKENS
        from memstack.memory.ranking import HEADER, longest_injectable

        fits = [
            longest_injectable(budget, header, store.count_tokens)
            for spec in self.layers
            if spec.layer == "memory"
            and "store" not in spec.options  # a store of its own: it never injects from ours
            and isinstance(budget := spec.options.get("max_tokens", DEFAULT_MAX_TOKENS), int)
            and isinstance(header := spec.options.get("header", HEADER), str)
        ]  # options of other types: the layer refuses them when it is built
        if fits and (store.max_memory_tokens is None or min(fits) < store.max_memory_tokens):
            store.max_memory_tokens = min(fits)

    def user_sessions(self) -> UserSessions:
        """The ``[governance] user_sessions`` pattern (default ``"{user}:{thread}"``)."""
        from memstack.governance.users import DEFAULT_PATTERN, UserSessions

        pattern = self.governance.get("user_sessions", DEFAULT_PATTERN)
        try:
            return UserSessions(pattern)
        except ConfigurationError as exc:
            raise RecipeError(f"{self.source}: [governance]: {exc}") from exc

    def memory_scope(self, session_id: str) -> str | None:
        """The memory scope a session gets: the memory layer's ``scope`` if the recipe
        sets one, else the user its id names by ``[governance] user_sessions`` (``bob``
        for ``bob:t1``), the scope ``memory_tools`` and ``forget --user`` use too.
        None when the recipe has no memory layer.

        A session id the pattern does not match names no user: a ``RecipeError`` rather
        than a scope of its own, whose memories no tool or erasure would ever find.
        """
        specs = [spec for spec in self.layers if spec.layer == "memory"]
        if not specs:
            return None
        scope = specs[0].options.get("scope")
        if scope is not None:
            return str(scope)
        users = self.user_sessions()
        user = users.user_of(session_id)
        if user is None:
            raise RecipeError(
                f"{self.source}: layers ({specs[0].layer}): session id {session_id!r} does not "
                f"match [governance] user_sessions {users.pattern!r}, so it names no user "
                "whose memories to recall; use session ids of that form, set user_sessions, "
                "or give the memory layer a scope"
            )
        return user

    def sample_session_id(self) -> str:
        """A session id of the recipe's ``user_sessions`` form (what ``validate`` builds)."""
        return self.user_sessions().pattern.format(user="user-1", thread="thread-1")

    def _backend_options(self, *, resolve: bool) -> dict[str, Any]:
        return {
            field: _resolve_secret(
                value, source=self.source, where="[backend]", field=field, resolve=resolve
            )
            for field, value in self.backend_options.items()
        }

    def _stack_over(self, session: Session, *, resolve: bool) -> Session:
        for index, spec in enumerate(self.layers):
            where = _where(index, spec.layer)
            options = {
                field: _resolve_secret(
                    value, source=self.source, where=where, field=field, resolve=resolve
                )
                for field, value in spec.options.items()
            }
            if spec.layer == "memory" and "store" not in options:
                options["store"] = self.open_memory(resolve=resolve)
            if spec.layer == "memory" and "scope" not in options:
                options["scope"] = self.memory_scope(session.session_id)
            try:
                session = build_stack(session, [LayerSpec(spec.layer, options)])
            except ConfigurationError as exc:
                raise RecipeError(f"{self.source}: {where}: {exc}") from exc
        return session

    def governance_options(self) -> dict[str, Any]:
        """The ``[governance]`` table with its secret references resolved."""
        return {
            name: _resolve_secret(value, source=self.source, where="[governance]", field=name)
            for name, value in self.governance.items()
        }

    def describe(self) -> str:
        """The chain bottom to top, as ``repr`` of a built stack would show it."""
        parts = [f"store({self.url})"]
        for spec in self.layers:
            name = spec.layer if isinstance(spec.layer, str) else spec.layer.__name__
            options = ", ".join(f"{key}={_shown(value)}" for key, value in spec.options.items())
            parts.append(f"{name}({options})")
        return " → ".join(parts)


def _where(index: int, layer: object) -> str:
    return f"layers[{index}] ({layer})"


def _is_reference(value: Any) -> bool:
    return isinstance(value, Mapping) and bool(set(value) & {"env", "provider"})


def _shown(value: Any) -> str:
    if _is_reference(value):
        return f"env:{value['env']}" if "env" in value else f"provider:{value['provider']}"
    return repr(value)


def _check_value(value: Any, *, source: str, where: str, field: str) -> Any:
    """Refuse inline secrets; keep references."""
    if _is_reference(value):
        if "env" in value and not isinstance(value["env"], str):
            raise RecipeError(f"{source}: {where}: field {field!r}: env must name a variable")
        if "provider" in value and ":" not in str(value["provider"]):
            raise RecipeError(
                f'{source}: {where}: field {field!r}: write provider = "package.module:function"'
            )
        return value
    if field in SECRET_OPTIONS:
        raise RecipeError(
            f"{source}: {where}: field {field!r} holds a secret; inline secrets are refused, "
            f'write {field} = {{ env = "NAME" }} or {{ provider = "module:function" }}'
        )
    if isinstance(value, Mapping):  # nested tables (a summariser's api_key, …)
        return {k: _check_value(v, source=source, where=where, field=k) for k, v in value.items()}
    if isinstance(value, list):
        return [_check_value(v, source=source, where=where, field=field) for v in value]
    return value


def _references(options: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``(field, reference)`` for every secret reference in ``options``, at any depth."""
    found: list[tuple[str, Any]] = []
    for field, value in options.items():
        if _is_reference(value):
            found.append((field, value))
        elif isinstance(value, Mapping):
            found.extend(_references(value))
        elif isinstance(value, list):
            for entry in value:
                found.extend(_references({field: entry}))
    return found


def _resolve_secret(
    value: Any, *, source: str, where: str, field: str, resolve: bool = True
) -> Any:
    """The value behind an ``{env=…}`` or ``{provider=…}`` reference, at any depth.

    With ``resolve=False`` a generated stand-in replaces it: nothing secret is read.
    """

    def inner(v: Any, field: str) -> Any:
        return _resolve_secret(v, source=source, where=where, field=field, resolve=resolve)

    if isinstance(value, Mapping) and not _is_reference(value):
        return {k: inner(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [inner(v, field) for v in value]
    if not _is_reference(value):
        return value
    if "env" in value:
        name = value["env"]
        if not resolve:
            return _stand_in(field)
        if name not in os.environ:
            raise RecipeError(
                f"{source}: {where}: field {field!r} reads environment variable "
                f"{name!r}, which is not set"
            )
        return os.environ[name]
    target = str(value["provider"])
    module, _, attr = target.partition(":")
    try:
        provider = getattr(import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise RecipeError(
            f"{source}: {where}: field {field!r}: key provider {target!r} not found "
            '(write provider = "package.module:function")'
        ) from exc
    if not resolve:
        return _stand_in(field)
    try:
        return provider(**{k: v for k, v in value.items() if k != "provider"})
    except ConfigurationError as exc:
        raise RecipeError(f"{source}: {where}: field {field!r}: {exc}") from exc


def _stand_in(field: str) -> Any:
    """A fresh value of the right shape for a secret ``validate`` does not read."""
    from memstack.crypto import Keyring, generate_key

    if field == "keyring":
        return Keyring({"validation": generate_key()}, active="validation")
    return generate_key()  # a valid key, and a usable string for every other secret


def read_recipe_file(path: str | Path) -> dict[str, Any]:
    """A recipe file's TOML as a dict, unchecked; a missing or malformed file is a RecipeError."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise RecipeError(f"{path}: no such recipe file") from exc
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{path}: not valid TOML: {exc}") from exc


def load_recipe(recipe: str | Path | Mapping[str, Any], **overrides: Any) -> Recipe:
    """Parse and validate a recipe; ``overrides`` replace ``url`` or a layer's options.

    ``url="…"`` replaces the store URL, ``memory_url="…"`` the ``[memory]`` table's;
    ``<layer name>={…}`` updates that layer's options (``window={"max_tokens": 4000}``).
    """
    if isinstance(recipe, Mapping):
        source, data = "<recipe>", dict(recipe)
    else:
        source, data = str(recipe), read_recipe_file(recipe)
    memory_url = overrides.pop("memory_url", None)
    if memory_url is not None:
        if not isinstance(data.get("memory"), Mapping):
            raise RecipeError(f"{source}: memory_url given, but the recipe has no [memory] table")
        data["memory"] = {**data["memory"], "url": memory_url}
    unknown = sorted(
        set(data) - {"backend", "layers", "description", "governance", "memory", "cache"}
    )
    if unknown:
        raise RecipeError(
            f"{source}: unknown top-level key(s) {', '.join(unknown)}; "
            "allowed: backend, layers, memory, governance, cache, description"
        )
    memory = _memory(data, source)
    backend = dict(data.get("backend") or {})
    url = overrides.pop("url", None) or backend.pop("url", None)
    backend.pop("url", None)
    if not isinstance(url, str) or not url:
        raise RecipeError(f"{source}: [backend]: field 'url' is required (a store URL)")
    backend_options = {
        field: _check_value(value, source=source, where="[backend]", field=field)
        for field, value in backend.items()
    }
    raw_layers = data.get("layers") or []
    if not isinstance(raw_layers, list):
        raise RecipeError(f"{source}: 'layers' must be an array of tables ([[layers]])")
    specs = []
    for index, entry in enumerate(raw_layers):
        if not isinstance(entry, Mapping) or "layer" not in entry:
            raise RecipeError(
                f"{source}: layers[{index}]: field 'layer' is required; "
                f"allowed layers: {', '.join(sorted(LAYERS))}"
            )
        name = entry["layer"]
        where = _where(index, name)
        options = {key: value for key, value in entry.items() if key != "layer"}
        options.update(overrides.get(name, {}))
        try:
            check_options(resolve_layer(name), options, supplied=RECIPE_SUPPLIED.get(name, ()))
        except ConfigurationError as exc:
            raise RecipeError(f"{source}: {where}: {exc}") from exc
        checked = {
            field: _check_value(value, source=source, where=where, field=field)
            for field, value in options.items()
        }
        specs.append(LayerSpec(name, checked))
    leftover = sorted(
        set(overrides) - {spec.layer for spec in specs if isinstance(spec.layer, str)}
    )
    if leftover:
        raise RecipeError(
            f"{source}: overrides for layers not in the recipe: {', '.join(leftover)}"
        )
    loaded = Recipe(
        source,
        url,
        backend_options,
        tuple(specs),
        governance=_governance(data, source),
        memory=memory,
    )
    _apply_cache(data, source)  # last: a recipe refused for any reason changes nothing
    return loaded


def _apply_cache(data: Mapping[str, Any], source: str) -> None:
    """``[cache] max_bytes``: the process's one cache budget (the last recipe loaded sets it)."""
    table = data.get("cache")
    if table is None:
        return
    if not isinstance(table, Mapping):
        raise RecipeError(f"{source}: 'cache' must be a table ([cache])")
    unknown = sorted(set(table) - {"max_bytes"})
    if unknown:
        raise RecipeError(
            f"{source}: [cache]: unknown field(s) {', '.join(unknown)}; allowed: max_bytes"
        )
    if "max_bytes" not in table:
        return
    try:
        size = cache.parse_size(table["max_bytes"])
    except ConfigurationError as exc:
        raise RecipeError(f"{source}: [cache]: {exc}") from exc
    if size != cache.max_bytes():  # a recipe loaded per request changes nothing after the first
        cache.configure(max_bytes=size)


def _memory(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The ``[memory]`` table, checked as ``MemoryOptions`` (names, types, URL scheme)."""
    table = data.get("memory") or {}
    if not isinstance(table, Mapping):
        raise RecipeError(f"{source}: 'memory' must be a table ([memory])")
    checked = {
        key: _check_value(value, source=source, where="[memory]", field=key)
        for key, value in table.items()
    }
    if checked:  # only then is memstack.memory (SQLAlchemy, the SDK's tools) imported
        from memstack.memory.options import MemoryOptions

        try:
            MemoryOptions.check(**checked)
        except ConfigurationError as exc:
            raise RecipeError(f"{source}: [memory]: {exc}") from exc
    return checked


def _governance(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    table = data.get("governance") or {}
    if not isinstance(table, Mapping):
        raise RecipeError(f"{source}: 'governance' must be a table ([governance])")
    unknown = sorted(set(table) - set(GOVERNANCE_FIELDS))
    if unknown:
        raise RecipeError(
            f"{source}: [governance]: unknown field(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(GOVERNANCE_FIELDS)}"
        )
    return {
        name: _check_value(value, source=source, where="[governance]", field=name)
        for name, value in table.items()
    }


def from_recipe(
    recipe: str | Path | Mapping[str, Any], *, session_id: str, **overrides: Any
) -> Session:
    """Build the stack a recipe describes, for ``session_id``.

    A file is parsed once while it is unchanged (a server calls this per request);
    secrets are still resolved at each build.
    """
    if overrides or isinstance(recipe, Mapping):
        return load_recipe(recipe, **overrides).build(session_id)
    path = os.path.abspath(recipe)
    try:
        found = os.stat(path)
    except OSError:
        return load_recipe(recipe).build(session_id)  # its own error, with the name as given
    return _parsed(str(recipe), path, found.st_mtime_ns, found.st_size).build(session_id)


@functools.lru_cache(maxsize=64)
def _parsed(given: str, path: str, mtime_ns: int, size: int) -> Recipe:
    """The recipe at ``path`` (named ``given``) as it was at that modification time and size."""
    return load_recipe(given)
