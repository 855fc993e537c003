"""The policy and the item rewrite: what changes, what never does, and valid JSON."""

from __future__ import annotations

import json

import pytest

from memstack import ConfigurationError
from memstack.redaction import RedactionPolicy
from memstack.redaction.detectors import Finding
from memstack.redaction.strategies import Hash, Mask

KEY = b"k" * 32


def test_protected_fields_are_never_touched() -> None:
    item = {
        "type": "function_call",
        "id": "fc_a@b.io",
        "call_id": "call_4111111111111111",
        "name": "mail_a@b.io",
        "status": "completed",
        "arguments": '{"to": "a@b.io"}',
    }
    done = RedactionPolicy.build().apply([item]).items[0]
    assert {k: v for k, v in done.items() if k != "arguments"} == {
        k: v for k, v in item.items() if k != "arguments"
    }
    assert json.loads(done["arguments"]) == {"to": "[EMAIL]"}


def test_json_arguments_stay_valid_and_escaped_secrets_are_seen() -> None:
    pem = "-----BEGIN PRIVATE KEY-----\nabc\ndef\n-----END PRIVATE KEY-----"
    arguments = json.dumps({"key": pem, "card": 4111111111111111, "ok": [1, True, None]})
    assert "\\n" in arguments  # the raw text holds escapes, not newlines
    done = RedactionPolicy.build().apply(
        [{"type": "function_call", "call_id": "c", "name": "f", "arguments": arguments}]
    )
    assert json.loads(done.items[0]["arguments"]) == {
        "key": "[PRIVATE_KEY]",
        "card": "[CARD]",  # a number that held a card becomes a string
        "ok": [1, True, None],
    }
    assert done.counts == {"private_key": 1, "card": 1}


def test_untouched_json_keeps_its_spelling_and_broken_json_is_text() -> None:
    policy = RedactionPolicy.build()
    spaced = '{ "a" : 1 }'
    assert (
        policy.apply([{"type": "function_call_output", "call_id": "c", "output": spaced}]).items[0][
            "output"
        ]
        == spaced
    )
    broken = '{"to": "a@b.io"'
    assert (
        policy.apply([{"type": "function_call_output", "call_id": "c", "output": broken}]).items[0][
            "output"
        ]
        == '{"to": "[EMAIL]"'
    )


def test_content_parts_and_reasoning_summaries() -> None:
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "a@b.io"}]},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "user a@b.io"}],
            "encrypted_content": "gAAAA a@b.io",
        },
    ]
    done = RedactionPolicy.build().apply(items).items
    assert done[0]["content"][0]["text"] == "[EMAIL]"
    assert done[1]["summary"][0]["text"] == "user [EMAIL]"
    assert done[1]["encrypted_content"] == "gAAAA a@b.io"  # opaque to us: never rewritten


def test_most_specific_strategy_wins() -> None:
    policy = RedactionPolicy.build(
        strategies={"default": "mask", "secrets": "block", "aws_key": "redact"}, hash_key=KEY
    )
    done = policy.apply(
        [{"role": "user", "content": "a@b.io AKIAIOSFODNN7EXAMPLE ghp_" + "x" * 36}]
    )
    assert [(hit.detector, hit.strategy) for hit in done.hits] == [
        ("email", "mask"),
        ("aws_key", "redact"),
        ("github_token", "block"),
    ]
    assert [hit.detector for hit in done.blocked] == ["github_token"]


def test_strategies() -> None:
    card = Finding("card", 0, 19, "4111 1111 1111 1111")
    assert Mask(keep_last=0).replace(card) == "**** **** **** ****"
    token = Hash(KEY).replace(card)
    assert token.startswith("[CARD:") and len(token) == len("[CARD:]") + 16
    assert Hash(KEY).replace(card) == token != Hash(b"j" * 32).replace(card)
    with pytest.raises(ConfigurationError):
        Hash(b"short")
    with pytest.raises(ConfigurationError):
        Mask(keep_last=-1)


class _Result:
    def __init__(self, entity_type: str, start: int, end: int) -> None:
        self.entity_type, self.start, self.end = entity_type, start, end


class _Analyzer:
    """Presidio's AnalyzerEngine shape: analyze(text=, entities=, language=, score_threshold=)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, object]] = []

    def analyze(self, **kwargs: object) -> list[_Result]:
        self.calls.append(kwargs)
        text = str(kwargs["text"])
        start = text.find("Ann Lee")
        return [_Result("PERSON", start, start + 7)] if start >= 0 else []


def test_presidio_adapter_findings_take_strategies_by_entity_name() -> None:
    from memstack.redaction.presidio import PresidioDetector

    analyzer = _Analyzer()
    detector = PresidioDetector(entities=["PERSON"], analyzer=analyzer)
    policy = RedactionPolicy.build(strategies={"person": "mask"}, analyzers=[detector])
    done = policy.apply([{"role": "user", "content": "Ann Lee, ann@example.com"}])
    assert done.items[0]["content"] == "*** **e, [EMAIL]"
    assert done.counts == {"person": 1, "email": 1}
    assert analyzer.calls[0]["entities"] == ["PERSON"] and analyzer.calls[0]["language"] == "en"
