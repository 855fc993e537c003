"""Items the tests build by hand: a shell command the agent ran, and what it printed."""

from __future__ import annotations

import json
from typing import Any

Item = dict[str, Any]


def call(call_id: str, command: str) -> Item:
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": "bash",
        "arguments": json.dumps({"command": command}),
    }


def output(call_id: str, text: str) -> Item:
    return {"type": "function_call_output", "call_id": call_id, "output": text}
