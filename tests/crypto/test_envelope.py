"""Format 1 of the envelope: fields, binding, compression, canonical encoding, tampering."""

from __future__ import annotations

import base64
import json
import random
import zlib
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from memstack import DecryptionError, ItemValidationError
from memstack.crypto import Keyring, generate_key, key_id, parse_key
from memstack.crypto.envelope import ZDICT, ZDICT_2, SessionCipher

KEY = generate_key()
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
LONG = {"type": "function_call_output", "call_id": "call_1", "output": "line of log\n" * 200}
SHORT = {"role": "user", "content": "hi"}


def cipher(session_id: str = "s1", **options: object) -> SessionCipher:
    return SessionCipher(session_id, Keyring.of(KEY), layer="test", **options)  # type: ignore[arg-type]


def blob(envelope: dict[str, object]) -> bytes:
    text = str(envelope["ct"])
    return base64.b64decode(text + "=" * (-len(text) % 4))


def rebuild(envelope: dict[str, object], data: bytes) -> dict[str, object]:
    return {**envelope, "ct": base64.b64encode(data).rstrip(b"=").decode()}


def test_envelope_has_exactly_the_documented_fields() -> None:
    envelope = cipher().seal(LONG)
    assert envelope.keys() == {"menc", "kid", "ct"}
    assert envelope["menc"] == 1 and envelope["kid"] == key_id(KEY)
    assert "=" not in envelope["ct"] and set(envelope["ct"]) <= set(ALPHABET)
    assert cipher().open(envelope) == LONG


def test_the_written_down_format_decrypts_an_envelope_independently() -> None:
    """Follow the module docstring by hand: HKDF, AAD, nonce ‖ ct ‖ tag, flag, raw deflate."""
    envelope = cipher("user-42").seal(LONG)
    session_key = HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=b"memstack/encrypted/1",
        info=b"session-key\x00user-42",
    ).derive(parse_key(KEY))
    aad = b"memstack/encrypted/1\x00" + key_id(KEY).encode() + b"\x00user-42"
    data = blob(envelope)
    plaintext = AESGCM(session_key).decrypt(data[:12], data[12:], aad)
    assert plaintext[0] == 1  # deflated
    body = zlib.decompressobj(-15, zdict=ZDICT).decompress(plaintext[1:])
    assert json.loads(body) == LONG


def test_compression_shrinks_large_items_and_skips_small_ones() -> None:
    on, off = cipher(), cipher(compress=False)
    raw_len = len(json.dumps(LONG, separators=(",", ":")))
    assert len(blob(on.seal(LONG))) < raw_len / 10
    assert len(blob(off.seal(LONG))) == 12 + 1 + raw_len + 16
    short_len = len(json.dumps(SHORT, separators=(",", ":")))
    assert len(blob(on.seal(SHORT))) == 12 + 1 + short_len + 16  # under compress_min_bytes
    assert len(blob(cipher(compress_min_bytes=0).seal(SHORT))) < 12 + 1 + short_len + 16


def test_incompressible_items_are_stored_raw() -> None:
    # Random printable text shares nothing with the dictionary and costs 8 bits a
    # literal in fixed Huffman: deflate cannot win, so the flag says raw.
    rng = random.Random(7)
    text = "".join(
        rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789!#$%&()*+,-./:;<=>?@[]^_`{|}~")
        for _ in range(100)
    )
    noise = {"k": text}
    sealed = cipher().seal(noise)
    assert len(blob(sealed)) == 12 + 1 + len(json.dumps(noise, separators=(",", ":"))) + 16
    assert cipher().open(sealed) == noise


def test_non_ascii_and_lone_surrogates_round_trip() -> None:
    item = {"role": "user", "content": "héllo 你好 🚀 \ud800 end" * 10}
    assert cipher().open(cipher().seal(item)) == item


def test_envelope_is_bound_to_its_session() -> None:
    with pytest.raises(DecryptionError, match="belongs to another session") as caught:
        cipher("bob").open(cipher("alice").seal(SHORT))
    assert caught.value.session_id == "bob" and caught.value.key_id == key_id(KEY)


def test_relabelled_key_id_fails_to_authenticate() -> None:
    first, second = generate_key(), generate_key()
    ring = Keyring({"a": first, "b": second}, active="a")
    sealer = SessionCipher("s1", ring)
    with pytest.raises(DecryptionError, match="cannot authenticate"):
        sealer.open({**sealer.seal(SHORT), "kid": "b"})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"menc": 3}, "unknown envelope format version 3"),
        ({"menc": 2}, "cannot authenticate"),  # format 2 is known: relabelled, it fails
        ({"menc": True}, "unknown envelope format version True"),
        ({"menc": "1"}, "unknown envelope format version '1'"),
        ({"extra": 1}, "malformed envelope"),
        ({"kid": 7}, "malformed envelope"),
        ({"kid": "nope"}, "key id 'nope', which the key provider does not hold"),
        ({"ct": 12}, "not valid base64"),
        ({"ct": ""}, "truncated"),
        ({"ct": "AAAA"}, "truncated"),
        ({"ct": "a b"}, "not valid base64"),
    ],
)
def test_malformed_envelopes_raise(change: dict[str, object], message: str) -> None:
    with pytest.raises(DecryptionError, match=message):
        cipher().open({**cipher().seal(SHORT), **change})


