"""memstack's encrypted envelope, formats 1 and 2: one item in, one small JSON dict out.

    >>> from memstack.crypto import Keyring, generate_key
    >>> from memstack.crypto.envelope import SessionCipher
    >>> cipher = SessionCipher("user-42", Keyring.of(generate_key()))
    >>> envelope = cipher.seal({"role": "user", "content": "my IBAN is …"})
    >>> sorted(envelope)
    ['ct', 'kid', 'menc']
    >>> cipher.open(envelope)
    {'role': 'user', 'content': 'my IBAN is …'}

Format 1, as stored by the layer below::

    {"menc": 1, "kid": "<key id>", "ct": "<base64, no padding: nonce ‖ ciphertext ‖ tag>"}

- ``menc``: format version (an int). Any other value is refused.
- ``kid``: id of the master key (1-64 of ``A-Za-z0-9._:-``).
- ``ct``: 12-byte random nonce, then AES-256-GCM ciphertext with its 16-byte tag, in
  canonical unpadded standard base64 (RFC 4648 §4 alphabet, no ``=``; any other spelling
  of the same bytes is refused).
- session key = HKDF-SHA256(master key, salt=``b"memstack/encrypted/1"``,
  info=``b"session-key\\x00"`` + session id as UTF-8), 32 bytes.
- associated data = ``b"memstack/encrypted/1\\x00"`` + kid + ``b"\\x00"`` + session id as
  UTF-8, so an envelope moved to another session, relabelled or given another version
  fails to authenticate.
- plaintext = one flag byte, then the body: ``0x00`` the item as compact JSON in UTF-8
  (written ASCII-only, with ``\\u`` escapes); ``0x01`` that JSON raw-deflated (RFC 1951)
  with the preset dictionary ``ZDICT`` below.
  The flag sits inside the ciphertext, so the layers below do not learn which items
  were compressed. ``ZDICT`` is part of format 1 and never changes.

Format 2 (written by a cipher given ``facts=``; both are always read) is format 1 with
facts about the item sealed beside it, so that a reader need not re-derive them::

    {"menc": 2, "kid": "<key id>", "ct": "<as format 1>"}

- associated data = ``b"memstack/encrypted/2\\x00"`` + kid + ``b"\\x00"`` + session id as
  UTF-8 (the session key is format 1's): relabelling a format-2 envelope as format 1, or
  back, fails to authenticate.
- plaintext = the flag byte, then the body: the compact JSON array ``[facts, item]``,
  ``facts`` a JSON object (raw-deflated with ``ZDICT_2``, ``ZDICT`` and the start of such a
  body). Facts are authenticated with the item; each name says what it means and readers
  skip names they do not know. memstack writes ``"tokens:<rules>:<encoding>": [text
  tokens, media parts]``: the item's token count parts as ``memstack.tokens`` counts them
  (``TokenCounter.parts``), so the first read of a process tokenises nothing it opens.

Size: 28 bytes of nonce and tag per item, base64's 4/3, and about 30 bytes of JSON.
Compression (items of ``compress_min_bytes`` or more; kept only when it saves) more than
pays for that on real histories. It also makes the ciphertext length depend on how
repetitive the item is, not only on its size; switch it off where an attacker can both
inject text into a history and watch stored sizes.
"""

from __future__ import annotations

import binascii
import hashlib
import json
import marshal
import operator
import os
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

import memstack.cache as cache
import memstack.incremental as incremental
from memstack.content_keys import derived_key
from memstack.crypto.keys import KeyProvider, check_kid, parse_key
from memstack.errors import ConfigurationError, DecryptionError, ItemValidationError
from memstack.json_text import loads, scan

__all__ = [
    "FACTS_FORMAT",
    "FORMAT",
    "FORMATS",
    "MARKER",
    "ZDICT",
    "ZDICT_2",
    "SessionCipher",
    "is_envelope",
]

