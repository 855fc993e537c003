"""Redaction before storage: secrets and personal data never reach the layers below.

    >>> import asyncio
    >>> from memstack.layers.redact import RedactSession
    >>> from memstack.testing import InMemorySession
    >>> store = InMemorySession("ann:t1")
    >>> session = RedactSession(store)
    >>> asyncio.run(session.add_items([{"role": "user", "content": "Mail ann@example.com"}]))
    >>> asyncio.run(store.get_items())
    [{'role': 'user', 'content': 'Mail [EMAIL]'}]

Wires ``memstack.redaction``: the policy rewrites each batch (free text, tool-call
arguments as JSON, tool outputs; never ids, call ids or types); a ``block`` finding
raises ``ContentBlockedError`` before anything is stored; ``vault`` findings are sealed
into the store's vault side table first; counts and a keyed digest go to the audit trail.
Reads return what is stored. Stores without side tables (in-memory test sessions) keep
no audit trail and refuse the ``vault`` strategy at the first write.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from agents.memory import Session
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from memstack.audit import AuditTrail
from memstack.backends.adapters import capabilities_of
from memstack.backends.capabilities import (
    Item,
    PassingCapabilities,
    Predicate,
    StorageCapabilities,
    Tail,
    check_replacement,
)
from memstack.backends.whole_store import WholeStore, whole_store
from memstack.base import SessionLayer
from memstack.crypto.keys import KeyProvider, Keyring, parse_key
from memstack.errors import CapabilityError, ConfigurationError, ContentBlockedError
from memstack.redaction.policy import Redaction, RedactionPolicy
from memstack.redaction.vault import VaultCipher, vault_tokens

if TYPE_CHECKING:
    from agents.run_context import RunContextWrapper

__all__ = ["RedactCapabilities", "RedactSession"]


def _derived_hash_key(keys: KeyProvider) -> bytes:
    master = parse_key(cast("bytes | str", keys.key(keys.active_kid)))
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"memstack/redact/hash")
    return hkdf.derive(master)


class RedactSession(SessionLayer):
    """Rewrites secrets and personal data in every item before it is stored."""

    layer_name = "redact"

    def __init__(
        self,
        inner: Session,
        *,
        detectors: Sequence[str] | None = None,
        patterns: Mapping[str, str] | None = None,
        strategies: Mapping[str, str] | None = None,
        key: bytes | str | None = None,
        keyring: KeyProvider | None = None,
        hash_key: bytes | str | None = None,
        mask_keep_last: int = 4,
        presidio: bool | Mapping[str, Any] = False,
        audit: bool = True,
        audit_key: bytes | str | None = None,
        actor: str | None = None,
    ) -> None:
        super().__init__(inner)
        name = type(self).__name__
        try:
            if key is not None and keyring is not None:
                raise ConfigurationError("pass at most one of key= or keyring=")
            self.keys: KeyProvider | None = (
                keyring if keyring is not None else None if key is None else Keyring.of(key)
            )
            if hash_key is not None:
                hashing: bytes | None = parse_key(hash_key, field="hash_key")
            else:
                hashing = None if self.keys is None else _derived_hash_key(self.keys)
            analyzers = []
            if presidio:
                from memstack.redaction.presidio import PresidioDetector

                options = dict(presidio) if isinstance(presidio, Mapping) else {}
                analyzers.append(PresidioDetector(**options))
            self.policy = RedactionPolicy.build(
                detectors=detectors,
                patterns=patterns,
                strategies=strategies,
                hash_key=hashing,
                mask_keep_last=mask_keep_last,
                analyzers=analyzers,
            )
            if "vault" in self.policy.uses and self.keys is None:
                raise ConfigurationError("the vault strategy needs key= or keyring=")
            if not isinstance(audit, bool):
                raise ConfigurationError(f"audit must be True or False, got {audit!r}")
            self._vault = (
                VaultCipher(self.session_id, self.keys, layer=name)
                if "vault" in self.policy.uses and self.keys is not None
                else None
            )
            self._audit_key = None if audit_key is None else parse_key(audit_key, field="audit_key")
        except ConfigurationError as exc:
            raise ConfigurationError(exc.reason, layer=name) from exc
        self.audit = audit
        self.actor = actor
        self._store: WholeStore | bool | None = False  # False: not looked up yet

    # -- the store's side tables, found on first use -------------------------------------
    def _whole_store(self) -> WholeStore | None:
        if self._store is False:
            try:
                self._store = whole_store(self.inner)
            except CapabilityError:
                self._store = None
        return self._store if isinstance(self._store, WholeStore) else None

    async def redact(self, items: Sequence[Any]) -> list[dict[str, Any]]:
        """Redact ``items`` for storage: block, seal vaulted originals, audit; return them."""
        name = type(self).__name__
        # The top layer of the stack has validated the batch (memstack.base).
        done: Redaction = self.policy.apply(list(items))
        if done.blocked:
            counts = dict(Counter(hit.detector for hit in done.blocked))
            what = ", ".join(f"{n} {detector}" for detector, n in sorted(counts.items()))
            raise ContentBlockedError(
                f"refused to store {len(items)} item(s): found {what} (strategy block)",
                counts=counts,
                layer=name,
                session_id=self.session_id,
            )
        store = self._whole_store()
        if done.vaulted:
            if store is None or self._vault is None:
                raise CapabilityError(
                    f"the vault strategy needs a store with side tables; "
                    f"{type(self.backend).__name__} has none",
                    layer=name,
                    session_id=self.session_id,
                )
            vault = self._vault
            await store.vault_put(
                self.session_id,
                {
                    vault_tokens(hit.replacement)[0]: vault.seal(hit.detector, hit.value)
                    for hit in done.vaulted
                },
            )
        if done.hits and self.audit and store is not None:
            trail = AuditTrail(store, key=self._audit_key, actor=self.actor)
            await trail.record(
                "redact",
                scope=self.session_id,
                counts=done.counts,
                content=[hit.value for hit in done.hits],
            )
        return done.items

    async def write(self, items: Sequence[Any], wrapper: RunContextWrapper[Any] | None) -> None:
        await self.write_below(await self.redact(items), wrapper)

    async def clear(self, wrapper: RunContextWrapper[Any] | None) -> None:
        await self.clear_below(wrapper)
        store = self._whole_store()
        if store is not None and self._vault is not None:
            await store.vault_delete([self.session_id])

    @property
    def vaults(self) -> bool:
        """True when this layer's policy seals originals in the vault."""
        return self._vault is not None

    async def rotate_vault(self) -> int:
        """Re-seal this session's vault entries under the active key; return how many.

        Entries never change once written (tokens are random), so writing the re-sealed
        ones over the old is safe next to concurrent writers.
        """
        store = self._whole_store()
        if store is None or self._vault is None:
            return 0
        vault = self._vault
        entries = await store.vault_all(self.session_id)
        stale = {
            token: vault.reseal(value)
            for token, value in entries.items()
            if not vault.is_current(value)
        }
        await store.vault_put(self.session_id, stale)
        return len(stale)

    def storage_capabilities(self) -> StorageCapabilities:
        return RedactCapabilities(self)

    def repr_options(self) -> dict[str, object]:
        options: dict[str, object] = {
            "detectors": len(self.policy.detectors),
            "default": self.policy.default.name,
        }
        if self.policy.strategies:
            options["strategies"] = {k: s.name for k, s in self.policy.strategies.items()}
        return options


