"""Detectors: every built-in finds its kind, checksums keep look-alikes out."""

from __future__ import annotations

import pytest

from memstack import ConfigurationError
from memstack.redaction.detectors import find_all, iban_ok, luhn_ok, regex_detector

from .planted import planted_values


@pytest.mark.parametrize("i", range(12))
def test_every_planted_value_is_found_whole(i: int) -> None:
    for name, value in planted_values(i).items():
        found = find_all(f"before {value}, after")
        assert [(f.detector, f.value) for f in found] == [(name, value)]


@pytest.mark.parametrize(
    "text",
    [
        "order 4111 1111 1111 1112",  # fails Luhn
        "id 126520626465856",  # passes Luhn, but no card starts with 1
        "GB00 WEST 1234 5698 7654 32",  # wrong IBAN check digits
        "std::vector<int> and a::b",  # C++, not IPv6
        "at 12:30:45 on 2024-01-15",  # times and dates
        "version 1.2.3 and 999.1.1.1",  # not an IPv4 address
        "tracking 12345678, 5551234",  # bare numbers are not phones
        "sk-short and AKIA123",  # too short to be keys
        "user@localhost",  # no domain
        "1 2 3 4 5 6 7 8 9 " * 5,  # single digits in a row hold no card
        "123 456 789 012 345 678 901 234",  # no span of whole groups passes Luhn with 2-6
    ],
)
def test_look_alikes_are_left_alone(text: str) -> None:
    assert find_all(text) == []


@pytest.mark.parametrize(
    ("text", "card"),
    [
        ("4111 1111 1111 1111 10/27", "4111 1111 1111 1111"),  # the card, then its expiry
        ("4111111111111111 12", "4111111111111111"),
        ("ref 12 4111 1111 1111 1111", "4111 1111 1111 1111"),  # a number before it
        ("3782 822463 10005 1226", "3782 822463 10005"),  # an Amex and its expiry
    ],
)
def test_a_card_inside_a_longer_run_of_digit_groups_is_found(text: str, card: str) -> None:
    assert [(f.detector, f.value) for f in find_all(text)] == [("card", card)]


def test_checksums() -> None:
    assert luhn_ok("4111-1111-1111-1111") and not luhn_ok("4111-1111-1111-1112")
    assert not luhn_ok("0000 0000 0")  # too short
    assert iban_ok("DE89 3704 0044 0532 0130 00") and not iban_ok("DE88370400440532013000")


def test_overlaps_resolve_to_the_earliest_then_longest() -> None:
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdef"
    found = find_all(f"token {jwt} for a@b.io")
    assert [(f.detector, f.value) for f in found] == [("jwt", jwt), ("email", "a@b.io")]
    pem = "-----BEGIN PRIVATE KEY-----\nMIIE sk-" + "a" * 30 + "\n"  # cut off: no END line
    assert [f.detector for f in find_all(pem)] == ["private_key"]


def test_aws_secret_replaces_only_the_value() -> None:
    text = 'aws_secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"'
    [found] = find_all(text)
    assert found.value == "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def test_custom_detectors_are_checked() -> None:
    detector = regex_detector("ticket", r"T-\d+")
    assert [f.value for f in find_all("see T-12", [detector])] == ["T-12"]
    for name, pattern, message in (
        ("Bad Name", "x", "must be 1-32"),
        ("empty", "a*", "matches the empty string"),
        ("broken", "(", "not a valid regex"),
    ):
        with pytest.raises(ConfigurationError, match=message):
            regex_detector(name, pattern)
