"""memstack's encrypted envelope, format 1: one item in, one small JSON dict out.

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

Size: 28 bytes of nonce and tag per item, base64's 4/3, and about 30 bytes of JSON.
Compression (items of ``compress_min_bytes`` or more; kept only when it saves) more than
pays for that on real histories. It also makes the ciphertext length depend on how
repetitive the item is, not only on its size; switch it off where an attacker can both
inject text into a history and watch stored sizes.
"""

from __future__ import annotations

import binascii
import json
import marshal
import os
import zlib
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, cast

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from memstack.backends.reuse import Identity
from memstack.content_keys import note_key, packed_key
from memstack.crypto.keys import KeyProvider, check_kid, parse_key
from memstack.errors import ConfigurationError, DecryptionError, ItemValidationError

__all__ = ["FORMAT", "MARKER", "ZDICT", "SessionCipher", "is_envelope"]

FORMAT = 1
MARKER = "menc"
_FIELDS = frozenset({MARKER, "kid", "ct"})
_LABEL = b"memstack/encrypted/1"
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
_PADDING = (b"", b"===", b"==", b"=")
_UNUSED_BITS = (0, 0, 0x0F, 0x03)
_VALUE = bytes(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".find(chr(c)) & 0xFF
    for c in range(256)
)


def _b64decode(text: str) -> bytes:
    """Decode canonical unpadded base64; any other spelling raises ValueError."""
    raw = text.encode("ascii")
    rest = len(raw) % 4
    if raw.endswith(b"="):
        raise ValueError("non-canonical base64: padding")
    data = binascii.a2b_base64(raw + _PADDING[rest], strict_mode=True)
    if rest and _VALUE[raw[-1]] & _UNUSED_BITS[rest]:
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
        self.layer = layer
        self._session = session_id.encode("utf-8")
        self._aeads: dict[str, tuple[AESGCM, bytes]] = {}
        self._opened = OpenedCache()
        # Shared envelopes, by identity: the item's marshal bytes and their content key.
        self._seen: Identity[tuple[bytes, bytes]] = Identity()

    # -- keys ------------------------------------------------------------------------------
    @property
    def active_kid(self) -> str:
        return check_kid(self.keys.active_kid, field="active key id")

    def _aead(self, kid: str) -> tuple[AESGCM, bytes] | None:
        """The cipher and associated data for ``kid``, derived once; None for unknown ids."""
        known = self._aeads.get(kid)
        if known is None:
            master = self.keys.key(kid)
            if master is None:
                return None
            key = _session_key(parse_key(master, field=f"key {kid!r}"), self.session_id)
            aad = _LABEL + b"\x00" + kid.encode("ascii") + b"\x00" + self._session
            known = self._aeads[kid] = (AESGCM(key), aad)
        return known

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
        """The plaintext of an envelope: flag byte and (maybe compressed) JSON."""
        raw = _JSON.encode(item).encode("ascii")
        if self.compress and len(raw) >= self.compress_min_bytes:
            packer = zlib.compressobj(6, zlib.DEFLATED, -15, zdict=ZDICT)
            packed = packer.compress(raw) + packer.flush()
            if len(packed) < len(raw):
                return bytes((_DEFLATED,)) + packed
        return bytes((_RAW,)) + raw

    def seal(self, item: object, *, index: int = 0) -> dict[str, Any]:
        """Encrypt one item under the active key."""
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
        kid = self.active_kid
        known = self._aead(kid)
        if known is None:
            raise ConfigurationError(
                f"the key provider has no key for its own active key id {kid!r}",
                layer=self.layer,
            )
        aead, aad = known
        nonce = os.urandom(_NONCE)
        sealed = nonce + aead.encrypt(nonce, plaintext, aad)
        return {MARKER: FORMAT, "kid": kid, "ct": _b64encode(sealed)}

    # -- opening ---------------------------------------------------------------------------
    def is_current(self, envelope: object) -> bool:
        """True when ``envelope`` is in this format under the active key (rotation skips it)."""
        return (
            isinstance(envelope, dict)
            and envelope.keys() == _FIELDS
            and envelope[MARKER] == FORMAT
            and type(envelope[MARKER]) is int
            and envelope["kid"] == self.active_kid
        )

    def reopen(self, envelope: object) -> dict[str, Any] | None:
        """The item of a shared envelope this cipher opened before, as a fresh object.

        Recognised by identity alone: a shared value is read-only, so it still is what
        was authenticated. None when it was not seen (use ``open``).
        """
        seen = self._seen.get(envelope)
        if seen is None:
            return None
        item = marshal.loads(seen[0])
        note_key(item, seen[1])  # its content key is known: the window counts it without hashing
        return cast("dict[str, Any]", item)

    def open(self, envelope: object, *, shared: bool = False) -> dict[str, Any]:
        """The item inside ``envelope``, a fresh object; ``DecryptionError`` otherwise.

        ``shared`` says ``envelope`` is a read-only object a store hands back while its row
        is unchanged (``memstack.backends.reuse``): it is remembered, so that ``reopen``
        recognises it by identity next time (callers try ``reopen`` first).
        """
        if type(envelope) is dict and len(envelope) == len(_FIELDS):
            version, kid, text = envelope.get(MARKER), envelope.get("kid"), envelope.get("ct")
            if type(version) is int and version == FORMAT and type(kid) is str:
                known = self._aeads.get(kid) or self._known_key(kid)
                if type(text) is str:
                    packed = self._opened.get(kid, text) or self._unseal(known, kid, text)
                    item = marshal.loads(packed)
                    if shared:  # too large to keep: put() leaves it out, found by ciphertext
                        key = packed_key(packed)
                        self._seen.put(envelope, (packed, key), len(text) + len(packed))
                        note_key(item, key)
                    return cast("dict[str, Any]", item)
        raise self._malformed(envelope)

    def _known_key(self, kid: str) -> tuple[AESGCM, bytes]:
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
        if type(version) is not int or version != FORMAT:
            return self.error(
                f"unknown envelope format version {version!r} (this memstack reads {FORMAT})",
                kid,
            )
        if envelope.keys() != _FIELDS or type(kid) is not str:
            return self.error(f"malformed envelope with fields {sorted(envelope)}", kid)
        return self.error(f"envelope under key id {kid!r} is not valid base64", kid)

    def _unseal(self, known: tuple[AESGCM, bytes], kid: str, text: str) -> bytes:
        try:
            sealed = _b64decode(text)
        except ValueError as exc:
            raise self.error(f"envelope under key id {kid!r} is not valid base64", kid) from exc
        if len(sealed) < _NONCE + _TAG + 1:
            raise self.error(f"envelope under key id {kid!r} is truncated", kid)
        aead, aad = known
        try:
            plaintext = aead.decrypt(sealed[:_NONCE], sealed[_NONCE:], aad)
        except InvalidTag as exc:
            raise self.error(
                f"cannot authenticate item under key id {kid!r}: wrong key, or the envelope "
                "was altered or belongs to another session",
                kid,
            ) from exc
        return self._decode(plaintext, kid, text)

    def _decode(self, plaintext: bytes, kid: str, text: str) -> bytes:
        # Authenticated already: a failure here means a writer bug, not an attacker.
        try:
            flag, body = plaintext[0], plaintext[1:]
            if flag == _DEFLATED:
                unpacker = zlib.decompressobj(-15, zdict=ZDICT)
                body = unpacker.decompress(body) + unpacker.flush()
                if not unpacker.eof:
                    raise ValueError("deflate stream is incomplete")
            elif flag != _RAW:
                raise ValueError(f"unknown payload encoding {flag}")
            json_text = body.decode("utf-8")
            item = json.loads(json_text)
        except (ValueError, zlib.error, binascii.Error) as exc:
            raise self.error(
                f"authenticated payload under key id {kid!r} is corrupt: {exc}", kid
            ) from exc
        if not isinstance(item, dict):
            raise self.error(f"authenticated payload under key id {kid!r} is not an item", kid)
        packed = marshal.dumps(item, 2)  # format 2: what content keys hash (content_keys)
        self._opened.put(kid, text, packed)
        return packed


