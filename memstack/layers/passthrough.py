"""A layer that changes nothing: the reference for the contract suite and a template.

>>> from memstack.layers import PassthroughSession
>>> from memstack.testing import InMemorySession
>>> PassthroughSession(InMemorySession("s1"))
InMemorySession(session_id='s1') → PassthroughSession()
"""

from __future__ import annotations

from memstack.base import SessionLayer


class PassthroughSession(SessionLayer):
    """Delegates everything to the session it wraps."""

    layer_name = "passthrough"
