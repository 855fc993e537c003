"""Offline token counts for Responses input items and tool schemas.

    >>> from memstack.tokens import TokenCounter
    >>> counter = TokenCounter("gpt-4o")
    >>> counter.count_text("hello world")
    2
    >>> counter.count_item({"role": "user", "content": "hello world"})
    6

The encoding follows the model: ``o200k_base`` for gpt-4o, gpt-4.1, gpt-4.5, gpt-5 and
the o-series, ``cl100k_base`` for gpt-4 and gpt-3.5 (tiktoken's own model table), and
``o200k_base`` for names tiktoken does not know, since every current OpenAI model uses
it. Provider prefixes (``litellm/openai/gpt-4o``) are ignored.

Texts are counted exactly as tiktoken encodes them. An item's count is an estimate of
what it costs in the model's context: the tokens of every text it carries (role, message
text, tool names, arguments and outputs, reasoning summaries), plus ``item_overhead``
for the framing each item gets (OpenAI's published chat-format figure). Ids, statuses
and ``encrypted_content`` are not counted: the model never reads them as text. Images,
files and audio cost ``media_tokens`` each, as their real cost depends on data we do
not decode. Counts are cached per item content, so re-counting a growing history only
tokenizes the new items.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tiktoken.model import encoding_name_for_model

import memstack.cache as cache
import memstack.incremental as incremental
from memstack.content_keys import content_key, key_of
from memstack.errors import ConfigurationError
from memstack.history import PINNED_MARKER
from memstack.vocab import OFFLINE_ENCODINGS, load_encoding

if TYPE_CHECKING:
    import tiktoken

__all__ = [
    "DEFAULT_ENCODING",
    "ItemCounter",
    "TokenCounter",
    "counts",
    "default_counter",
    "encoding_for_model",
    "item_digest",
    "remember_sealed",
    "sealed_parts",
    "total",
]

DEFAULT_ENCODING = "o200k_base"
# What ``TokenCounter.parts`` counts (which keys are text, which parts are media): counts
# sealed with items name it, so a change to those rules must bump it (old counts unused).
RULES = 1

_LAYER = "TokenCounter"
# Keys whose values the model does not read as text.
_NOT_TEXT = frozenset(
    {
        "type",
        "id",
        "call_id",
        "status",
        "encrypted_content",
        "approval_request_id",
        "annotations",
        "logprobs",
        PINNED_MARKER,
    }
)
# Content parts whose size in tokens depends on media we do not decode.
_MEDIA = frozenset({"input_image", "input_file", "input_audio", "computer_screenshot"})


class ItemCounter(Protocol):
    """What the sliding window needs from a token counter."""

    def count_item(self, item: Mapping[str, Any]) -> int: ...


def encoding_for_model(model: str) -> str:
    """The tiktoken encoding name for ``model``, limited to those available offline."""
    name = model.rsplit("/", 1)[-1]
    try:
        encoding = encoding_name_for_model(name)
    except KeyError:
        return DEFAULT_ENCODING
    # gpt-oss: same ranks and pattern as o200k_base; only special tokens are added.
    if encoding == "o200k_harmony":
        return "o200k_base"
    if encoding not in OFFLINE_ENCODINGS:
        raise ConfigurationError(
            f"model {model!r} uses {encoding}, which is not available offline; "
            f"pass encoding= one of {', '.join(OFFLINE_ENCODINGS)}",
            layer=_LAYER,
        )
    return encoding


def item_digest(item: Mapping[str, Any], key: bytes | None = None) -> bytes:
    """A stable 16-byte digest of an item's content (same in every process).

    Kept in the process cache under the item's content key (``key``, where a read knows it).
    """
    return cache.get_or_put(
        ("digest", key_of(item, key)), lambda: _canonical_digest(item), weight=16
    )


def _canonical_digest(item: Mapping[str, Any]) -> bytes:
    text = json.dumps(item, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def counts(
    counter: ItemCounter,
    items: Sequence[Mapping[str, Any]],
    keys: Sequence[bytes | None],
    *,
    session_id: str | None = None,
    sealed: Sequence[Mapping[str, Any] | None] = (),
) -> Callable[[int], int]:
    """``index -> tokens of items[index]``, looked up by the content keys a read knows.

    A ``TokenCounter``'s counts live in the process cache (``memstack.cache``), keyed by
    its way of counting and the item's key, so a stack built per request, and a window
    and a compaction of one stack, count an item once. With ``session_id``, the counts
    of this session's last such read line up with these keys first
    (``memstack.incremental``): only new items are looked up. ``sealed``: what envelopes
    sealed with the items (``Tail.sealed``): their parts are counts, taken as they are.
    Another counter (a subclass too: it may count otherwise) is asked each time.
    """
    if type(counter) is not TokenCounter:
        return lambda index: counter.count_item(items[index])
    tokens = counter.count_keyed
    if session_id is None:
        if sealed:
            return lambda index: counter.count_sealed(items[index], keys[index], sealed[index])
        return lambda index: tokens(items[index], keys[index])
    known = _kept_counts(counter, keys, session_id)

    def count(index: int) -> int:
        found = known[index]
        if found is incremental.MISSING:
            facts = sealed[index] if sealed else None
            found = known[index] = counter.count_sealed(
                items[index], keys[index], facts, keep=False
            )
        return found  # type: ignore[no-any-return]

    return count


def total(
    counter: ItemCounter,
    items: Sequence[Mapping[str, Any]],
    keys: Sequence[bytes | None],
    *,
    session_id: str | None = None,
    sealed: Sequence[Mapping[str, Any] | None] = (),
) -> int:
    """Tokens of all ``items``: ``counts``' sum, added at C speed where the counts are kept."""
    if type(counter) is not TokenCounter or session_id is None:
        count = counts(counter, items, keys, session_id=session_id, sealed=sealed)
        return sum(map(count, range(len(items))))
    known = _kept_counts(counter, keys, session_id)
    if incremental.MISSING in known:
        for index, found in enumerate(known):
            if found is incremental.MISSING:
                facts = sealed[index] if sealed else None
                known[index] = counter.count_sealed(items[index], keys[index], facts, keep=False)
    return sum(known)


