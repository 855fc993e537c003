"""What counts as a secret or personal data: one ``Detector`` per kind, checked, not guessed.

    >>> from memstack.redaction.detectors import DETECTORS, find_all
    >>> [(f.detector, f.value) for f in find_all("card 4111 1111 1111 1111, mail a@b.io")]
    [('card', '4111 1111 1111 1111'), ('email', 'a@b.io')]
    >>> find_all("order 4111 1111 1111 1112")  # fails the Luhn check: not a card
    []

A detector is a regular expression plus an optional check of what it matched (issuer
digit and Luhn for cards, ISO 7064 mod 97 for IBANs, ``ipaddress`` for IPs), so numbers
that merely look like a card are left alone. Overlapping matches resolve to the earliest,
then longest.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from memstack.errors import ConfigurationError

__all__ = [
    "DETECTORS",
    "Detector",
    "Finding",
    "TextDetector",
    "card_ok",
    "find_all",
    "iban_ok",
    "luhn_ok",
    "regex_detector",
]

Kind = Literal["pii", "secrets"]


@dataclass(frozen=True)
class Finding:
    """One match: which detector, where, and the text it covers."""

    detector: str
    start: int
    end: int
    value: str
    kind: str = "pii"


class TextDetector(Protocol):
    """Anything that finds sensitive spans: a ``Detector`` or an analyzer adapter."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    def find(self, text: str) -> Iterable[Finding]: ...


@dataclass(frozen=True)
class Detector:
    """A named pattern; ``check`` confirms a candidate; a ``secret`` group narrows the match."""

    name: str
    pattern: re.Pattern[str]
    kind: Kind = "pii"
    check: Callable[[str], bool] | None = None

    @property
    def label(self) -> str:
        return self.name.upper()

    def find(self, text: str) -> Iterable[Finding]:
        for match in self.pattern.finditer(text):
            group = "secret" if "secret" in self.pattern.groupindex else 0
            start, end = match.span(group)
            value = match.group(group)
            if start < end and (self.check is None or self.check(value)):
                yield Finding(self.name, start, end, value, self.kind)


@dataclass(frozen=True)
class GroupedNumberDetector(Detector):
    """A number written in groups whose valid part may sit inside a longer run of groups.

    "4111 1111 1111 1111 10/27" (a card, then its expiry) is one run of 18 digits, which
    fails the check; the card is the run's first four groups. When a whole run fails, its
    spans of whole groups (``min_digits`` to ``max_digits`` digits, groups of at least
    ``min_group``) are tried, longest first.
    """

    min_digits: int = 13
    max_digits: int = 19
    min_group: int = 3

    def find(self, text: str) -> Iterable[Finding]:
        for match in self.pattern.finditer(text):
            start, end = match.span()
            if self.check is None or self.check(match.group()):
                yield Finding(self.name, start, end, match.group(), self.kind)
                continue
            yield from self._inner(text, start, end)

    def _inner(self, text: str, start: int, end: int) -> Iterator[Finding]:
        run = text[start:end]
        groups = [g.span() for g in re.finditer(r"\d+", run)]
        spans = []
        for first in range(len(groups)):
            digits = 0
            for last in range(first, len(groups)):
                low, high = groups[last]
                if high - low < self.min_group:  # "1 2 3 4 …" is no card number
                    break
                digits += high - low
                if digits > self.max_digits:
                    break
                whole = first == 0 and last == len(groups) - 1
                if digits >= self.min_digits and not whole:
                    spans.append((groups[first][0], high))
        spans.sort(key=lambda span: (span[0] - span[1], span[0]))  # longest, then earliest
        taken = 0
        for a, b in spans:
            if a >= taken and self.check is not None and self.check(run[a:b]):
                yield Finding(self.name, start + a, start + b, run[a:b], self.kind)
                taken = b


def luhn_ok(text: str) -> bool:
    """True when the digits of ``text`` (13-19 of them) pass the Luhn checksum."""
    digits = [int(c) for c in text if c.isdigit()]
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for position, digit in enumerate(reversed(digits)):
        if position % 2:
            digit *= 2
            digit -= 9 if digit > 9 else 0
        total += digit
    return total % 10 == 0


