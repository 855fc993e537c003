"""The demo: a multi-turn agent conversation through a memstack stack, on SQLite.

    $ memstack demo                      # offline, scripted model
    $ OPENAI_API_KEY=… memstack demo     # a real model (gpt-4.1-mini by default)

Prints the stack (the production blueprint's shape: TTL → Encrypted → Compaction → Window),
the tokens the model was sent on every turn, what the next call would see (old tool
outputs masked) and what the database holds (encrypted envelopes in TTL records).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents import Agent, RunConfig, RunHooks, Runner, function_tool
from agents.items import TResponseInputItem
from agents.memory import Session
from agents.models.interface import Model

from memstack.backends import open_backend
from memstack.crypto import generate_key
from memstack.stack import LayerSpec, build_stack
from memstack.testing.model import ScriptedModel, ToolCall

__all__ = ["DEMO_TURNS", "demo_layers", "run_demo"]

DEMO_TURNS = [
    "Hi! I'm Ada. Where is my order A-1042?",
    "Great. Can you also check order B-7?",
    "What was the first order number I asked about?",
    "Thanks, that's all.",
]

_ORDERS = {
    "A-1042": {
        "status": "shipped",
        "carrier": "DHL",
        "tracking": "JD014600003456789012",
        "eta": "2026-11-24",
        "ship_to": "Ada Lovelace, 12 St James's Square, London SW1Y 4JH",
        "items": [
            {"sku": "KB-204", "name": "Mechanical keyboard", "qty": 1, "price": 129.0},
            {"sku": "MS-88", "name": "Wireless mouse", "qty": 1, "price": 49.0},
            {"sku": "CB-3", "name": "USB-C cable, 2 m", "qty": 2, "price": 12.5},
        ],
        "events": ["2026-11-19 order placed", "2026-11-20 packed", "2026-11-21 handed to DHL"],
    },
    "B-7": {
        "status": "processing",
        "carrier": None,
        "tracking": None,
        "eta": "2026-11-28",
        "ship_to": "Ada Lovelace, 12 St James's Square, London SW1Y 4JH",
        "items": [{"sku": "MN-27", "name": "27-inch monitor", "qty": 1, "price": 319.0}],
        "events": ["2026-11-21 order placed", "2026-11-21 awaiting stock"],
    },
}


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order by its id."""
    return json.dumps(_ORDERS.get(order_id, {"error": "no such order"}))


def _scripted() -> ScriptedModel:
    return ScriptedModel(
        [
            ToolCall("lookup_order", {"order_id": "A-1042"}),
            "Order A-1042 has shipped with DHL and should arrive on 2026-11-24.",
            ToolCall("lookup_order", {"order_id": "B-7"}),
            "Order B-7 is still being processed; expected 2026-11-28.",
            "You first asked about order A-1042.",
            "You're welcome, Ada!",
        ]
    )


def demo_layers(key: str) -> list[LayerSpec]:
    """The production blueprint's shape, bottom to top, with small budgets to show them."""
    return [
        LayerSpec("ttl", {"ttl": 30 * 86400}),
        LayerSpec("encrypted", {"key": key}),
        LayerSpec("compaction", {"strategy": {"mask": {"keep_last_turns": 1}}}),
        LayerSpec("window", {"max_tokens": 4000, "model": "gpt-4.1-mini"}),
    ]


@dataclass
class _Recorder(RunHooks[Any]):
    """Keeps what every model call was sent."""

    calls: list[list[TResponseInputItem]] = field(default_factory=list)

    async def on_llm_start(
        self, context: Any, agent: Any, system_prompt: str | None, input_items: list[Any]
    ) -> None:
        system: list[Any] = [{"role": "system", "content": system_prompt}] if system_prompt else []
        self.calls.append([*system, *input_items])


def _model() -> tuple[Model | str, str]:
    if os.environ.get("OPENAI_API_KEY"):
        name = os.environ.get("MEMSTACK_DEMO_MODEL", "gpt-4.1-mini")
        return name, f"{name} (OpenAI, OPENAI_API_KEY is set)"
    return _scripted(), "scripted model (offline; set OPENAI_API_KEY for a real one)"


async def run_demo(
    url: str = "sqlite:///memstack-demo.db",
    *,
    session_id: str = "demo",
    out: Callable[[str], None] = print,
) -> Session:
    """Run the demo conversation and print what happened; returns the stack."""
    from memstack.tokens import TokenCounter

    # A fresh key per run unless MEMSTACK_DEMO_KEY holds one; the demo starts over anyway.
    key = os.environ.get("MEMSTACK_DEMO_KEY") or generate_key()
    store = open_backend(url, session_id)
    stack = build_stack(store, demo_layers(key))
    await stack.clear_session()  # every run starts a fresh conversation
    model, model_label = _model()
    agent = Agent(
        name="support",
        instructions="You are a concise order-support agent. Use lookup_order for orders.",
        model=model,
        tools=[lookup_order],
    )
    counter = TokenCounter("gpt-4.1-mini")
    recorder = _Recorder()
    config = RunConfig(tracing_disabled=True)

    out(f"stack:  {stack!r}")
    out(f"model:  {model_label}\n")
    out(f"{'turn':<5}{'model calls':>12}{'tokens sent':>13}  user / assistant")
    for number, text in enumerate(DEMO_TURNS, start=1):
        before = len(recorder.calls)
        result = await Runner.run(agent, text, session=stack, run_config=config, hooks=recorder)
        sent = sum(counter.count_items(call) for call in recorder.calls[before:])
        out(f"{number:<5}{len(recorder.calls) - before:>12}{sent:>13}  {text}")
        out(f"{'':<30}  → {result.final_output}")

    raw = await store.get_items()
    view = await stack.get_items()
    out(f"\nthe store holds {len(raw)} rows; the next model call would be sent {len(view)} items:")
    for item in view:
        kind = item.get("type") or item.get("role")
        out(f"  {kind:<22} {json.dumps(item, ensure_ascii=False)[:70]}")
    if raw:
        out(f"\nwhat the database holds (first row): {json.dumps(raw[0])[:110]}…")
    close = getattr(store, "close", None)
    if callable(close):
        result = close()
        if asyncio.iscoroutine(result):
            await result
    return stack
