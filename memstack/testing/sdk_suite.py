"""The Agents SDK's own session tests, run through a stack of yours.

    from memstack.testing.sdk_suite import fetch_sdk_tests, run_sdk_session_tests

    report = run_sdk_session_tests([{"layer": "ttl", "ttl": "1d"}], fetch_sdk_tests())
    assert not report.failed, report.summary()

    # several stacks, one child pytest (starting one takes seconds: pytest, the SDK):
    reports = run_sdk_session_tests_through({"ttl": [...], "bare": []}, fetch_sdk_tests())

The registry's source distribution of the installed openai-agents holds the SDK's tests.
``fetch_sdk_tests`` downloads it once per version (``pip download``) into a cache folder;
``run_sdk_session_tests`` runs its session tests in a child pytest, where this module is a
plugin that replaces ``SQLiteSession``, and the test doubles that stand in for a store,
by the same store or double under the given stack; ``run_sdk_session_tests_through`` runs
them once per stack, stack after stack, in one child. A test that reads the store's own
attributes still finds them: the stack answers for its store there.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memstack.errors import MemstackError

__all__ = [
    "SDK_SESSION_TESTS",
    "SdkSuiteError",
    "SdkSuiteReport",
    "fetch_sdk_tests",
    "run_sdk_session_tests",
    "run_sdk_session_tests_through",
]

SDK_SESSION_TESTS = (
    "tests/memory/test_session.py",
    "tests/memory/test_session_limit.py",
    "tests/memory/test_session_context_wrapper.py",
)
# Names, in the SDK's test modules, of classes that stand in for a store.
STORE_DOUBLES = ("SQLiteSession", "ContextAwareSession", "LegacySession", "LegacyKwargsSession")
_STACKS_ENV = "MEMSTACK_SDK_STACKS"
_REPORT_ENV = "MEMSTACK_SDK_REPORT"
_CACHE_ENV = "MEMSTACK_SDK_TESTS_DIR"


class SdkSuiteError(MemstackError):
    """The SDK's test suite could not be fetched, unpacked or run."""


@dataclass
class SdkSuiteReport:
    """Outcome of one run: every test's node id, and why each failure failed."""

    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [
            f"{len(self.passed)} passed, {len(self.failed)} failed, {len(self.skipped)} skipped"
        ]
        lines += [f"FAILED {test}: {why}" for test, why in sorted(self.failed.items())]
        return "\n".join(lines)