_COUNT_WEIGHT = 28  # a count over 256 (smaller ones are shared)


def _kept_counts(counter: TokenCounter, keys: Sequence[bytes | None], session_id: str) -> list[Any]:
    """This session's last read's counts lined up with ``keys`` (``MISSING`` where new)."""
    slot = ("view counts", *counter.way, session_id)
    known = incremental.previous(slot, keys)
    # Kept now and filled in as the read counts (lazily, from the newest item back):
    # each count is the pure function of its key that any reader would find.
    incremental.keep(slot, keys, known, shared=True, weight=_COUNT_WEIGHT * len(keys))
    return known


class TokenCounter:
    """Counts tokens of texts, Responses input items and tool schemas for one model."""

    def __init__(
        self,
        model: str | None = None,
        *,
        encoding: str | None = None,
        item_overhead: int = 3,
        media_tokens: int = 765,
        cache_size: int = 50_000,
    ) -> None:
        if encoding is not None and encoding not in OFFLINE_ENCODINGS:
            raise ConfigurationError(
                f"encoding must be one of {', '.join(OFFLINE_ENCODINGS)}, not {encoding!r}",
                layer=_LAYER,
            )
        for field, value in (("item_overhead", item_overhead), ("media_tokens", media_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(
                    f"{field} must be an int >= 0, not {value!r}", layer=_LAYER
                )
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise ConfigurationError(
                f"cache_size must be an int >= 0, not {cache_size!r}", layer=_LAYER
            )
        self.model = model
        self.encoding_name = encoding or (
            encoding_for_model(model) if model is not None else DEFAULT_ENCODING
        )
        self.item_overhead = item_overhead
        self.media_tokens = media_tokens
        self.cache_size = cache_size
        self._encoding: tiktoken.Encoding | None = None
        # A count depends on the item and these alone: counters alike share cached counts.
        self.way = (
            "tokens",
            type(self).__qualname__,
            self.encoding_name,
            item_overhead,
            media_tokens,
        )
        self.sealed_as = sealed_name(self.encoding_name)  # its parts' name in an envelope

    @property
    def encoding(self) -> tiktoken.Encoding:
        """The tiktoken encoding, loaded on first use (offline, verified)."""
        if self._encoding is None:
            self._encoding = load_encoding(self.encoding_name)
        return self._encoding

    def count_text(self, text: str) -> int:
        """Tokens in ``text``; special-token markers count as the plain text they are."""
        return len(self.encoding.encode_ordinary(text)) if text else 0

    def count_item(self, item: Mapping[str, Any]) -> int:
        """Estimated context cost of one input item; cached by content."""
        return self.count_keyed(item, None)

    def count_keyed(self, item: Mapping[str, Any], key: bytes | None, *, keep: bool = True) -> int:
        """``count_item``, looked up under ``key`` (the item's content key) when given;
        ``keep=False``: not kept on its own entry (a session's kept read holds it)."""
        if not self.cache_size:
            return self._count_uncached(item)
        own = content_key(item) if key is None else None
        slot = (*self.way, key if key is not None else own)
        found = cache.get(slot)
        if found is not cache.MISSING:
            return found  # type: ignore[no-any-return]
        exact = type(self) is TokenCounter  # a subclass may count otherwise: its own counts
        if exact and key is not None:  # an envelope sealed the parts (``remember_sealed``)
            found = self._sealed(key, keep=keep)
            if found is not cache.MISSING:
                return found  # type: ignore[no-any-return]  # the parts' entry is enough
        if key is not None:
            # A read's key names the stored row (its text, an envelope): the item was
            # most likely counted when this process wrote it, by its content (a compaction
            # trigger's ``after_write``). Hashing it costs a tenth of tokenising it.
            own = content_key(item)
            by_content = (*self.way, own)
            found = cache.get(by_content)
            if not keep and found is not cache.MISSING:
                cache.discard(by_content)  # the session's kept read holds it from now on
        if found is cache.MISSING and exact and own is not None:  # this process sealed it
            found = self._sealed(own, keep=keep)
        count = self._count_uncached(item) if found is cache.MISSING else found
        if keep:
            cache.put(slot, count, weight=16)
        return count

    def count_sealed(
        self,
        item: Mapping[str, Any],
        key: bytes | None,
        facts: Mapping[str, Any] | None,
        *,
        keep: bool = True,
    ) -> int:
        """``count_keyed``, from the parts ``facts`` hold for this encoding (what an
        envelope sealed with the item: ``Tail.sealed``) where they do."""
        if facts and type(self) is TokenCounter:
            parts = facts.get(self.sealed_as)
            if parts is not None and _are_parts(parts):
                return self._from_parts(parts)  # type: ignore[no-any-return]
        return self.count_keyed(item, key, keep=keep)

    def _sealed(self, key: bytes, *, keep: bool) -> Any:
        """The count the parts sealed with the item under ``key`` make, or ``MISSING``.

        ``keep=False``: a session's kept read holds the count from now on, so the parts'
        own entry goes (a counter of another way over the same session then tokenises
        once; one way per stack is the rule, and the cache holds each item once)."""
        slot = _parts_slot(self.encoding_name, key)
        found = self._from_parts(cache.get(slot))
        if not keep and found is not cache.MISSING:
            cache.discard(slot)
        return found

    def _from_parts(self, parts: Any) -> Any:
        """The count these parts make (``MISSING`` for ``MISSING``)."""
        if parts is cache.MISSING:
            return parts
        return self.item_overhead + parts[0] + parts[1] * self.media_tokens

    def parts(self, item: Mapping[str, Any]) -> tuple[int, int]:
        """What ``count_item`` adds up, uncached: (tokens of the item's texts, media parts).

        ``item_overhead`` and ``media_tokens`` are not in it, so the same parts answer for
        every counter of this encoding (and are what an envelope may seal with the item).
        """
        texts: list[str] = []
        media = _texts(item, texts)
        return sum(map(self.count_text, texts)), media

    def _count_uncached(self, item: Mapping[str, Any]) -> int:
        text, media = self.parts(item)
        return self.item_overhead + text + media * self.media_tokens

    def count_items(self, items: Iterable[Mapping[str, Any]]) -> int:
        return sum(self.count_item(item) for item in items)

    def count_tools(self, tools: Iterable[Any]) -> int:
        """Estimated cost of tool definitions: Responses-style dicts or SDK ``FunctionTool``s.

        Name and description are counted as text and the parameter schema as compact
        JSON, plus ``item_overhead`` per tool. Subtract the result from the window's
        ``max_tokens`` to leave room for the tools sent with every request.
        """
        total = 0
        for tool in tools:
            if not isinstance(tool, Mapping):
                tool = {
                    "name": getattr(tool, "name", ""),
                    "description": getattr(tool, "description", ""),
                    "parameters": getattr(tool, "params_json_schema", {}),
                }
            schema = tool.get("parameters")
            total += self.item_overhead
            total += self.count_text(str(tool.get("name") or ""))
            total += self.count_text(str(tool.get("description") or ""))
            if schema:
                total += self.count_text(json.dumps(schema, separators=(",", ":")))
        return total

    def __repr__(self) -> str:
        return f"TokenCounter(model={self.model!r}, encoding={self.encoding_name!r})"


def _texts(value: object, texts: list[str]) -> int:
    """Append to ``texts`` every text of ``value`` the model reads; return its media parts."""
    if isinstance(value, str):
        texts.append(value)
        return 0
    if isinstance(value, Mapping):
        if value.get("type") in _MEDIA:
            return 1
        return sum(_texts(v, texts) for k, v in value.items() if k not in _NOT_TEXT)
    if isinstance(value, list | tuple):
        return sum(_texts(v, texts) for v in value)
    if value is None or isinstance(value, bool):
        return 0
    texts.append(str(value))
    return 0


def _parts_slot(encoding: str, key: bytes) -> tuple[str, int, str, bytes]:
    """Where an item's ``TokenCounter.parts`` are kept: by encoding and content key."""
    return ("token parts", RULES, encoding, key)


def sealed_name(encoding: str) -> str:
    """The name under which an envelope seals an item's parts for ``encoding``."""
    return f"tokens:{RULES}:{encoding}"


@functools.lru_cache(maxsize=8)
def sealed_parts(encoding: str) -> Callable[[Mapping[str, Any]], dict[str, list[int]]]:
    """What an ``EncryptedSession`` seals with each item: its parts for ``encoding``.

    Counted as ``count_item`` counts (and kept by the item's content key, so a counter
    of this encoding counting the same item right after, as a compaction trigger does
    after a write, finds them). One per encoding for the process: stacks built per
    request share it.
    """
    counter = TokenCounter(encoding=encoding)
    name = sealed_name(encoding)

    def facts(item: Mapping[str, Any]) -> dict[str, list[int]]:
        slot = _parts_slot(encoding, content_key(item))
        parts = cache.get(slot)
        if parts is cache.MISSING:
            parts = counter.parts(item)
            cache.put(slot, parts, weight=32)
        return {name: list(parts)}

    return facts


def remember_sealed(
    items: Sequence[Mapping[str, Any]],
    keys: Sequence[bytes | None],
    facts: Sequence[Mapping[str, Any] | None],
) -> None:
    """Keep the parts that envelopes sealed with their items, by the items' keys (their
    content keys where a read knows none).

    The envelope authenticated them with the item, so they are the item's parts as its
    writer counted them under the same rules (``RULES`` is in their name): a counter of
    that encoding then tokenises none of these items. Anything else is left alone.
    """
    prefix = sealed_name("")  # "tokens:<rules>:", then the encoding
    for index, found in enumerate(facts):
        if not found:
            continue
        key = keys[index]
        for name, parts in found.items():
            if not name.startswith(prefix) or not _are_parts(parts):
                continue
            if key is None:
                key = content_key(items[index])
            cache.put(_parts_slot(name[len(prefix) :], key), (parts[0], parts[1]), weight=32)


def _are_parts(value: Any) -> bool:
    return (
        type(value) is list
        and len(value) == 2
        and type(value[0]) is int
        and type(value[1]) is int
        and value[0] >= 0
        and value[1] >= 0
    )


@functools.lru_cache(maxsize=64)
def default_counter(model: str | None = None) -> TokenCounter:
    """The counter a layer uses when given none: one per model for the whole process.

    Counts depend on the model's encoding alone (and are cached process-wide by ``way``),
    so thousands of live stacks need not each hold a counter of their own.
    """
    return TokenCounter(model)
