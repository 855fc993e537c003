"""Planted secrets and personal data, unique per message, valid for their checks."""

from __future__ import annotations

import base64
import json
import random
import string
from typing import Any


def luhn_card(rng: random.Random) -> str:
    digits = [4] + [rng.randrange(10) for _ in range(14)]
    total = 0
    for position, digit in enumerate(reversed(digits)):
        doubled = digit * 2 if position % 2 == 0 else digit
        total += doubled - 9 if doubled > 9 else doubled
    number = "".join(map(str, digits)) + str((10 - total % 10) % 10)
    return " ".join(number[i : i + 4] for i in range(0, 16, 4))


def iban(rng: random.Random) -> str:
    bban = "WEST" + "".join(str(rng.randrange(10)) for _ in range(14))
    numeric = int("".join(str(int(c, 36)) for c in bban + "GB00"))
    return f"GB{98 - numeric % 97:02d}{bban}"


def _chars(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def planted_values(i: int) -> dict[str, str]:
    """One value of every built-in detector, distinct for each ``i``."""
    rng = random.Random(i)
    alnum = string.ascii_letters + string.digits
    upper = string.ascii_uppercase + string.digits
    b64 = base64.urlsafe_b64encode(json.dumps({"sub": f"user-{i}"}).encode()).rstrip(b"=")
    return {
        "email": f"planted.user{i}@example.com",
        "card": luhn_card(rng),
        "phone": f"+44 20 7946 {i:04d}",
        "iban": iban(rng),
        "ip": f"10.{i % 250}.{rng.randrange(256)}.{rng.randrange(1, 255)}",
        "openai_key": "sk-proj-" + _chars(rng, alnum, 40),
        "aws_key": "AKIA" + _chars(rng, upper, 16),
        "github_token": "ghp_" + _chars(rng, alnum, 36),
        "slack_token": "xoxb-" + _chars(rng, string.digits, 12) + "-" + _chars(rng, alnum, 24),
        "google_api_key": "AIza" + _chars(rng, alnum, 35),
        "jwt": f"eyJhbGciOiJIUzI1NiJ9.{b64.decode()}.{_chars(rng, alnum, 43)}",
        "private_key": "-----BEGIN RSA PRIVATE KEY-----\n"
        + "\n".join(_chars(rng, alnum, 64) for _ in range(3))
        + "\n-----END RSA PRIVATE KEY-----",
    }


def planted_conversation(n: int) -> tuple[list[dict[str, Any]], list[str]]:
    """``n`` items cycling user / call / output / assistant, each with planted values."""
    items: list[dict[str, Any]] = []
    planted: list[str] = []
    for i in range(n):
        values = planted_values(i)
        names = list(values)
        chosen = [values[names[(i + k) % len(names)]] for k in range(3)]
        planted += chosen
        a, b, c = chosen
        kind = i % 4
        if kind == 0:
            items.append({"role": "user", "content": f"Hi, it's me: {a}. Also {b} and {c}."})
        elif kind == 1:
            arguments = {"contact": a, "details": {"notes": [b, f"see {c}"]}, "n": i}
            items.append(
                {
                    "type": "function_call",
                    "id": f"fc_{i}",
                    "call_id": f"call_{i}",
                    "name": "lookup",
                    "arguments": json.dumps(arguments),
                }
            )
        elif kind == 2:
            output = json.dumps({"found": a, "history": [b, c]}) if i % 8 == 2 else f"{a} {b} {c}"
            items.append(
                {"type": "function_call_output", "call_id": f"call_{i - 1}", "output": output}
            )
        else:
            items.append(
                {
                    "type": "message",
                    "id": f"msg_{i}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": f"Noted {a}; {b}, {c}", "annotations": []}
                    ],
                }
            )
    return items, planted


def spellings(value: str) -> list[bytes]:
    """How a value could appear in a file: as is, JSON-escaped, digits only."""
    forms = {value, json.dumps(value)[1:-1]}
    compact = value.replace(" ", "")
    if compact != value:
        forms.add(compact)
    for line in value.splitlines():  # each line of a PEM key on its own
        if len(line) >= 20:
            forms.add(line)
    return [form.encode("utf-8") for form in forms]
