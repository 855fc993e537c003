"""Redaction before storage: detectors, strategies, the policy, and the vault.

    >>> from memstack.redaction import RedactionPolicy
    >>> RedactionPolicy.build().apply([{"role": "user", "content": "key sk-" + "a" * 24}]).items
    [{'role': 'user', 'content': 'key [OPENAI_KEY]'}]

Pure modules under one thin layer (``memstack.layers.redact.RedactSession``):
``detectors`` (what is sensitive), ``strategies`` (what replaces it), ``rewrite`` (where
in an item to look), ``policy`` (which strategy for which detector), ``vault`` (sealed
originals and ``reveal``), ``presidio`` (an optional heavier analyzer).
"""

from memstack.redaction.detectors import DETECTORS, Detector, Finding, find_all, regex_detector
from memstack.redaction.policy import Hit, Redaction, RedactionPolicy
from memstack.redaction.vault import reveal

__all__ = [
    "DETECTORS",
    "Detector",
    "Finding",
    "Hit",
    "Redaction",
    "RedactionPolicy",
    "find_all",
    "regex_detector",
    "reveal",
]
