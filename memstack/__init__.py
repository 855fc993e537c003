"""memstack: composable session layers for the OpenAI Agents SDK.

from memstack import LayerSpec, build_stack, from_recipe, open_backend

store = open_backend("sqlite:///chat.db", "user-42")
session = build_stack(
    store, [LayerSpec("ttl", {"ttl": 86400}), LayerSpec("window", {"max_turns": 20})]
)
# or: session = from_recipe("recipes/dev-sqlite.toml", session_id="user-42")
# await Runner.run(agent, "Hello", session=session)
# in a server: await memstack.warm_up(recipe) at startup (what a first read loads),
# await memstack.dispose() at shutdown (the process's pools and clients, memstack.resources)
"""

from memstack.backends import (
    GenericCapabilities,
    StorageCapabilities,
    capabilities_of,
    open_backend,
)
from memstack.base import SessionLayer, find, iter_chain
from memstack.errors import (
    BackendError,
    CapabilityError,
    CompactionWarning,
    ConfigurationError,
    ContentBlockedError,
    DecryptionError,
    DistillationError,
    ForeignRecordError,
    ItemValidationError,
    MemoryTooLargeError,
    MemstackError,
    MissingDriverError,
    RecipeError,
    StoredItemError,
    SummarizerError,
    TransientError,
    UnknownUserError,
    VocabularyError,
)
from memstack.layers import (
    CompactionSession,
    EncryptedSession,
    PassthroughSession,
    RedactSession,
    SlidingWindowSession,
    TTLSession,
)
from memstack.model_input import ModelInputFilter, input_filter
from memstack.recipes import from_recipe, load_recipe
from memstack.resources import dispose
from memstack.stack import LAYERS, LayerSpec, build_stack
from memstack.tokens import TokenCounter
from memstack.warmup import warm_up

__version__ = "0.1.0"

__all__ = [
    "LAYERS",
    "BackendError",
    "CapabilityError",
    "CompactionSession",
    "CompactionWarning",
    "ConfigurationError",
    "ContentBlockedError",
    "DecryptionError",
    "DistillationError",
    "EncryptedSession",
    "ForeignRecordError",
    "GenericCapabilities",
    "ItemValidationError",
    "LayerSpec",
    "MemoryTooLargeError",
    "MemstackError",
    "MissingDriverError",
    "ModelInputFilter",
    "PassthroughSession",
    "RecipeError",
    "RedactSession",
    "SessionLayer",
    "SlidingWindowSession",
    "StorageCapabilities",
    "StoredItemError",
    "SummarizerError",
    "TTLSession",
    "TokenCounter",
    "TransientError",
    "UnknownUserError",
    "VocabularyError",
    "__version__",
    "build_stack",
    "capabilities_of",
    "dispose",
    "find",
    "from_recipe",
    "input_filter",
    "iter_chain",
    "load_recipe",
    "open_backend",
    "warm_up",
]
