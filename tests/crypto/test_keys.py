"""Master keys: what is accepted, what is refused, key ids, keyrings, the password helper."""

from __future__ import annotations

import base64
import os

import pytest
from cryptography.fernet import Fernet

from memstack import ConfigurationError
from memstack.crypto import Keyring, generate_key, key_from_password, key_id, parse_key

RAW = os.urandom(32)


@pytest.mark.parametrize(
    "spelling",
    [
        RAW,
        base64.urlsafe_b64encode(RAW).decode(),
        base64.urlsafe_b64encode(RAW).decode().rstrip("="),
        base64.b64encode(RAW).decode(),
        base64.urlsafe_b64encode(RAW),  # Fernet-style bytes
        "  " + base64.urlsafe_b64encode(RAW).decode() + "\n",  # as read from a file
    ],
    ids=["raw", "urlsafe", "urlsafe-unpadded", "standard", "b64-bytes", "whitespace"],
)
def test_every_spelling_of_a_key_gives_the_same_bytes(spelling: bytes | str) -> None:
    assert parse_key(spelling) == RAW


def test_generated_and_fernet_keys_are_accepted() -> None:
    assert len(parse_key(generate_key())) == 32
    assert len(parse_key(Fernet.generate_key())) == 32
    assert generate_key() != generate_key()


@pytest.mark.parametrize(
    "weak",
    [
        "hunter2",
        "correct horse battery staple",
        "a" * 43,  # valid base64 of 32 bytes, but typed by hand
        "passwordpasswordpasswordpasswordpasswordpas",
        b"0123456789abcdef0123456789abcdef",  # 32 printable bytes: a password
        bytes(32),  # all zero
        bytes(range(8)) * 4,  # too few distinct bytes
        base64.urlsafe_b64encode(bytes(32)).decode(),
        "",
        b"",
        # Random values under fixed ids: pytest-xdist's workers must collect the same names.
        pytest.param(os.urandom(31), id="random-31-bytes"),
        pytest.param(base64.urlsafe_b64encode(os.urandom(24)).decode(), id="random-24-bytes-b64"),
    ],
)
def test_low_entropy_or_wrong_length_keys_are_refused(weak: bytes | str) -> None:
    with pytest.raises(ConfigurationError, match="key_from_password") as caught:
        parse_key(weak, field="key")
    assert "key must be 32 random bytes" in str(caught.value)


def test_wrong_type_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigurationError, match="secret must be bytes or str, not int"):
        parse_key(123, field="secret")  # type: ignore[arg-type]


def test_key_id_is_a_stable_fingerprint_that_reveals_nothing_of_the_key() -> None:
    kid = key_id(RAW)
    assert kid == key_id(base64.urlsafe_b64encode(RAW).decode())
    assert len(kid) == 8 and int(kid, 16) >= 0
    assert kid not in base64.urlsafe_b64encode(RAW).decode() and kid != key_id(os.urandom(32))


def test_keyring_of_makes_the_first_key_active() -> None:
    new, old = generate_key(), generate_key()
    ring = Keyring.of(new, old)
    assert ring.active_kid == key_id(new)
    assert ring.kids == (key_id(new), key_id(old))
    assert ring.key(key_id(old)) == parse_key(old)
    assert ring.key("nope") is None
    assert new not in repr(ring) and old not in repr(ring)
    assert repr(ring) == f"Keyring(active={key_id(new)!r}, kids={list(ring.kids)!r})"


def test_keyring_validates_ids_keys_and_active() -> None:
    key = generate_key()
    with pytest.raises(ConfigurationError, match="at least one key"):
        Keyring({}, active="a")
    with pytest.raises(ConfigurationError, match="active must be one of"):
        Keyring({"a": key}, active="b")
    with pytest.raises(ConfigurationError, match="key id must be 1-64 characters"):
        Keyring({"bad id\x00": key}, active="bad id\x00")
    with pytest.raises(ConfigurationError, match=r"keyring\['a'\] must be 32 random bytes"):
        Keyring({"a": "hunter2"}, active="a")
    with pytest.raises(ConfigurationError, match="given twice"):
        Keyring.of(key, key)


def test_key_from_password_is_deterministic_per_salt_and_passes_the_key_check() -> None:
    salt = b"s" * 8 + os.urandom(8)
    first = key_from_password("tr0ub4dor", salt=salt, n=2**14)
    assert first == key_from_password("tr0ub4dor", salt=salt, n=2**14)
    assert first != key_from_password("tr0ub4dor", salt=os.urandom(16), n=2**14)
    assert first != key_from_password("tr0ub4dor!", salt=salt, n=2**14)
    assert parse_key(first) == first


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"password": "", "salt": os.urandom(16)}, "password must be a non-empty string"),
        ({"password": "pw", "salt": b"short"}, "salt must be at least 16 random bytes"),
        ({"password": "pw", "salt": os.urandom(16), "n": 2**10}, "n must be a power of two"),
        ({"password": "pw", "salt": os.urandom(16), "n": 3 * 2**14}, "n must be a power of two"),
        ({"password": "pw", "salt": os.urandom(16), "r": 0}, "r and p must be >= 1"),
    ],
)
def test_key_from_password_validates(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        key_from_password(**kwargs)  # type: ignore[arg-type]
