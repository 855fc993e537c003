"""Which capabilities adapter serves a session: its own, one per SDK backend, or the generic one.

    >>> from memstack.backends.adapters import capabilities_of
    >>> from memstack.testing import InMemorySession
    >>> type(capabilities_of(InMemorySession("s1"))).__name__
    'InMemoryCapabilities'

The per-backend modules are imported on the first call, so an application that never
asks pays nothing for drivers it does not use, and a missing optional driver only
removes its backend's adapter.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module

from agents.memory import Session

from memstack.backends.capabilities import GenericCapabilities, StorageCapabilities

__all__ = ["capabilities_of"]

_BACKEND_MODULES = ("sqlite", "sqlalchemy_store", "redis_store")


@cache
def _sdk_adapters() -> dict[type, type[StorageCapabilities]]:
    """Exact SDK backend type -> adapter class, for the drivers installed."""
    adapters: dict[type, type[StorageCapabilities]] = {}
    for name in _BACKEND_MODULES:
        try:
            adapters.update(import_module(f"memstack.backends.{name}").ADAPTERS)
        except ImportError:  # that backend's driver (an optional extra) is not installed
            continue
    return adapters


def capabilities_of(session: Session) -> StorageCapabilities:
    """The capabilities adapter for ``session``.

    Layers and memstack's own sessions answer through ``storage_capabilities()``. SDK
    backends are matched by *exact* type: a subclass (AdvancedSQLiteSession, the SDK's
    EncryptedSession) may keep extra state an adapter would bypass, so it gets the
    generic adapter.
    """
    built = getattr(session, "capabilities", None)
    if isinstance(built, StorageCapabilities):  # a layer's, built once (``SessionLayer``)
        return built
    own = getattr(session, "storage_capabilities", None)
    if callable(own):
        caps = own()
        assert isinstance(caps, StorageCapabilities)
        return caps
    adapter = _sdk_adapters().get(type(session))
    return adapter(session) if adapter is not None else GenericCapabilities(session)
