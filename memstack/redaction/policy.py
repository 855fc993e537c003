"""A redaction policy: which detectors run, and which strategy each one's findings get.

    >>> from memstack.redaction.policy import RedactionPolicy
    >>> policy = RedactionPolicy.build(strategies={"email": "mask", "secrets": "block"})
    >>> done = policy.apply([{"role": "user", "content": "I am ann@example.com"}])
    >>> done.items, done.counts
    ([{'role': 'user', 'content': 'I am ***@*******.com'}], {'email': 1})

Pure: ``apply`` returns the rewritten items and what it found, and stores nothing. The
layer decides what to do with blocked findings (refuse the batch) and vaulted ones (seal
the originals in the side table before the items go down). Strategy keys name a detector
(``"email"``), a family (``"pii"``, ``"secrets"``) or ``"default"``; the most specific wins.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memstack.errors import ConfigurationError
from memstack.redaction.detectors import (
    DETECTORS,
    Finding,
    TextDetector,
    find_all,
    regex_detector,
)
from memstack.redaction.rewrite import rewrite_item
from memstack.redaction.strategies import (
    STRATEGY_NAMES,
    Block,
    Hash,
    Mask,
    Redact,
    Strategy,
    Vault,
)

__all__ = ["Hit", "Redaction", "RedactionPolicy"]


@dataclass(frozen=True)
class Hit:
    """One replaced value; held in memory only (for the vault and audit digests)."""

    item: int
    detector: str
    strategy: str
    value: str
    replacement: str


@dataclass
class Redaction:
    """The outcome of ``apply``: rewritten items and every hit."""

    items: list[dict[str, Any]]
    hits: list[Hit] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(hit.detector for hit in self.hits))

    @property
    def blocked(self) -> list[Hit]:
        return [hit for hit in self.hits if hit.strategy == "block"]

    @property
    def vaulted(self) -> list[Hit]:
        return [hit for hit in self.hits if hit.strategy == "vault"]


@dataclass(frozen=True)
class RedactionPolicy:
    """Detectors in priority order and the strategy for each detector name or family."""

    detectors: Sequence[TextDetector]
    strategies: Mapping[str, Strategy]
    default: Strategy = field(default_factory=Redact)

    @classmethod
    def build(
        cls,
        *,
        detectors: Sequence[str] | None = None,
        patterns: Mapping[str, str] | None = None,
        strategies: Mapping[str, str] | None = None,
        hash_key: bytes | None = None,
        mask_keep_last: int = 4,
        analyzers: Sequence[TextDetector] = (),
    ) -> RedactionPolicy:
        """A policy from recipe-style options: names of detectors and of strategies."""
        known = {detector.name: detector for detector in DETECTORS}
        chosen: list[TextDetector] = []
        for name in detectors if detectors is not None else list(known):
            if name not in known:
                raise ConfigurationError(
                    f"unknown detector {name!r}; built-in: {', '.join(known)} "
                    "(add your own under patterns)"
                )
            chosen.append(known[name])
        for name, pattern in (patterns or {}).items():
            if name in known:
                raise ConfigurationError(f"pattern {name!r} would shadow a built-in detector")
            chosen.append(regex_detector(name, pattern))
        chosen.extend(analyzers)
        names = {detector.name for detector in chosen} | {"pii", "secrets", "default"}
        made: dict[str, Strategy] = {}
        for target, strategy in (strategies or {}).items():
            # An analyzer's entity names are only known when it runs.
            if target not in names and not analyzers:
                raise ConfigurationError(
                    f"strategies: {target!r} is not a detector in use, 'pii', 'secrets' or "
                    "'default'"
                )
            made[target] = _strategy(strategy, hash_key=hash_key, keep_last=mask_keep_last)
        default = made.pop("default", Redact())
        return cls(tuple(chosen), made, default)

    def strategy_for(self, finding: Finding) -> Strategy:
        return (
            self.strategies.get(finding.detector)
            or self.strategies.get(finding.kind)
            or self.default
        )

    @property
    def uses(self) -> frozenset[str]:
        """Names of the strategies this policy can apply."""
        return frozenset({self.default.name, *(s.name for s in self.strategies.values())})

    def apply(self, items: Sequence[Mapping[str, Any]]) -> Redaction:
        result = Redaction(items=[])
        for index, item in enumerate(items):

            def replace(text: str, index: int = index) -> str:
                findings = find_all(text, self.detectors)
                if not findings:
                    return text
                parts: list[str] = []
                cursor = 0
                for finding in findings:
                    strategy = self.strategy_for(finding)
                    replacement = strategy.replace(finding)
                    result.hits.append(
                        Hit(index, finding.detector, strategy.name, finding.value, replacement)
                    )
                    parts += [text[cursor : finding.start], replacement]
                    cursor = finding.end
                parts.append(text[cursor:])
                return "".join(parts)

            result.items.append(rewrite_item(item, replace))
        return result


def _strategy(name: object, *, hash_key: bytes | None, keep_last: int) -> Strategy:
    if name == "redact":
        return Redact()
    if name == "mask":
        return Mask(keep_last)
    if name == "block":
        return Block()
    if name == "vault":
        return Vault()
    if name == "hash":
        if hash_key is None:
            raise ConfigurationError(
                "the hash strategy needs a key: pass key= (or hash_key=) to the redact layer"
            )
        return Hash(hash_key)
    raise ConfigurationError(f"unknown strategy {name!r}; allowed: {', '.join(STRATEGY_NAMES)}")
