"""The audit trail: pseudonymous scopes, keyed digests, append-only reads."""

from __future__ import annotations

import pytest

from memstack import ConfigurationError
from memstack.audit import AuditTrail
from memstack.backends.whole_store import whole_store
from memstack.crypto import generate_key
from memstack.testing import FakeClock

from .conftest import Store

KEY = generate_key()


async def test_records_hold_pseudonyms_and_digests_not_ids_or_content(
    sqlite_store: Store,
) -> None:
    wide = whole_store(sqlite_store.open("x"))
    clock = FakeClock(1000.0)
    trail = AuditTrail(wide, key=KEY, actor="job", clock=clock)
    first = await trail.record(
        "redact", scope="ann:t1", counts={"email": 1}, content=["ann@example.com"]
    )
    clock.tick(5)
    await trail.record("purge", scope="*", counts={"items": 2})
    assert first.scope.startswith("p:") and len(first.scope) == 18
    assert first.digest == trail.digest(["ann@example.com"]) != trail.digest(["bob@example.com"])
    assert "ann" not in repr(first)
    other = AuditTrail(wide, key=generate_key())
    assert other.pseudonym("ann:t1") != first.scope  # a pseudonym needs the key to link
    records = await trail.read(10)
    assert [(r.action, r.at, r.scope) for r in records] == [
        ("redact", 1000.0, first.scope),
        ("purge", 1005.0, "*"),
    ]
    assert [r.record_id for r in await trail.read(10, scope="ann:t1")] == [first.record_id]


async def test_without_a_key_scopes_and_digests_are_not_recorded(sqlite_store: Store) -> None:
    trail = AuditTrail(whole_store(sqlite_store.open("x")), actor="job")
    record = await trail.record("erase", scope="user:ann", counts={"sessions": 1}, content=["x"])
    assert record.scope == "-" and record.digest is None
    with pytest.raises(ConfigurationError, match="only with the audit key"):
        await trail.read(scope="user:ann")


def test_bad_arguments(sqlite_store: Store) -> None:
    wide = whole_store(sqlite_store.open("x"))
    with pytest.raises(ConfigurationError, match="audit_key must be 32 random bytes"):
        AuditTrail(wide, key="hunter2")
    with pytest.raises(ConfigurationError, match="actor"):
        AuditTrail(wide, actor="x" * 300)


async def test_unknown_actions_are_refused(sqlite_store: Store) -> None:
    trail = AuditTrail(whole_store(sqlite_store.open("x")))
    with pytest.raises(ConfigurationError, match="audit action"):
        await trail.record("delete", scope="*", counts={})
