"""The call_model_input_filter: masking and the window applied inside one Runner.run."""

from __future__ import annotations

from typing import Any

from agents import Agent, RunConfig, Runner, function_tool

from memstack import CompactionSession, SlidingWindowSession, input_filter
from memstack.compaction import Mask
from memstack.history import history_problems
from memstack.testing import InMemorySession, ScriptedModel, ToolCall
from memstack.tokens import TokenCounter

FILES = ["a.py", "b.py", "c.py", "d.py", "e.py"]
COUNTER = TokenCounter()


@function_tool
def read_file(path: str) -> str:
    """The file's content."""
    return f"# {path}\n" + "".join(f"value_{n} = compute({n}, '{path}')\n" for n in range(120))


def script() -> ScriptedModel:
    return ScriptedModel([*(ToolCall("read_file", {"path": p}) for p in FILES), "All read."])


def mask() -> Mask:
    return Mask(
        keep_last_turns=0,
        keep_last_outputs=1,
        templates={"read_file": "File content of {path} — re-read if needed"},
    )


async def run(stack: Any, model: ScriptedModel, *, filtered: bool) -> None:
    agent = Agent(name="coder", instructions="Read the files.", model=model, tools=[read_file])
    config = RunConfig(
        tracing_disabled=True,
        call_model_input_filter=input_filter(stack) if filtered else None,
    )
    result = await Runner.run(agent, "Read every file", session=stack, run_config=config)
    assert result.final_output == "All read."


def outputs(items: list[Any]) -> list[str]:
    return [i["output"] for i in items if i.get("type") == "function_call_output"]


async def test_masking_shrinks_model_input_within_one_multi_tool_run() -> None:
    plain, masked = script(), script()
    await run(CompactionSession(InMemorySession("a"), strategy=mask()), plain, filtered=False)
    stack = CompactionSession(InMemorySession("b"), strategy=mask())
    await run(stack, masked, filtered=True)

    sizes = [COUNTER.count_items(sent) for sent in masked.inputs]
    unfiltered = [COUNTER.count_items(sent) for sent in plain.inputs]
    assert len(sizes) == len(unfiltered) == 6  # five tool calls and the answer, one run
    # Without the filter every call re-sends every file; with it, only the newest one.
    assert unfiltered[-1] > 4 * unfiltered[1]
    assert max(sizes[1:]) < 1.3 * sizes[1]
    assert sizes[-1] < 0.3 * unfiltered[-1]
    last = masked.inputs[-1]
    assert outputs(last)[:-1] == [f"File content of {p} — re-read if needed" for p in FILES[:-1]]
    assert outputs(last)[-1] == read_file_output("e.py")
    assert history_problems(last) == []
    # The session still stores every output in full: masking is a view.
    assert outputs(await stack.inner.get_items()) == [read_file_output(p) for p in FILES]


def read_file_output(path: str) -> str:
    return f"# {path}\n" + "".join(f"value_{n} = compute({n}, '{path}')\n" for n in range(120))


async def test_the_stack_window_also_applies_within_the_run() -> None:
    store = InMemorySession("w")
    await store.add_items(
        [
            {"role": "user", "content": "Earlier question " + "context " * 200},
            {"role": "assistant", "content": "Earlier answer " + "detail " * 200},
        ]
    )
    stack = SlidingWindowSession(CompactionSession(store, strategy=mask()), max_tokens=1500)
    filter_ = input_filter(stack)
    assert repr(filter_) == "ModelInputFilter(CompactionSession → SlidingWindowSession)"
    model = script()
    await run(stack, model, filtered=True)
    first, last = model.inputs[0], model.inputs[-1]
    assert first[0]["content"].startswith("Earlier question")  # fits at the start of the run
    assert all(not str(i.get("content", "")).startswith("Earlier") for i in last)  # not later
    assert last[0] == {"role": "user", "content": "Read every file"}
    assert history_problems(last) == []
