"""memstack's layers, one module each."""

from memstack.layers.passthrough import PassthroughSession

__all__ = ["PassthroughSession"]
