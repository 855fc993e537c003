"""Typed errors raised by memstack.

Every failure memstack can report derives from one root, so applications can catch
``MemstackError`` at their boundary and still tell causes apart::

    MemstackError
    ├── ConfigurationError        bad option, unknown layer, wrong argument   (also ValueError)
    │   ├── RecipeError           a recipe file or mapping that does not validate
    │   ├── VocabularyError       a tokenizer vocabulary missing or failing its hash
    │   ├── MemoryTooLargeError   a memory longer than the store's max_memory_tokens
    │   └── MissingDriverError    a memory store URL's dialect or driver not installed here
    ├── ItemValidationError       an item that is not a JSON-serialisable dict (also TypeError)
    ├── BackendError              the store failed or is unreachable
    │   ├── CapabilityError       the store cannot do an operation (atomically)
    │   ├── TransientError        deadlock or serialisation failure on every attempt
    │   └── StoredItemError       a stored value no layer can read (``memstack repair``)
    │       └── ForeignRecordError  another layer's stored format, read by a stack without it
    ├── DecryptionError           wrong or missing key, tampered or unknown envelope
    ├── SummarizerError           a summariser failed, timed out or answered unusably
    ├── ContentBlockedError       redaction found data its policy blocks; nothing was stored
    ├── UnknownUserError          forget found no session, vault entry or memory of the user
    └── DistillationError         a memory extractor failed or answered unusably

``CompactionWarning`` (a ``UserWarning``) reports a failed automatic compaction when
the layer's policy is to warn instead of raise.

The original exception is always kept as ``__cause__`` (``raise … from exc``).
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "CapabilityError",
    "CompactionWarning",
    "ConfigurationError",
    "ContentBlockedError",
    "DecryptionError",
    "DistillationError",
    "ForeignRecordError",
    "ItemValidationError",
    "MemoryTooLargeError",
    "MemstackError",
    "MissingDriverError",
    "RecipeError",
    "StoredItemError",
    "SummarizerError",
    "TransientError",
    "UnknownUserError",
]


class MemstackError(Exception):
    """Root of every error memstack raises."""

    def __init__(self, message: str, *, layer: str | None = None, session_id: str | None = None):
        self.layer = layer
        self.session_id = session_id
        self.reason = message
        where = " ".join(
            part
            for part in (layer, f"session {session_id!r}" if session_id is not None else None)
            if part
        )
        super().__init__(f"{where}: {message}" if where else message)


class ConfigurationError(MemstackError, ValueError):
    """An option, layer name or argument is not acceptable."""


class VocabularyError(ConfigurationError):
    """A tokenizer vocabulary file is missing, unreadable or not the one tiktoken expects."""


class MemoryTooLargeError(ConfigurationError):
    """A memory is longer than any recall could inject; ``tokens`` is its length.

    Refused rather than stored: recall packs whole memories into a token budget, so one
    longer than the budget would be kept (and searched) but never returned.
    """

    def __init__(self, message: str, *, tokens: int, limit: int, layer: str | None = None) -> None:
        super().__init__(message, layer=layer)
        self.tokens = tokens
        self.limit = limit


class MissingDriverError(ConfigurationError):
    """A store URL whose dialect or driver is not installed on this machine.

    Its own type because another machine may have it: ``memstack validate`` without
    ``--resolve`` only warns of it, as CI need not install every production driver.
    """


class RecipeError(ConfigurationError):
    """A recipe does not validate; the message names the file, layer and field."""


class ItemValidationError(MemstackError, TypeError, ValueError):
    """An item handed to a session cannot be stored faithfully.

    A ``TypeError`` as the SDK's stores raise for an unserialisable item, and still a
    ``ValueError`` as in earlier releases.
    """


class BackendError(MemstackError):
    """The underlying store failed or could not be reached."""


class CapabilityError(BackendError):
    """The store cannot perform the requested operation, or not atomically."""


class TransientError(BackendError):
    """The database rolled a transaction back on every attempt (``memstack.backends.retry``).

    ``attempts`` tries were made and each was rolled back whole, so nothing of it is
    stored; ``cause`` says why (``"deadlock (MySQL 1213)"``). Trying later is safe.
    """

    def __init__(
        self,
        message: str,
        *,
        attempts: int,
        cause: str,
        layer: str | None = None,
        session_id: str | None = None,
    ) -> None:
        super().__init__(message, layer=layer, session_id=session_id)
        self.attempts = attempts
        self.cause = cause


class StoredItemError(BackendError):
    """A value in the store is not an item (written around memstack, or damaged).

    ``position`` counts from the newest stored value (1 is the newest). Nothing is skipped
    or deleted for it: ``memstack repair RECIPE --session ID`` shows and removes it.
    """

    def __init__(
        self,
        message: str,
        *,
        position: int,
        layer: str | None = None,
        session_id: str | None = None,
    ) -> None:
        super().__init__(message, layer=layer, session_id=session_id)
        self.position = position


class ForeignRecordError(StoredItemError):
    """A value in a layer's own stored format reached a stack without that layer.

    The stack was built from another recipe, or a layer was removed: read the session
    through a stack with the layer named in ``layer``. The value is not damaged, so
    ``memstack repair`` must not remove it.
    """


class DecryptionError(MemstackError):
    """Stored data could not be authenticated or decrypted; ``key_id`` names the key tried."""

    def __init__(
        self,
        message: str,
        *,
        layer: str | None = None,
        session_id: str | None = None,
        key_id: str | None = None,
    ) -> None:
        super().__init__(message, layer=layer, session_id=session_id)
        self.key_id = key_id


class SummarizerError(MemstackError):
    """A summariser call failed, timed out or returned no usable summary; nothing was stored."""


class ContentBlockedError(MemstackError):
    """Items held data the redaction policy blocks; ``counts`` says what, never the values."""

    def __init__(
        self,
        message: str,
        *,
        counts: dict[str, int],
        layer: str | None = None,
        session_id: str | None = None,
    ) -> None:
        super().__init__(message, layer=layer, session_id=session_id)
        self.counts = counts


class UnknownUserError(MemstackError):
    """A user to forget has nothing in the store: no session, vault entry or memory."""


class CompactionWarning(UserWarning):
    """An automatic compaction failed and history was left uncompacted (``on_error="warn"``)."""


class DistillationError(MemstackError):
    """A memory extractor failed or returned no usable answer; nothing was stored."""