class OpenedCache:
    """Authenticated envelopes' items, by key id and ciphertext, least recently used first.

    Bounded by the bytes it holds (``max_chars``, 16 Mi by default): a long-running server
    re-reading one session's tail pays AES-GCM and inflate once per envelope. The key is
    the ciphertext itself, so another process's writes, rotation and new nonces only miss;
    a relabelled envelope (another key id) never hits an entry. Items are kept as
    ``marshal`` bytes of what was parsed (built here, never read from storage): every hit
    returns fresh dicts, twice as fast as parsing the JSON again.
    """

    def __init__(self, max_chars: int = 16 << 20) -> None:
        self.max_chars = max_chars
        self._entries: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._chars = 0

    def get(self, kid: str, ciphertext: str) -> bytes | None:
        key = (kid, ciphertext)
        found = self._entries.get(key)
        if found is not None:
            try:  # noqa: SIM105 (runs once per item read: suppress() costs a third of it)
                self._entries.move_to_end(key)
            except KeyError:  # evicted meanwhile by another thread
                pass
        return found

    def put(self, kid: str, ciphertext: str, packed: bytes) -> None:
        key = (kid, ciphertext)
        if len(packed) > self.max_chars // 8 or key in self._entries:
            return  # one huge tool output must not evict a whole tail
        self._entries[key] = packed
        self._chars += len(packed)
        while self._chars > self.max_chars and self._entries:
            try:
                _, dropped = self._entries.popitem(last=False)
            except KeyError:  # emptied meanwhile by another thread
                break
            self._chars -= len(dropped)
