"""Retention: ``TTLSession`` (``session``), its pure policy (``policy``), the stored record
(``record``), dating what it finds unstamped (``adoption``), deleting (``purge``) and the
capability adapter layers above use (``capabilities``)."""

from memstack.layers.ttl.session import TTLSession, purge_written_before

__all__ = ["TTLSession", "purge_written_before"]
