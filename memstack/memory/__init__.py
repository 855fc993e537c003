"""Long-term memory: what the agent knows about a user, across sessions.

    >>> from memstack.memory import MemoryStore, memory_tools
    >>> store = MemoryStore.from_url("sqlite://:memory:")
    >>> [tool.name for tool in memory_tools(store, "user-42")]
    ['remember', 'recall', 'list_memories', 'forget']

``MemoryStore`` keeps memories per scope in SQL; ``MemorySession`` (layer ``"memory"``)
pins what is known at the head of a session's history; distillers turn conversations
into memories; consolidation keeps them tidy without deleting anything.
"""

from memstack.memory.consolidate import Change, ConsolidationPolicy, plan_consolidation
from memstack.memory.distill import (
    DistillationHooks,
    Distiller,
    DistillReport,
    LLMExtractor,
    RuleExtractor,
)
from memstack.memory.minilm import OnnxMiniLMEmbedder
from memstack.memory.models import KINDS, SOURCES, Event, Memory, Provenance
from memstack.memory.ranking import BM25
from memstack.memory.store import MemoryStore, Recall
from memstack.memory.tools import memory_tools
from memstack.memory.vectors import Embedder, HashingEmbedder, MiniLMEmbedder

__all__ = [
    "BM25",
    "KINDS",
    "SOURCES",
    "Change",
    "ConsolidationPolicy",
    "DistillReport",
    "DistillationHooks",
    "Distiller",
    "Embedder",
    "Event",
    "HashingEmbedder",
    "LLMExtractor",
    "Memory",
    "MemoryStore",
    "MiniLMEmbedder",
    "OnnxMiniLMEmbedder",
    "Provenance",
    "Recall",
    "RuleExtractor",
    "memory_tools",
    "plan_consolidation",
]