FORMAT = 1
FACTS_FORMAT = 2  # format 1 and facts about the item, sealed with it
FORMATS = (FORMAT, FACTS_FORMAT)
MARKER = "menc"
_FIELDS = frozenset({MARKER, "kid", "ct"})
# A kept result of ``open_keyed``: (item, its content key, bytes it holds).
_FIRST, _SECOND, _THIRD = (operator.itemgetter(i) for i in range(3))
_LABEL = b"memstack/encrypted/1"
_LABEL_2 = b"memstack/encrypted/2"
_NONCE = 12
_TAG = 16
_RAW, _DEFLATED = 0, 1

# Common substrings of Responses items as the SDK stores them; deflate finds the cheapest
# matches near the end, so the most frequent fragments come last.
ZDICT = "".join(
    [
        '{"type":"reasoning","id":"rs_","summary":[{"type":"summary_text","text":"',
        '"encrypted_content":"',
        '{"type":"computer_call_output","call_id":"call_","output":{"type":"input_image"',
        '{"type":"web_search_call","action":{"type":"search","query":"',
        '{"type":"input_image","image_url":"data:image/png;base64,',
        '{"type":"input_file","file_data":"',
        '"annotations":[],"logprobs":[]',
        '{"type":"refusal","refusal":"',
        '{"role":"system","content":"',
        '{"role":"developer","content":"',
        '"status":"completed"',
        '"status":"in_progress"',
        '"id":"msg_',
        '"id":"fc_',
        '{"id":"msg_","content":[{"annotations":[],"text":"","type":"output_text"}],'
        '"role":"assistant","status":"completed","type":"message"}',
        '{"arguments":"{\\"","call_id":"call_","name":"","type":"function_call",'
        '"id":"fc_","status":"completed"}',
        '{"call_id":"call_","output":"","type":"function_call_output"}',
        '{"content":"","role":"user"}',
        '{"type":"message","role":"assistant","content":[{"type":"output_text","text":"',
        '{"type":"input_text","text":"',
        '{"role":"assistant","content":"',
        '{"type":"function_call","call_id":"call_","name":"","arguments":"{\\"',
        '{"type":"function_call_output","call_id":"call_","output":"',
        '{"role":"user","content":"',
    ]
).encode("utf-8")


# Format 2's: the same, and the start of its body (the facts the layer seals).
ZDICT_2 = ZDICT + b'[{"tokens:1:o200k_base":['

Facts = dict[str, Any]
FactsOf = Callable[[Mapping[str, Any]], Facts]

# One encoder for every item: json.dumps with options would build a new one per call.
# ASCII output escapes lone surrogates too, so every str round-trips.
_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def is_envelope(value: object) -> bool:
    """True for anything that claims to be a format-1-or-later memstack envelope."""
    return isinstance(value, dict) and MARKER in value


def _b64encode(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).rstrip(b"=").decode("ascii")


# The strict decoder refuses characters outside the alphabet and misplaced padding; a
# trailing '=' and set unused low bits in the last character are refused here, so every
# byte string has exactly one accepted spelling.
_PADDING = ("", "===", "==", "=")
_UNUSED_BITS = (0, 0, 0x0F, 0x03)
_VALUE = bytes(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".find(chr(c)) & 0xFF
    for c in range(256)
)


def _b64decode(text: str) -> bytes:
    """Decode canonical unpadded base64; any other spelling raises ValueError."""
    rest = len(text) % 4
    if text.endswith("="):
        raise ValueError("non-canonical base64: padding")
    # An ASCII str is decoded as it is (any other raises ValueError): no bytes copy.
    data = binascii.a2b_base64(text + _PADDING[rest] if rest else text, strict_mode=True)
    if rest and _VALUE[ord(text[-1])] & _UNUSED_BITS[rest]:
        raise ValueError("non-canonical base64: unused bits are set")
    return data


