"""Registers one capabilities adapter per SDK backend whose driver is installed."""

from __future__ import annotations

from importlib import import_module

from memstack.backends.capabilities import register_adapter

for _module in ("sqlite", "sqlalchemy_store", "redis_store"):
    try:
        _adapters = import_module(f"memstack.backends.{_module}").ADAPTERS
    except ImportError:  # that backend's driver (an optional extra) is not installed
        continue
    for _backend, _adapter in _adapters.items():
        register_adapter(_backend, _adapter)
