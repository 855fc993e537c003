"""Stores: opening the SDK's sessions from URLs, and what each can do beyond the protocol."""

from memstack.backends.adapters import capabilities_of
from memstack.backends.capabilities import GenericCapabilities, StorageCapabilities
from memstack.backends.open import open_backend

__all__ = ["GenericCapabilities", "StorageCapabilities", "capabilities_of", "open_backend"]