def _session_key(master: bytes, session_id: str) -> bytes:
    hkdf = HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=_LABEL,
        info=b"session-key\x00" + session_id.encode("utf-8"),
    )
    return hkdf.derive(master)


class SessionCipher:
    """Seals and opens one session's items, with session keys derived from a key provider."""

    def __init__(
        self,
        session_id: str,
        keys: KeyProvider,
        *,
        compress: bool = True,
        compress_min_bytes: int = 64,
        facts: FactsOf | None = None,
        layer: str | None = None,
    ) -> None:
        if compress_min_bytes < 0:
            raise ConfigurationError(
                f"compress_min_bytes must be >= 0, got {compress_min_bytes}", layer=layer
            )
        self.session_id = session_id
        self.keys = keys
        self.compress = compress
        self.compress_min_bytes = compress_min_bytes
        self.facts = facts  # given: format 2, each item sealed with ``facts(item)``
        self.layer = layer
        self._session = session_id.encode("utf-8")

    # -- keys ------------------------------------------------------------------------------
    @property
    def active_kid(self) -> str:
        return check_kid(self.keys.active_kid, field="active key id")

    def _aead(self, kid: str) -> _SessionKey | None:
        """This session's key under ``kid``, asked of the key provider on every call (a
        dropped key stops reads at once); None when the provider does not hold it."""
        try:
            master = self.keys.key(kid)
        except KeyError:  # a provider that raises for an unknown id: the same answer
            master = None
        if master is None:
            return None
        raw = parse_key(master, field=f"key {kid!r}")
        fingerprint = hashlib.blake2b(raw, digest_size=16, person=b"memstack master").digest()
        slot = ("session keys", fingerprint, self.session_id, kid)
        known = cache.get(slot)
        if known is cache.MISSING:
            known = _SessionKey.derive(raw, self.session_id, kid)
            cache.put(slot, known, weight=512)
        return known  # type: ignore[no-any-return]

    def check_active_key(self) -> None:
        """Fail now, not at the first write, when the active key is missing or unusable."""
        kid = self.active_kid
        if self._aead(kid) is None:
            raise ConfigurationError(
                f"the key provider has no key for its own active key id {kid!r}",
                layer=self.layer,
            )

    def error(self, message: str, kid: object = None) -> DecryptionError:
        """A ``DecryptionError`` naming this session and, as ``.key_id``, the key id."""
        return DecryptionError(
            message,
            layer=self.layer,
            session_id=self.session_id,
            key_id=kid if isinstance(kid, str) else None,
        )

    # -- sealing ---------------------------------------------------------------------------
    def encode(self, item: Mapping[str, Any]) -> bytes:
        """The plaintext of an envelope: flag byte and (maybe compressed) JSON: the item
        (format 1), or ``[facts, item]`` (format 2: with ``facts=``)."""
        if self.facts is None:
            raw, zdict = _JSON.encode(item).encode("ascii"), ZDICT
        else:
            raw, zdict = _JSON.encode([self.facts(item), item]).encode("ascii"), ZDICT_2
        if self.compress and len(raw) >= self.compress_min_bytes:
            packer = zlib.compressobj(6, zlib.DEFLATED, -15, zdict=zdict)
            packed = packer.compress(raw) + packer.flush()
            if len(packed) < len(raw):
                return bytes((_DEFLATED,)) + packed
        return bytes((_RAW,)) + raw

    def seal_all(self, items: Sequence[object]) -> list[dict[str, Any]]:
        """Encrypt each item under the active key, asked of the key provider once."""
        kid, known = self._active()
        return [self._sealed(item, index, kid, known) for index, item in enumerate(items)]

    def seal(self, item: object, *, index: int = 0) -> dict[str, Any]:
        """Encrypt one item under the active key."""
        kid, known = self._active()
        return self._sealed(item, index, kid, known)

    def _active(self) -> tuple[str, _SessionKey]:
        kid = self.active_kid
        known = self._aead(kid)
        if known is None:
            raise ConfigurationError(
                f"the key provider has no key for its own active key id {kid!r}",
                layer=self.layer,
            )
        return kid, known

    def _sealed(self, item: object, index: int, kid: str, known: _SessionKey) -> dict[str, Any]:
        if not isinstance(item, dict):
            raise ItemValidationError(
                f"item {index} must be a dict, not {type(item).__name__}", layer=self.layer
            )
        try:
            plaintext = self.encode(item)
        except (TypeError, ValueError) as exc:
            raise ItemValidationError(
                f"item {index} is not JSON-serialisable: {exc}", layer=self.layer
            ) from exc
        nonce = os.urandom(_NONCE)
        version = FORMAT if self.facts is None else FACTS_FORMAT
        sealed = nonce + known.aead.encrypt(nonce, plaintext, known.aad_for(version))
        return {MARKER: version, "kid": kid, "ct": _b64encode(sealed)}

    # -- opening ---------------------------------------------------------------------------
    def is_current(self, envelope: object) -> bool:
        """True when ``envelope`` is in this format under the active key (rotation skips it)."""
        return (
            isinstance(envelope, dict)
            and envelope.keys() == _FIELDS
            and envelope[MARKER] in FORMATS
            and type(envelope[MARKER]) is int
            and envelope["kid"] == self.active_kid
        )

    def open(self, envelope: object) -> dict[str, Any]:
        """The item inside ``envelope``, the caller's own; ``DecryptionError`` when it
        cannot be trusted."""
        item = self.open_all([envelope])[0]
        return marshal.loads(marshal.dumps(item, 2))  # type: ignore[no-any-return]

    def open_all(self, envelopes: Sequence[object]) -> list[dict[str, Any]]:
        """The items inside ``envelopes``, in order; ``DecryptionError`` at the first bad one.

        Each key id is asked of the key provider once per call, so a key dropped from it
        stops every read from then on. An item opened before under the same session key
        (same key id and ciphertext) is taken from the process cache: its entry is made
        only after the envelope authenticated under this session's key and decoded, and
        that key's fingerprint is part of the cache key, so no other session or key, and
        no envelope moved from elsewhere, can be answered from it. The items are shared
        with that cache: read-only.
        """
        keys: dict[str, _SessionKey] = {}
        return [self._open_one(envelope, keys)[0] for envelope in envelopes]

    def open_keyed(
        self, envelopes: Sequence[object], content_keys: Sequence[bytes | None], tag: bytes
    ) -> tuple[list[dict[str, Any]], list[bytes | None], list[Facts | None]] | None:
        """``open_all``, with the envelopes' content keys in, and the items' keys
        (``derived_key(key, tag)``) and the facts sealed with them out (format 2; None
        where there are none, or where the item is not opened afresh); None, opening
        nothing, when a value it has to open is not a memstack envelope (the caller
        decides what that means).

        The last read of this session kept what it opened, by content key
        (``memstack.incremental``), with the fingerprint of the session key under each key
        id it used: those results answer for this read only while the key provider gives
        every one of those key ids the same key (asked once per key id and read, as
        ``open_all`` does); else every envelope is opened again.
        """
        slot = ("opened", self.session_id)
        results, used = incremental.previous_with(slot, content_keys)
        keys: dict[str, _SessionKey] = {}
        if used and not self._same_keys(used, keys):
            results = [incremental.MISSING] * len(results)
        missing = (
            [i for i, result in enumerate(results) if result is incremental.MISSING]
            if incremental.MISSING in results
            else []
        )
        if not all(is_envelope(envelopes[i]) for i in missing):
            return None
        whole = None not in content_keys  # this read can be kept whole (and weighed once)
        facts: list[Facts | None] = [None] * len(results)
        for index in missing:
            item, weight, facts[index] = self._open_one(envelopes[index], keys, keep=not whole)
            key = content_keys[index]
            results[index] = (item, None if key is None else derived_key(key, tag), weight)
        fingerprints = {kid: known.fingerprint for kid, known in keys.items()}
        # Each result's own: its item, and a tuple of three with a derived key and a size.
        weight = sum(map(_THIRD, results)) + (64 + incremental.KEY_WEIGHT + 28) * len(results)
        if whole and weight <= cache.max_bytes() // 8:  # one entry holds them, weighs them
            incremental.keep(slot, content_keys, results, fingerprints, weight=weight)
        elif whole:  # too big to be kept whole: kept item by item, as ``open_all`` keeps them
            for index in missing:
                envelope: dict[str, Any] = envelopes[index]  # type: ignore[assignment]
                kid, text = envelope["kid"], envelope["ct"]
                opened = results[index][0], results[index][2], facts[index]
                where = _slot(keys[kid], envelope[MARKER], kid, text)
                cache.put(where, opened, weight=opened[1])
        return list(map(_FIRST, results)), list(map(_SECOND, results)), facts

    def _same_keys(self, used: dict[str, bytes], keys: dict[str, _SessionKey]) -> bool:
        """Whether each key id in ``used`` still has the key of that fingerprint; the keys
        found go into ``keys``."""
        for kid, fingerprint in used.items():
            try:
                known = self._aead(kid) if kid.isascii() else None
            except ConfigurationError:
                return False
            if known is None or known.fingerprint != fingerprint:
                return False
            keys[kid] = known
        return True

    def _open_one(
        self, envelope: object, keys: dict[str, _SessionKey], *, keep: bool = True
    ) -> tuple[dict[str, Any], int, Facts | None]:
        """One envelope's item, the bytes it holds and the facts sealed with it (``keys``:
        the session keys this call resolved); ``keep=False`` when the caller keeps the
        item itself."""
        if type(envelope) is not dict or len(envelope) != len(_FIELDS):
            raise self._malformed(envelope)
        version, kid, text = envelope.get(MARKER), envelope.get("kid"), envelope.get("ct")
        if type(version) is not int or version not in FORMATS or type(kid) is not str:
            raise self._malformed(envelope)
        if type(text) is not str:
            raise self._malformed(envelope)
        known = keys.get(kid)
        if known is None:
            known = keys[kid] = self._known_key(kid)
        if not keep:  # the caller keeps the whole read: no entry of its own to look for
            item, chars, facts = self._unseal(known, version, kid, text)
            return item, cache.parsed_weight(chars), facts
        slot = _slot(known, version, kid, text)
        opened = cache.get(slot)
        if opened is cache.MISSING:
            item, chars, facts = self._unseal(known, version, kid, text)
            opened = (item, cache.parsed_weight(chars), facts)
            cache.put(slot, opened, weight=opened[1])
        return opened  # type: ignore[no-any-return]

    def _known_key(self, kid: str) -> _SessionKey:
        try:
            known = self._aead(kid) if kid.isascii() else None
        except ConfigurationError as exc:
            raise self.error(f"key {kid!r} from the key provider is unusable: {exc}", kid) from exc
        if known is None:
            raise self.error(
                f"item was encrypted under key id {kid!r}, which the key provider does not "
                "hold (missing or dropped key)",
                kid,
            )
        return known

    def _malformed(self, envelope: object) -> DecryptionError:
        if not isinstance(envelope, dict) or MARKER not in envelope:
            return self.error("not a memstack envelope")
        version, kid = envelope[MARKER], envelope.get("kid")
        if type(version) is not int or version not in FORMATS:
            return self.error(
                f"unknown envelope format version {version!r} (this memstack reads "
                f"{FORMAT} and {FACTS_FORMAT})",
                kid,
            )
        if envelope.keys() != _FIELDS or type(kid) is not str:
            return self.error(f"malformed envelope with fields {sorted(envelope)}", kid)
        return self.error(f"envelope under key id {kid!r} is not valid base64", kid)

    def _unseal(
        self, known: _SessionKey, version: int, kid: str, text: str
    ) -> tuple[dict[str, Any], int, Facts | None]:
        """The item sealed in ``text``, the length of its JSON text, and its facts."""
        try:
            sealed = _b64decode(text)
        except ValueError as exc:
            raise self.error(f"envelope under key id {kid!r} is not valid base64", kid) from exc
        if len(sealed) < _NONCE + _TAG + 1:
            raise self.error(f"envelope under key id {kid!r} is truncated", kid)
        try:
            plaintext = known.aead.decrypt(sealed[:_NONCE], sealed[_NONCE:], known.aad_for(version))
        except InvalidTag as exc:
            raise self.error(
                f"cannot authenticate item under key id {kid!r}: wrong key, or the envelope "
                "was altered or belongs to another session",
                kid,
            ) from exc
        return self._decode(plaintext, version, kid)

    def _decode(
        self, plaintext: bytes, version: int, kid: str
    ) -> tuple[dict[str, Any], int, Facts | None]:
        # Authenticated already: a failure here means a writer bug, not an attacker.
        facts = None
        try:
            flag, body = plaintext[0], plaintext[1:]
            if flag == _DEFLATED:
                unpacker = zlib.decompressobj(-15, zdict=ZDICT if version == FORMAT else ZDICT_2)
                body = unpacker.decompress(body) + unpacker.flush()
                if not unpacker.eof:
                    raise ValueError("deflate stream is incomplete")
            elif flag != _RAW:
                raise ValueError(f"unknown payload encoding {flag}")
            text = body.decode("utf-8")
            if version == FACTS_FORMAT:  # "[facts,item]", as ``encode`` writes it
                facts, end = scan(text, 1) if text[:2] == "[{" else (None, 0)
                item, stop = scan(text, end + 1) if text[end : end + 1] == "," else (None, 0)
                if type(facts) is not dict or text[stop:] != "]":
                    raise ValueError("a format-2 body is [facts, item]")
                chars = len(text) - end - 2  # the item's JSON: what a parsed copy weighs
            else:
                item, chars = loads(text), len(text)
            item = cache.compact(item)
        except (ValueError, zlib.error, binascii.Error) as exc:
            raise self.error(
                f"authenticated payload under key id {kid!r} is corrupt: {exc}", kid
            ) from exc
        if not isinstance(item, dict):
            raise self.error(f"authenticated payload under key id {kid!r} is not an item", kid)
        return item, chars, facts


