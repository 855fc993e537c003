"""Which layer's stored format a value is: for a stack that meets one without that layer.

    >>> from memstack.formats import written_by
    >>> written_by({"__memstack_ttl__": 1, "t": 0.0, "item": {"role": "user", "content": "hi"}})
    'TTLSession'
    >>> written_by({"role": "user", "content": "hi"}) is None
    True

A layer stores what it is given inside a format of its own (a TTL record, an envelope, a
compaction record), and only that layer, under the ones above it, takes it out again. A
stack built from another recipe, or with a layer removed, would hand such a value up as
an item: to encryption as "plaintext" (and to its ``adopt``, which would seal it), to the
caller, to the model. ``refuse_foreign`` makes that a ``ForeignRecordError`` naming the
missing layer instead.

The markers are the layers' own (``memstack.layers.ttl.record``, ``memstack.crypto``,
``memstack.compaction.records``), spelt here so this module imports none of them; a test
ties each to its source.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from memstack.errors import ForeignRecordError

__all__ = ["ENCRYPTION_FORMATS", "refuse_foreign", "written_by"]

TTL_MARKER = "__memstack_ttl__"
ENVELOPE_MARKER = "menc"
SDK_ENVELOPE_MARKER = "__enc__"
COMPACTION_TYPE = "memstack.compaction"
#: What encryption reads itself: its own envelopes, and the SDK's it can migrate.
ENCRYPTION_FORMATS = frozenset({"EncryptedSession", "the SDK's EncryptedSession"})


def written_by(value: object) -> str | None:
    """The layer whose stored format ``value`` is, or None for anything else (an item)."""
    if type(value) is not dict:
        return None
    kind = value.get("type")
    if kind is not None or "role" in value:  # an item, unless compaction's record
        return "CompactionSession" if kind == COMPACTION_TYPE else None
    if TTL_MARKER in value:
        return "TTLSession"
    if ENVELOPE_MARKER in value:
        return "EncryptedSession"
    if SDK_ENVELOPE_MARKER in value:
        return "the SDK's EncryptedSession"
    return None


def refuse_foreign(
    values: Sequence[object], *, session_id: str | None, own: Collection[str] = ()
) -> None:
    """Raise ``ForeignRecordError`` at the newest value of ``values`` in the format of a
    layer other than ``own`` (the formats the caller reads itself)."""
    for index in range(len(values) - 1, -1, -1):
        layer = written_by(values[index])
        if layer is not None and layer not in own:
            raise foreign(layer, position=len(values) - index, session_id=session_id)


def foreign(layer: str, *, position: int, session_id: str | None) -> ForeignRecordError:
    """The error for one value stored by ``layer``, ``position`` from the newest."""
    return ForeignRecordError(
        f"the stored value {position} from the newest is a {layer} record, but no "
        f"{layer} below reads it: this stack was built from another recipe, or that "
        "layer was removed; read the session through a stack with it",
        position=position,
        layer=layer,
        session_id=session_id,
    )