def _cache_root() -> Path:
    configured = os.environ.get(_CACHE_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memstack" / "sdk-tests"


def fetch_sdk_tests(cache: Path | None = None, *, version: str | None = None) -> Path:
    """The unpacked sdist of openai-agents (the installed version): its root folder.

    Downloaded once per version into ``cache`` (``MEMSTACK_SDK_TESTS_DIR``, else
    ``~/.cache/memstack/sdk-tests``); ``SdkSuiteError`` when it cannot be fetched or
    holds no session tests.
    """
    version = version or importlib.metadata.version("openai-agents")
    root = (cache or _cache_root()) / f"openai_agents-{version}"
    if all((root / test).is_file() for test in SDK_SESSION_TESTS):
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent) as download:
        command = [
            sys.executable, "-m", "pip", "download", f"openai-agents=={version}",
            "--no-deps", "--no-binary", ":all:", "--quiet", "--dest", download,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        archives = sorted(Path(download).glob("openai_agents-*.tar.gz"))
        if done.returncode != 0 or not archives:
            raise SdkSuiteError(
                f"could not download the openai-agents {version} source distribution "
                f"(pip exit {done.returncode}): {done.stderr.strip()[-500:]}"
            )
        unpacked = Path(download) / "unpacked"
        try:
            with tarfile.open(archives[0]) as archive:
                if not hasattr(tarfile, "data_filter"):  # Python < 3.11.4: no safe filter
                    raise SdkSuiteError("unpacking the sdist safely needs Python 3.11.4 or later")
                archive.extractall(unpacked, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise SdkSuiteError(f"could not unpack {archives[0].name}: {exc}") from exc
        found = unpacked / f"openai_agents-{version}"
        missing = [test for test in SDK_SESSION_TESTS if not (found / test).is_file()]
        if missing:
            raise SdkSuiteError(f"the openai-agents {version} sdist has no {', '.join(missing)}")
        shutil.rmtree(root, ignore_errors=True)
        found.rename(root)
    return root


def run_sdk_session_tests(
    stack: Sequence[Mapping[str, Any]],
    root: Path,
    *,
    tests: Iterable[str] = SDK_SESSION_TESTS,
    timeout: float = 600.0,
) -> SdkSuiteReport:
    """Run the SDK's session ``tests`` (in ``root``) with every store under ``stack``.

    ``stack`` lists layers bottom to top as recipes do: ``{"layer": "ttl", "ttl": "1d"}``;
    options must be JSON (keys as text). ``SdkSuiteError`` when pytest itself fails to run.
    """
    return run_sdk_session_tests_through({"stack": stack}, root, tests=tests, timeout=timeout)[
        "stack"
    ]


def run_sdk_session_tests_through(
    stacks: Mapping[str, Sequence[Mapping[str, Any]]],
    root: Path,
    *,
    tests: Iterable[str] = SDK_SESSION_TESTS,
    timeout: float = 600.0,
) -> dict[str, SdkSuiteReport]:
    """``run_sdk_session_tests`` for each of ``stacks`` (by name), in one child pytest.

    The child runs every test under the first stack, then every test under the next, …;
    a report per stack. Starting the child (pytest, the SDK, its tests) is most of a
    short run's cost, so one child for several stacks saves it for all but the first.
    """
    with tempfile.TemporaryDirectory() as scratch:
        report_path = Path(scratch) / "report.json"
        env = {
            **os.environ,
            _STACKS_ENV: json.dumps(
                {name: list(map(dict, stack)) for name, stack in stacks.items()}
            ),
            _REPORT_ENV: str(report_path),
        }
        command = [
            sys.executable, "-m", "pytest", "-q", "-p", __name__, "-p", "no:cacheprovider",
            "--rootdir", str(root), *tests,
        ]  # fmt: skip
        try:
            done = subprocess.run(
                command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired as exc:
            raise SdkSuiteError(
                f"the SDK's session tests did not finish in {timeout:.0f} s"
            ) from exc
        if done.returncode not in (0, 1) or not report_path.is_file():
            raise SdkSuiteError(
                f"pytest could not run the SDK's session tests (exit {done.returncode}): "
                f"{(done.stdout + done.stderr).strip()[-2000:]}"
            )
        outcomes = json.loads(report_path.read_text())
    return {name: _report(outcomes.get(name, {})) for name in stacks}


def _report(outcomes: Mapping[str, Sequence[str]]) -> SdkSuiteReport:
    report = SdkSuiteReport()
    for test, (outcome, why) in sorted(outcomes.items()):
        if outcome == "failed":
            report.failed[test] = why
        elif outcome == "skipped":
            report.skipped.append(test)
        else:
            report.passed.append(test)
    return report


# -- the child's plugin ---------------------------------------------------------------------
def _stacked(cls: type, specs: list[Any]) -> type:
    """A stand-in for ``cls`` whose instances are ``cls``'s, under the stack ``specs``.

    A test that subclasses the stand-in (a double with one failing method) gets its own
    subclass under the stack. ``SQLiteSession`` itself stays an exact ``SQLiteSession``,
    so the stack sees the store memstack knows.
    """

    def new(kind: type, *args: Any, **kwargs: Any) -> Any:
        if kind is stand_in:
            store = cls(*args, **kwargs)
        else:
            store = object.__new__(kind)
            store.__init__(*args, **kwargs)
        return _answering_for_its_store(_build(store, specs))

    stand_in = type(cls.__name__, (cls,), {"__new__": new, "__module__": cls.__module__})
    return stand_in


def _build(store: Any, specs: list[Any]) -> Any:
    from memstack.stack import LayerSpec, build_stack

    layers = [
        LayerSpec(spec["layer"], {k: v for k, v in spec.items() if k != "layer"}) for spec in specs
    ]
    return build_stack(store, layers)


def _store_attribute(self: Any, name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(self.backend, name)


def _set_store_attribute(self: Any, name: str, value: Any) -> None:
    # A test that patches its store's internals (monkeypatch.setattr(session, "_x", …))
    # patches the store, not the stack, which has no such attribute.
    if _own(self, name):
        object.__setattr__(self, name, value)
    else:
        setattr(self.backend, name, value)


def _del_store_attribute(self: Any, name: str) -> None:
    if _own(self, name):
        object.__delattr__(self, name)
    else:
        delattr(self.backend, name)


def _own(stack: Any, name: str) -> bool:
    return name in vars(stack) or hasattr(type(stack), name) or not hasattr(stack.backend, name)


_ANSWERING: dict[type, type] = {}


def _answering_for_its_store(stack: Any) -> Any:
    """``stack``, reading attributes it lacks from its store (the tests' records of calls)."""
    top = type(stack)
    if top.__module__ == __name__ or not hasattr(stack, "backend"):
        return stack
    if top not in _ANSWERING:
        answering = {
            "__getattr__": _store_attribute,
            "__setattr__": _set_store_attribute,
            "__delattr__": _del_store_attribute,
        }
        _ANSWERING[top] = type(top.__name__, (top,), answering)
    stack.__class__ = _ANSWERING[top]
    return stack


# Child runs only: the run order, one (item, stack name) a step, and each stack's stand-ins
# for the store doubles of each collected module, swapped in while that stack's step runs.
_schedule: list[tuple[Any, str]] = []
_stand_ins: dict[str, dict[Any, dict[str, type]]] = {}
_current: list[str] = []  # the stack whose step is running


def pytest_collection_modifyitems(items: list[Any]) -> None:
    """Every collected test once per stack, stack after stack (child runs only)."""
    raw = os.environ.get(_STACKS_ENV)
    if raw is None:
        return
    stacks: dict[str, list[Any]] = json.loads(raw)
    modules = {id(item.module): item.module for item in items if item.module}.values()
    for name, specs in stacks.items():
        _stand_ins[name] = {
            module: {
                double: _stacked(original, specs)
                for double in STORE_DOUBLES
                if isinstance(original := getattr(module, double, None), type)
            }
            for module in modules
        }
    _schedule[:] = [(item, name) for name in stacks for item in items]
    items[:] = [item for item, _ in _schedule]


def pytest_runtest_logstart(nodeid: str) -> None:
    """Before a step's setup: its stack's stand-ins in place."""
    if not _schedule:
        return
    item, name = _schedule.pop(0)
    if item.nodeid != nodeid:
        raise SdkSuiteError(f"ran {nodeid}, expected {item.nodeid} (another plugin reordered)")
    _current[:] = [name]
    for module, doubles in _stand_ins[name].items():
        for double, stand_in in doubles.items():
            setattr(module, double, stand_in)


_outcomes: dict[str, dict[str, tuple[str, str]]] = {}


def pytest_runtest_logreport(report: Any) -> None:
    if os.environ.get(_REPORT_ENV) is None or not _current:
        return
    outcomes = _outcomes.setdefault(_current[0], {})
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        why = crash.message if crash is not None else str(report.longrepr)[-300:]
        outcomes[report.nodeid] = ("failed", why.splitlines()[0] if why else "")
    elif report.skipped:
        outcomes.setdefault(report.nodeid, ("skipped", ""))
    elif report.when == "call":
        outcomes.setdefault(report.nodeid, ("passed", ""))


def pytest_sessionfinish() -> None:
    path = os.environ.get(_REPORT_ENV)
    if path is not None:
        Path(path).write_text(json.dumps(_outcomes))
