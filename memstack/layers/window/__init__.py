"""The sliding window: ``SlidingWindowSession`` (``session``) and where it starts (``policy``)."""

from memstack.layers.window.session import Budget, SlidingWindowSession

__all__ = ["Budget", "SlidingWindowSession"]
