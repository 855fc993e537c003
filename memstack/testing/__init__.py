"""What users need to test their own stacks: an in-memory store, a fake clock, a scripted
model for the real ``Runner``, and the Session contract as reusable checks."""

from memstack.testing.clock import FakeClock
from memstack.testing.contract import CONTRACT_CHECKS, SessionFactory, run_contract, sample_items
from memstack.testing.memory import InMemoryCapabilities, InMemorySession
from memstack.testing.model import ScriptedModel, ToolCall

__all__ = [
    "CONTRACT_CHECKS",
    "FakeClock",
    "InMemoryCapabilities",
    "InMemorySession",
    "ScriptedModel",
    "SessionFactory",
    "ToolCall",
    "run_contract",
    "sample_items",
]