def _slot(
    known: _SessionKey, version: int, kid: str, text: str
) -> tuple[str, bytes, int, str, str]:
    """Where an opened item is kept: its ciphertext under the fingerprint of its key (and
    its format, which says what the ciphertext was authenticated as)."""
    return ("envelopes", known.fingerprint, version, kid, text)


class _SessionKey:
    """One session's key under one master key: the cipher, its associated data, and a
    fingerprint that names it in cache keys (a digest of the key: it reveals nothing)."""

    __slots__ = ("aad", "aad_2", "aead", "fingerprint")

    def __init__(self, aead: AESGCM, aad: bytes, aad_2: bytes, fingerprint: bytes) -> None:
        self.aead, self.aad, self.aad_2, self.fingerprint = aead, aad, aad_2, fingerprint

    def aad_for(self, version: int) -> bytes:
        """The associated data of an envelope of this format (its label names it)."""
        return self.aad if version == FORMAT else self.aad_2

    @classmethod
    def derive(cls, master: bytes, session_id: str, kid: str) -> _SessionKey:
        key = _session_key(master, session_id)
        rest = b"\x00" + kid.encode("ascii") + b"\x00" + session_id.encode("utf-8")
        fingerprint = hashlib.blake2b(key, digest_size=16, person=b"memstack session").digest()
        return cls(AESGCM(key), _LABEL + rest, _LABEL_2 + rest, fingerprint)