class RedactCapabilities(PassingCapabilities):
    """The store's capabilities; items a rewrite adds are redacted like ``add_items``'."""

    session: RedactSession

    def __init__(self, session: RedactSession) -> None:
        super().__init__(session, capabilities_of(session.inner))

    async def replace_oldest(
        self, n: int, items: Sequence[Item], *, expect: Sequence[Item] | None = None
    ) -> bool:
        check_replacement(n, items)
        clean = await self.session.redact(items)
        return await self.below.replace_oldest(n, clean, expect=expect)

    async def delete_where(
        self, predicate: Predicate, *, batch_size: int = 500, prefix_only: bool = False
    ) -> int:
        return await self.below.delete_where(
            predicate, batch_size=batch_size, prefix_only=prefix_only
        )

    async def delete_written_before(self, older_than: float, *, batch_size: int = 500) -> int:
        return await self.below.delete_written_before(older_than, batch_size=batch_size)

    async def read_tail(self, n: int, *, wrapper: RunContextWrapper[Any] | None = None) -> Tail:
        # Stored as read (redacted): the layer below's items and write times are these.
        return await self.below.read_tail(n, wrapper=wrapper)

    async def add_derived(
        self,
        items: Sequence[Item],
        *,
        derived_from: float | None,
        wrapper: RunContextWrapper[Any] | None = None,
    ) -> None:
        clean = await self.session.redact(items)
        await self.below.add_derived(clean, derived_from=derived_from, wrapper=wrapper)
