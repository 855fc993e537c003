"""memstack's layers, one module each."""

from memstack.layers.compaction import CompactionSession
from memstack.layers.encrypted import EncryptedSession
from memstack.layers.passthrough import PassthroughSession
from memstack.layers.redact import RedactSession
from memstack.layers.ttl import TTLSession, purge_written_before
from memstack.layers.window import SlidingWindowSession

__all__ = [
    "CompactionSession",
    "EncryptedSession",
    "PassthroughSession",
    "RedactSession",
    "SlidingWindowSession",
    "TTLSession",
    "purge_written_before",
]
