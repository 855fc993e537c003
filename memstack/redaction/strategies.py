"""What replaces a finding: ``redact``, ``mask``, keyed ``hash``, ``block`` or ``vault``.

    >>> from memstack.redaction.detectors import Finding
    >>> from memstack.redaction.strategies import Mask, Redact
    >>> card = Finding("card", 5, 24, "4111 1111 1111 1111")
    >>> Redact().replace(card)
    '[CARD]'
    >>> Mask().replace(card)
    '**** **** **** 1111'

Each strategy is a small immutable object with one method. ``Hash`` is an HMAC under a
deployment key: the same value gives the same token across sessions (linkable within a
deployment) but cannot be brute-forced without the key, unlike a plain hash of a phone
number. ``Block`` and ``Vault`` are decided by the policy (refuse the batch; seal the
original in a side table), so their ``replace`` only writes the placeholder.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from typing import Protocol

from memstack.errors import ConfigurationError
from memstack.redaction.detectors import Finding

__all__ = ["STRATEGY_NAMES", "Block", "Hash", "Mask", "Redact", "Strategy", "Vault"]

STRATEGY_NAMES = ("redact", "mask", "hash", "block", "vault")


class Strategy(Protocol):
    @property
    def name(self) -> str: ...

    def replace(self, finding: Finding) -> str: ...


@dataclass(frozen=True)
class Redact:
    """``[EMAIL]``: the kind of data, nothing of the value."""

    name: str = "redact"

    def replace(self, finding: Finding) -> str:
        return f"[{finding.detector.upper()}]"


@dataclass(frozen=True)
class Mask:
    """Letters and digits starred except the last ``keep_last``; separators stay."""

    keep_last: int = 4
    char: str = "*"
    name: str = "mask"

    def __post_init__(self) -> None:
        if isinstance(self.keep_last, bool) or not isinstance(self.keep_last, int):
            raise ConfigurationError(f"mask keep_last must be an int >= 0, got {self.keep_last!r}")
        if self.keep_last < 0 or len(self.char) != 1:
            raise ConfigurationError("mask needs keep_last >= 0 and a one-character char")

    def replace(self, finding: Finding) -> str:
        value = finding.value
        # Never reveal more than a quarter of a short value.
        keep = min(self.keep_last, len(value) // 4)
        head, tail = value[: len(value) - keep], value[len(value) - keep :]
        return "".join(self.char if c.isalnum() else c for c in head) + tail


@dataclass(frozen=True)
class Hash:
    """``[EMAIL:k3x…]``: an HMAC-SHA256 of the value, 80 bits, base32."""

    key: bytes = field(repr=False)
    name: str = "hash"

    def __post_init__(self) -> None:
        if not isinstance(self.key, bytes) or len(self.key) < 16:
            raise ConfigurationError("hash needs a key of at least 16 bytes")

    def token(self, value: str) -> str:
        digest = hmac.new(self.key, value.encode("utf-8"), hashlib.sha256).digest()[:10]
        return base64.b32encode(digest).decode("ascii").lower()

    def replace(self, finding: Finding) -> str:
        return f"[{finding.detector.upper()}:{self.token(finding.value)}]"


@dataclass(frozen=True)
class Block:
    """Refuse the whole batch: nothing of it is stored."""

    name: str = "block"

    def replace(self, finding: Finding) -> str:
        return f"[{finding.detector.upper()}]"


@dataclass(frozen=True)
class Vault:
    """``[EMAIL:vault:…]``: a random token; the original is sealed in the vault table."""

    name: str = "vault"

    def replace(self, finding: Finding) -> str:
        return f"[{finding.detector.upper()}:vault:{secrets.token_hex(8)}]"
