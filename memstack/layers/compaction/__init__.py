"""Compaction: ``CompactionSession`` (``session``); its pure policy is ``memstack.compaction``."""

from memstack.layers.compaction.session import CompactionSession

__all__ = ["CompactionSession"]
