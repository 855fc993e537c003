"""Encryption: ``EncryptedSession`` (``session``) and its capability adapter (``capabilities``);
the envelope format is ``memstack.crypto``'s."""

from memstack.layers.encrypted.session import EncryptedCapabilities, EncryptedSession

__all__ = ["EncryptedCapabilities", "EncryptedSession"]
