"""Another layer's stored format met by encryption: a typed error naming that layer.

Found trying memstack as a new user: a stack built from another recipe (TTL removed from
below encryption) met TTL records; encryption called them "plaintext" and advised
`adopt`, which sealed them as items, and every stack then handed them to the model.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from agents import SQLiteSession

from memstack import ForeignRecordError
from memstack.compaction import ExtractiveSummarizer, Items, Summarize
from memstack.compaction.records import RECORD_TYPE
from memstack.crypto import generate_key
from memstack.crypto.envelope import MARKER as ENVELOPE_MARKER
from memstack.formats import written_by
from memstack.layers import CompactionSession, EncryptedSession, TTLSession
from memstack.layers.ttl.record import MARKER as TTL_MARKER

ITEMS: list[Any] = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello"},
]
KEY = generate_key()


def rows(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        return [
            text for (text,) in db.execute("select message_data from agent_messages order by id")
        ]


def test_each_layers_format_is_named_and_items_are_not() -> None:
    assert written_by({TTL_MARKER: 1, "t": 0.0, "item": ITEMS[0]}) == "TTLSession"
    assert written_by({ENVELOPE_MARKER: 1, "kid": "k", "ct": "x"}) == "EncryptedSession"
    assert written_by({"__enc__": 1, "v": 1, "kid": "hkdf-v1", "payload": "x"}) == (
        "the SDK's EncryptedSession"
    )
    assert written_by({"type": RECORD_TYPE, "v": 1}) == "CompactionSession"
    for item in (*ITEMS, {"type": "function_call", "call_id": "c", "name": "f"}, {"x": 1}, 3):
        assert written_by(item) is None


async def test_encryption_over_ttl_records_names_the_missing_layer_not_plaintext(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chat.db"
    await EncryptedSession(TTLSession(SQLiteSession("s", path), ttl=3600), key=KEY).add_items(ITEMS)
    before = rows(path)
    for allow_plaintext in (False, True):
        encrypted = EncryptedSession(
            SQLiteSession("s", path), key=KEY, allow_plaintext=allow_plaintext
        )
        with pytest.raises(ForeignRecordError, match=r"TTLSession") as raised:
            await encrypted.get_items()
        assert "adopt" not in str(raised.value)
    with pytest.raises(ForeignRecordError, match=r"TTLSession"):
        await EncryptedSession(SQLiteSession("s", path), key=KEY).adopt()
    assert rows(path) == before  # nothing sealed, nothing rewritten
    # Through the stack that wrote it, it reads as ever.
    stack = EncryptedSession(TTLSession(SQLiteSession("s", path), ttl=3600), key=KEY)
    assert await stack.get_items() == ITEMS


async def test_encryption_over_compaction_records_names_the_missing_layer(
    tmp_path: Path,
) -> None:
    """Compaction above encryption seals its records; one in the clear below encryption
    means the stack's order changed."""
    path = tmp_path / "chat.db"
    compaction = CompactionSession(
        SQLiteSession("s", path),
        strategy=Summarize(ExtractiveSummarizer(), max_tokens=200),
        trigger=Items(8, target=4),
    )
    for turn in range(8):
        await compaction.add_items(
            [
                {"role": "user", "content": f"question {turn}"},
                {"role": "assistant", "content": f"answer {turn}"},
            ]
        )
    assert any(RECORD_TYPE in text for text in rows(path))
    encrypted = EncryptedSession(SQLiteSession("s", path), key=KEY, allow_plaintext=True)
    with pytest.raises(ForeignRecordError, match=r"CompactionSession"):
        await encrypted.get_items()


def test_the_markers_are_the_layers_own() -> None:
    from memstack import formats
    from memstack.crypto.legacy import _SDK_MARKER

    assert (formats.TTL_MARKER, formats.ENVELOPE_MARKER) == (TTL_MARKER, ENVELOPE_MARKER)
    assert (formats.SDK_ENVELOPE_MARKER, formats.COMPACTION_TYPE) == (_SDK_MARKER, RECORD_TYPE)
