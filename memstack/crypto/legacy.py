"""Read envelopes written by the Agents SDK's own ``EncryptedSession``, to migrate them.

    >>> from memstack.crypto.legacy import SdkEnvelopeReader, is_sdk_envelope
    >>> reader = SdkEnvelopeReader("user-42", "my-old-sdk-key")
    >>> is_sdk_envelope({"__enc__": 1, "v": 1, "kid": "hkdf-v1", "payload": "…"})
    True

The SDK derives a Fernet key with HKDF-SHA256 (salt = session id, info
``agents.session-store.hkdf.v1``) from its ``encryption_key``, which it takes as urlsafe
base64 of 32 bytes or, failing that, as the string's raw bytes; this reader does the
same, so any key the SDK accepted opens its history here. The SDK's TTL is not applied:
migration keeps every item the key authenticates.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from memstack.errors import ConfigurationError, DecryptionError

__all__ = ["SDK_KID", "SdkEnvelopeReader", "is_sdk_envelope"]

SDK_KID = "hkdf-v1"
_SDK_MARKER = "__enc__"
_SDK_FIELDS = frozenset({_SDK_MARKER, "v", "kid", "payload"})


def is_sdk_envelope(value: object) -> bool:
    return isinstance(value, dict) and _SDK_MARKER in value


def _sdk_master_bytes(key: str) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(key)
        if len(raw) == 32:
            return raw
    except (binascii.Error, ValueError):
        pass
    return key.encode("utf-8")


class SdkEnvelopeReader:
    """Opens one session's SDK ``EncryptedSession`` envelopes (format v1, kid hkdf-v1)."""

    def __init__(self, session_id: str, key: str, *, layer: str | None = None) -> None:
        if not isinstance(key, str) or not key:
            raise ConfigurationError(
                "legacy_sdk_key must be the SDK's non-empty key string", layer=layer
            )
        hkdf = HKDF(
            algorithm=hashes.SHA256(),
            length=32,
            salt=session_id.encode("utf-8"),
            info=b"agents.session-store.hkdf.v1",
        )
        self._fernet = Fernet(base64.urlsafe_b64encode(hkdf.derive(_sdk_master_bytes(key))))
        self.session_id = session_id
        self.layer = layer

    def open(self, envelope: object) -> dict[str, Any]:
        def error(message: str) -> DecryptionError:
            return DecryptionError(
                message, layer=self.layer, session_id=self.session_id, key_id=SDK_KID
            )

        if not isinstance(envelope, dict) or envelope.keys() != _SDK_FIELDS:
            raise error("malformed SDK EncryptedSession envelope")
        if envelope[_SDK_MARKER] != 1 or envelope["v"] != 1 or envelope["kid"] != SDK_KID:
            raise error(f"unknown SDK envelope version v={envelope['v']!r} kid={envelope['kid']!r}")
        try:
            plaintext = self._fernet.decrypt(envelope["payload"])
            item = json.loads(plaintext.decode("utf-8"))
        except (InvalidToken, TypeError, ValueError) as exc:
            raise error(
                f"cannot authenticate SDK envelope (key id {SDK_KID!r}): wrong "
                "legacy_sdk_key, or the envelope was altered or belongs to another session"
            ) from exc
        if not isinstance(item, dict):
            raise error("SDK envelope does not hold an item")
        return item