def card_ok(text: str) -> bool:
    """A payment card number: an issuer's first digit (2-6) and a valid Luhn checksum.

    The first digit keeps out the ids and timestamps of code that pass Luhn by chance
    (one number in ten does).
    """
    digits = [c for c in text if c.isdigit()]
    return bool(digits) and digits[0] in "23456" and luhn_ok(text)


def iban_ok(text: str) -> bool:
    """True for an IBAN (spaces allowed) whose ISO 7064 mod-97 check digits are right."""
    compact = text.replace(" ", "").upper()
    if not 15 <= len(compact) <= 34:
        return False
    rotated = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rotated)) % 97 == 1


def _digit_count(low: int, high: int) -> Callable[[str], bool]:
    return lambda text: low <= sum(c.isdigit() for c in text) <= high


def _ip_ok(text: str) -> bool:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    if address.version == 6:
        # "std::vector" holds "d::", a valid address; real ones have several groups.
        groups = [group for group in text.split(":") if group]
        return len(groups) >= 3 and any(c.isdigit() for c in text)
    return True


def regex_detector(name: str, pattern: str, *, kind: Kind = "pii") -> Detector:
    """A custom detector; a named group ``secret`` limits what is replaced."""
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", name):
        raise ConfigurationError(
            f"detector name {name!r} must be 1-32 of a-z, 0-9 and _, starting with a letter"
        )
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ConfigurationError(f"detector {name!r}: not a valid regex: {exc}") from exc
    if compiled.search(""):
        raise ConfigurationError(f"detector {name!r}: the pattern matches the empty string")
    return Detector(name, compiled, kind)


def _secret(name: str, pattern: str, flags: int = 0) -> Detector:
    return Detector(name, re.compile(pattern, flags), "secrets")


# Secrets first: on equal spans the earlier detector wins.
DETECTORS: tuple[Detector, ...] = (
    _secret(
        "private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
        r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|.*\Z)",
        re.DOTALL,
    ),
    _secret("jwt", r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),
    _secret("openai_key", r"\bsk-(?:proj-|svcacct-|admin-|ant-)?[A-Za-z0-9_-]{20,}"),
    _secret("aws_key", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
    _secret(
        "aws_secret",
        r"(?i:aws_?secret_?(?:access_?)?key)[\"']?\s*[:=]\s*[\"']?(?P<secret>[A-Za-z0-9/+=]{40})",
    ),
    _secret("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})"),
    _secret(
        "slack_token",
        r"\bxox[abposr]-[A-Za-z0-9-]{10,}"
        r"|https://hooks\.slack\.com/services/[A-Za-z0-9]+/[A-Za-z0-9]+/[A-Za-z0-9]+",
    ),
    _secret("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}"),
    Detector(
        "email",
        re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"),
    ),
    GroupedNumberDetector(
        "card", re.compile(r"(?<![\d-])(?:\d[ -]?){12,}\d(?![\d-])"), check=card_ok
    ),
    Detector(
        "iban",
        re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b"),
        check=iban_ok,
    ),
    Detector(
        "phone",
        re.compile(
            r"(?<![\w+])\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{2,4}){1,4}(?!\w)"
            r"|(?<![\w(])\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}(?!\w)"
        ),
        check=_digit_count(7, 15),
    ),
    Detector(
        "ip",
        re.compile(
            r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?!\.?\d)(?!\w)"
            r"|(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])"
        ),
        check=_ip_ok,
    ),
)


def find_all(text: str, detectors: Sequence[TextDetector] = DETECTORS) -> list[Finding]:
    """Non-overlapping findings in ``text``, in order; earliest start, then longest, wins."""
    candidates = [
        (finding.start, -(finding.end - finding.start), rank, finding)
        for rank, detector in enumerate(detectors)
        for finding in detector.find(text)
    ]
    chosen: list[Finding] = []
    end = 0
    for _, _, _, finding in sorted(candidates, key=lambda c: c[:3]):
        if finding.start >= end:
            chosen.append(finding)
            end = finding.end
    return chosen
