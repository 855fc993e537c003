"""An optional adapter for Microsoft Presidio's analyzer (``pip install memstack[presidio]``).

    from memstack.layers.redact import RedactSession
    session = RedactSession(store, presidio={"entities": ["PERSON", "LOCATION"]})

Presidio finds what regular expressions cannot (names, places) with NLP models; each
of its results becomes a finding named after the entity (``person``), of family
``pii``, so strategies apply to it as to the built-in detectors. Only the analyzer is
used: replacement, hashing and the vault stay memstack's (Presidio's reversible
anonymiser is unauthenticated AES-CBC).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from memstack.errors import ConfigurationError
from memstack.redaction.detectors import Finding

__all__ = ["PresidioDetector"]


class PresidioDetector:
    """Findings from a Presidio ``AnalyzerEngine`` (or any object with its ``analyze``)."""

    name = "presidio"
    kind = "pii"

    def __init__(
        self,
        *,
        entities: Sequence[str] | None = None,
        language: str = "en",
        score_threshold: float = 0.5,
        analyzer: Any = None,
    ) -> None:
        if analyzer is None:
            try:
                from presidio_analyzer import AnalyzerEngine  # type: ignore[import-not-found]
            except ImportError as exc:
                raise ConfigurationError(
                    "presidio needs the presidio extra: pip install memstack[presidio]"
                ) from exc
            analyzer = AnalyzerEngine()
        self.analyzer = analyzer
        self.entities = list(entities) if entities is not None else None
        self.language = language
        self.score_threshold = score_threshold

    def find(self, text: str) -> Iterable[Finding]:
        results = self.analyzer.analyze(
            text=text,
            entities=self.entities,
            language=self.language,
            score_threshold=self.score_threshold,
        )
        for result in results:
            if 0 <= result.start < result.end <= len(text):
                name = str(result.entity_type).lower()
                yield Finding(name, result.start, result.end, text[result.start : result.end])