def test_non_canonical_base64_is_refused() -> None:
    envelope = cipher().seal({"role": "user", "content": "x" * 5})
    text = envelope["ct"]
    data = blob(envelope)
    assert len(data) % 3 != 0  # so the last character carries unused bits
    urlsafe = base64.urlsafe_b64encode(data).decode().rstrip("=")
    spellings = {
        "padded": text + "=" * (-len(text) % 4),
        "with a newline": text + "\n",
        "with a space": text[:10] + " " + text[10:],
        "with a non-ASCII letter": text[:10] + "é" + text[11:],
        "with a non-ASCII last letter": text[:-1] + "é",
    }
    if urlsafe != text:
        spellings["urlsafe alphabet"] = urlsafe
    # The last character carries unused low bits; setting one must not go unnoticed.
    loose = text[:-1] + ALPHABET[ALPHABET.index(text[-1]) ^ 1]
    assert base64.b64decode(loose + "=" * (-len(loose) % 4)) == data
    spellings["unused bit set"] = loose
    for name, spelling in spellings.items():
        with pytest.raises(DecryptionError, match="base64"):
            cipher().open({**envelope, "ct": spelling})
            pytest.fail(f"accepted the {name} spelling")


def test_a_thousand_bit_flips_in_the_sealed_bytes_are_all_detected() -> None:
    rng = random.Random(20240601)
    sealer = cipher()
    envelopes = [sealer.seal(LONG), sealer.seal(SHORT)]
    for _ in range(1000):
        envelope = rng.choice(envelopes)
        data = bytearray(blob(envelope))
        bit = rng.randrange(len(data) * 8)
        data[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(DecryptionError, match="cannot authenticate"):
            sealer.open(rebuild(envelope, bytes(data)))


def test_every_truncation_of_the_sealed_bytes_is_detected() -> None:
    sealer = cipher()
    envelope = sealer.seal(LONG)
    data = blob(envelope)
    for length in range(len(data)):
        with pytest.raises(DecryptionError):
            sealer.open(rebuild(envelope, data[:length]))


def test_seal_validates_items_with_their_index() -> None:
    with pytest.raises(ItemValidationError, match="item 3 is not JSON-serialisable"):
        cipher().seal({"x": {1, 2}}, index=3)
    with pytest.raises(ItemValidationError, match="item 0 must be a dict, not str"):
        cipher().seal("text")
    with pytest.raises(ItemValidationError, match="not JSON-serialisable"):
        cipher().seal({"x": float("nan")})


# -- the cache of authenticated envelopes ---------------------------------------------------


class CountingAead:
    """Stands in for AESGCM to count decryptions; delegates the real work."""

    def __init__(self, real: AESGCM) -> None:
        self.real, self.decrypts = real, 0

    def decrypt(self, nonce: bytes, data: bytes, aad: bytes) -> bytes:
        self.decrypts += 1
        return self.real.decrypt(nonce, data, aad)

    def encrypt(self, nonce: bytes, data: bytes, aad: bytes) -> bytes:
        return self.real.encrypt(nonce, data, aad)


def counting(reader: SessionCipher, kid: str) -> CountingAead:
    reader.open(reader.seal(SHORT))  # derive the key once (kept in the process cache)
    known = reader._aead(kid)
    assert known is not None
    spy = CountingAead(known.aead)
    known.aead = spy  # type: ignore[assignment]
    return spy


def test_an_envelope_is_authenticated_once_then_read_from_the_cache() -> None:
    reader = cipher()
    spy = counting(reader, key_id(KEY))
    envelope = reader.seal(LONG)
    first = reader.open(envelope)
    first["output"] = "changed by the caller"
    again = reader.open(dict(envelope))
    assert again == LONG  # a fresh dict every read: callers cannot alter the cache
    assert spy.decrypts == 1


def test_nested_values_of_a_cached_item_are_fresh_too() -> None:
    reader = cipher()
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    envelope = reader.seal(item)
    reader.open(envelope)["content"][0]["text"] = "changed by the caller"
    reader.open(envelope)["content"].append({"type": "input_text", "text": "more"})
    assert reader.open(envelope) == item


def test_the_cache_never_answers_for_another_key_id_or_a_tampered_envelope() -> None:
    first, second = generate_key(), generate_key()
    sealer = SessionCipher("s1", Keyring({"a": first, "b": second}, active="a"))
    envelope = sealer.seal(SHORT)
    assert sealer.open(envelope) == SHORT  # now cached under ("a", ct)
    with pytest.raises(DecryptionError, match="cannot authenticate"):
        sealer.open({**envelope, "kid": "b"})
    flipped = bytearray(blob(envelope))
    flipped[-1] ^= 1
    with pytest.raises(DecryptionError, match="cannot authenticate"):
        sealer.open(rebuild(envelope, bytes(flipped)))


def test_opened_items_live_under_the_process_budget() -> None:
    from memstack import cache

    cache.clear()
    cache.configure(max_bytes=64_000)
    try:
        reader = cipher()
        for n in range(200):
            reader.open(reader.seal({"role": "user", "content": f"item {n} " + "x" * 50}))
        assert cache.total_bytes() <= 64_000
        assert cache.stats()["envelopes"].evictions > 0
    finally:
        cache.configure(max_bytes=cache.DEFAULT_MAX_BYTES)


# -- format 2: facts sealed with the item ---------------------------------------------------
FACTS = {"tokens:1:o200k_base": [7, 0], "later:name": "kept as written"}


def test_format_2_seals_facts_with_the_item_and_format_1_reads_on() -> None:
    writer = cipher(facts=lambda item: FACTS)
    old, new = cipher().seal(SHORT), writer.seal(LONG)
    assert old["menc"] == 1 and new["menc"] == 2 and new.keys() == {"menc", "kid", "ct"}
    for n, reader in enumerate((cipher(), writer)):  # reading does not depend on writing
        assert reader.open_all([old, new]) == [SHORT, LONG]
        keys = [bytes([n]) * 16, bytes([n + 8]) * 16]  # new keys: opened afresh
        items, _, facts = reader.open_keyed([old, new], keys, b"t")
        assert items == [SHORT, LONG] and facts == [None, FACTS]
        assert reader.open_keyed([old, new], keys, b"t")[2] == [None, None]  # kept: none
    assert writer.is_current(new) and writer.is_current(old)  # rotation does not rewrite


def test_format_2_facts_cannot_be_altered_or_relabelled() -> None:
    writer = cipher(facts=lambda item: FACTS)
    envelope = writer.seal(LONG)
    data = bytearray(blob(envelope))
    data[-20] ^= 1  # anywhere in the ciphertext: the facts are sealed with the item
    for forged in (rebuild(envelope, bytes(data)), {**envelope, "menc": 1}):
        with pytest.raises(DecryptionError, match="cannot authenticate"):
            cipher().open(forged)
    with pytest.raises(DecryptionError, match="cannot authenticate"):
        cipher().open({**cipher().seal(LONG), "menc": 2})


def test_format_2_plaintext_is_facts_then_item_as_documented() -> None:
    envelope = cipher(facts=lambda item: FACTS, compress=False).seal(SHORT)
    raw, session = blob(envelope), _session_aead("s1")
    aad = b"memstack/encrypted/2\x00" + key_id(KEY).encode() + b"\x00s1"
    plaintext = session.decrypt(raw[:12], raw[12:], aad)
    assert plaintext[0] == 0 and json.loads(plaintext[1:]) == [FACTS, SHORT]
    deflated = cipher(facts=lambda item: FACTS).seal(LONG)
    raw = blob(deflated)
    body = session.decrypt(raw[:12], raw[12:], aad)
    unpacker = zlib.decompressobj(-15, zdict=ZDICT_2)
    assert body[0] == 1 and json.loads(unpacker.decompress(body[1:])) == [FACTS, LONG]


@pytest.mark.parametrize(
    "body",
    [
        *(b'{"role":"user"}', b"[[], {}]", b"[{}, {}, {}]", b"[{}, 3]", b"[3,{}]"),
        *(b'[{},{"role":"user"}', b'[{},{"role":"user"}]x', b'[{}{"role":"user"}]'),
        *(b'[{},{"role":"user"},]', b"[{}]", b"[{},]"),
    ],
)
def test_format_2_body_of_another_shape_is_corrupt(body: bytes) -> None:
    session, nonce = _session_aead("s1"), b"\x01" * 12
    aad = b"memstack/encrypted/2\x00" + key_id(KEY).encode() + b"\x00s1"
    sealed = nonce + session.encrypt(nonce, b"\x00" + body, aad)
    envelope = rebuild({"menc": 2, "kid": key_id(KEY)}, sealed)
    with pytest.raises(DecryptionError, match=r"corrupt|not an item"):
        cipher().open(envelope)


def _session_aead(session_id: str) -> AESGCM:
    hkdf = HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=b"memstack/encrypted/1",
        info=b"session-key\x00" + session_id.encode(),
    )
    return AESGCM(hkdf.derive(parse_key(KEY)))


async def test_a_whole_read_asks_no_per_envelope_entry_it_never_keeps(tmp_path: Path) -> None:
    """A read kept whole (``memstack.incremental``) keeps no entry per envelope, so a
    lookup there cannot hit: ``/stats`` showed ``envelopes`` with misses and 0 entries
    (a new-user trial), and each lookup hashed a whole ciphertext."""
    from agents import SQLiteSession

    from memstack import cache
    from memstack.layers import EncryptedSession

    cache.clear()
    stack = EncryptedSession(SQLiteSession("s", tmp_path / "chat.db"), key=KEY)
    for turn in range(3):
        await stack.add_items([{"role": "user", "content": f"question {turn}"}])
        await stack.get_items()
    assert [item["content"] for item in await stack.get_items()] == [
        "question 0",
        "question 1",
        "question 2",
    ]
    envelopes = cache.stats().get("envelopes")
    assert envelopes is None or (envelopes.misses, envelopes.entries) == (0, 0)
