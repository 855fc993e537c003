"""Needed-context recall on small hand-made conversations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memstack.bench import transcripts
from memstack.bench.needed import item_text, needs_per_call, produced_text, recall_counts
from memstack.bench.transcripts import model_calls
from tests.items import call, output

Item = dict[str, Any]


HISTORY: list[Item] = [
    {"role": "user", "content": "Fix the crash in read_config"},
    {"role": "assistant", "content": "Let me find it."},
    call("c1", "grep -rn read_config src"),
    output("c1", "src/conf/loader.py:88: def read_config(path, strict=False):"),
    call("c2", "sed -n 80,100p src/conf/loader.py"),
    output("c2", "    raise KeyError(CONFIG_HOME)\n" + "x = 1\n" * 200),
    {"role": "assistant", "content": "CONFIG_HOME is unset at line 094 of src/conf/loader.py."},
]


def needs() -> list[list[str]]:
    return [[n.token for n in call_needs] for call_needs in _needs()]


def _needs() -> list[Any]:
    return needs_per_call(HISTORY, model_calls(HISTORY), always_visible="You may run bash.")


def test_needed_tokens_come_from_earlier_history_but_not_the_newest_user_message() -> None:
    # call 0 writes "grep -rn read_config src": read_config is in the user's message only.
    # call 1 reuses the path from the grep output; call 2 the constant and the path again.
    assert needs() == [[], ["src/conf/loader.py"], ["CONFIG_HOME", "src/conf/loader.py"]]


def test_tokens_the_system_prompt_or_tools_show_anyway_are_not_needed() -> None:
    found = needs_per_call(
        HISTORY, model_calls(HISTORY), always_visible="Config lives in src/conf/loader.py"
    )
    assert [[n.token for n in c] for c in found][1:] == [[], ["CONFIG_HOME"]]


def test_holders_name_every_earlier_item_that_carries_the_token() -> None:
    last = {n.token: n.holders for n in _needs()[2]}
    assert last["src/conf/loader.py"] == {3, 4}
    assert last["CONFIG_HOME"] == {5}


def test_recall_counts_unchanged_items_by_index_and_others_by_text() -> None:
    final = _needs()[2]
    view = HISTORY[:6]
    assert recall_counts(final, view, originals=list(range(6))) == (2, 2)
    # Masking the sed output hides CONFIG_HOME; the path survives in the call itself.
    masked = [*view[:5], {**HISTORY[5], "output": "[omitted]"}]
    originals = [0, 1, 2, 3, 4, None]
    assert recall_counts(final, masked, originals=originals) == (2, 1)
    # A summary that quotes the constant brings it back.
    summary = {"role": "developer", "content": "Summary: CONFIG_HOME raised KeyError."}
    assert recall_counts(final, [summary], originals=[None]) == (2, 1)


def test_no_needs_means_nothing_to_count() -> None:
    assert recall_counts([], HISTORY) == (0, 0)


def test_item_text_decodes_arguments_and_skips_ids() -> None:
    text = item_text(call("c9", "cat a/b.py"))
    assert text == "cat a/b.py"
    assert "c9" not in text and "bash" not in text


def test_produced_text_is_the_agents_words_and_arguments_only() -> None:
    produced = produced_text([HISTORY[1], HISTORY[2], HISTORY[3]])
    assert produced == "Let me find it.\ngrep -rn read_config src"


def test_default_transcripts_are_the_agent_transcripts_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "agent.jsonl").write_text(json.dumps({"id": "a", "items": []}) + "\n")
    (tmp_path / "locomo.jsonl").write_text(json.dumps({"id": "l", "sessions": []}) + "\n")
    monkeypatch.setattr(transcripts, "DATA_DIR", tmp_path)
    assert [p.name for p in transcripts.default_transcripts()] == ["agent.jsonl"]
