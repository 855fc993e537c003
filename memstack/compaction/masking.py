"""Tool-output masking: old tool outputs become a one-line placeholder; the call stays.

    >>> from memstack.compaction import Mask
    >>> items = [
    ...     {"role": "user", "content": "open it"},
    ...     {"type": "function_call", "call_id": "c1", "name": "read_file",
    ...      "arguments": '{"path": "setup.py"}'},
    ...     {"type": "function_call_output", "call_id": "c1", "output": "x" * 5000},
    ...     {"role": "user", "content": "thanks"},
    ... ]
    >>> mask = Mask(templates={"read_file": "File content of {path} — re-read if needed"})
    >>> mask.apply(items)[2]["output"]
    'File content of setup.py — re-read if needed'

A pure view transform: nothing is written, so it costs no storage and is undone by
changing the policy. Only the output of a call/output pair changes, so the pair stays
valid. The placeholder is a function of the call and its own output only, so masking is
idempotent and a masked output reads the same at every later call.

Cache-aware masking: with ``step=N`` the set of masked outputs changes about once every
N new tool outputs (at outputs picked by a hash of their call id), not at every call, so
the prompt prefix stays byte-stable (and billed at the cached rate) in between;
``keep_names`` copies the output's salient tokens (paths, code names, numbers:
``memstack.compaction.salient``) into the placeholder, so the agent can act on what the
output showed without running the tool again:

    >>> def grep(n):
    ...     return [{"type": "function_call", "call_id": f"g{n}", "name": "grep",
    ...              "arguments": '{"pattern": "def load"}'},
    ...             {"type": "function_call_output", "call_id": f"g{n}",
    ...              "output": f"src/io_{n}.py:120: def load(path):" * 20}]
    >>> staged = Mask(keep_last_turns=0, keep_last_outputs=1, step=2, keep_names=40)
    >>> [o["output"][:18] for o in staged.apply(grep(1) + grep(2))[1::2]]  # 1 older: wait
    ['src/io_1.py:120: d', 'src/io_2.py:120: d']
    >>> staged.apply(grep(1) + grep(2) + grep(3))[1]["output"]
    '[Output of grep(pattern="def load") omitted to save context; call it again if needed] \
Names in it: src/io_1.py 120'
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from types import MappingProxyType
from typing import Any

import memstack.cache as cache
import memstack.compaction.excerpts as excerpts
import memstack.compaction.json_parts as json_parts
import memstack.compaction.replies as replies
import memstack.incremental as incremental
from memstack.compaction.render import message_text
from memstack.compaction.salient import occurs, salient_tokens
from memstack.content_keys import derived_key, key_of, keyed_by
from memstack.errors import ConfigurationError
from memstack.history import (
    Fact,
    fact_weight,
    is_user_message,
    item_fact,
    item_type,
    split_turns,
    user_turn_starts,
)

__all__ = ["DEFAULT_TEMPLATE", "Mask"]

Item = Mapping[str, Any]

DEFAULT_TEMPLATE = "[Output of {tool}({args}) omitted to save context; call it again if needed]"
# Output items whose ``output`` may be replaced by a string and stay a valid input item.
_MASKABLE = frozenset({"function_call_output", "custom_tool_call_output"})
MISSED: Any = incremental.MISSING
_LIST_WEIGHT = 72  # an output's row: a list of its fact and masked form
_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _nonnegative_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{name} must be an int >= 0, got {value!r}", layer="Mask")
    return value


def _names(name: str, value: object) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Collection):
        raise ConfigurationError(
            f"{name} must be a collection of tool names (not a string), got {value!r}",
            layer="Mask",
        )
    if not all(isinstance(v, str) for v in value):
        raise ConfigurationError(f"{name} must contain only tool names (str)", layer="Mask")
    return frozenset(value)


@dataclass(frozen=True, kw_only=True)
class Mask:
    """Replace tool outputs older than the protected recent ones by a placeholder.

    An output is kept when it lies in the last ``keep_last_turns`` user turns or is one
    of the last ``keep_last_outputs`` tool outputs. Turns suit chat; a long single-turn
    agent loop (one task, a hundred tool calls) needs ``keep_last_outputs``.
    """

    keep_last_turns: int = 1
    keep_last_outputs: int = 0
    #: Outputs shorter than this (in characters) are never masked.
    min_chars: int = 200
    #: Per-tool placeholder; ``{tool}``, ``{args}``, ``{call_id}`` and every top-level
    #: argument name (``{path}``) are filled in; unknown fields stay as written.
    templates: Mapping[str, str] = field(default_factory=dict)
    default_template: str = DEFAULT_TEMPLATE
    #: Only these tools are masked (None: all); ``exclude_tools`` are never masked.
    tools: Collection[str] | None = None
    exclude_tools: Collection[str] = frozenset()
    #: Longest argument value copied into a placeholder.
    max_arg_chars: int = 120
    #: Mask in steps: the masked outputs change about once per ``step`` new outputs.
    step: int = 1
    #: Characters of the output's salient tokens appended to its placeholder (0: none).
    keep_names: int = 0
    #: Characters of the output's lines quoted in its placeholder: the lines holding names
    #: the agent used after reading it (``memstack.compaction.excerpts``; 0: none).
    excerpt: int = 0
    #: Per tool, the fields of its JSON answer quoted verbatim in the placeholder
    #: (``{"get_order": ["items", "payment"]}``; ``memstack.compaction.json_parts``).
    keep_fields: Mapping[str, Sequence[str]] = field(default_factory=dict)
    #: With ``keep_fields``: a kept member that only repeats the key its object is filed
    #: under (``"gift_card_7": {…, "id": "gift_card_7"}``) is left out.
    drop_echoes: bool = False
    #: What stands between the placeholder and the kept fields (``keep_fields``).
    kept_intro: str = " Kept from it, verbatim:\n"
    #: Assistant replies older than the protected turns keep only their sentences that
    #: hold names, verbatim (``memstack.compaction.replies``).
    trim_replies: bool = False
    #: With ``trim_replies``: a sentence whose names all stand verbatim above the reply in
    #: the masked view (the user's words, calls, the kept text of answers) is left out too.
    trim_restated: bool = False
    #: What a placeholder depends on besides the output and its call (cache keys).
    _way: tuple[Any, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        turns = _nonnegative_int("keep_last_turns", self.keep_last_turns)
        outputs = _nonnegative_int("keep_last_outputs", self.keep_last_outputs)
        if turns == 0 and outputs == 0:
            raise ConfigurationError(
                "keep_last_turns and keep_last_outputs are both 0: the model would never "
                "see a tool result; protect at least one turn or one output",
                layer="Mask",
            )
        _nonnegative_int("min_chars", self.min_chars)
        if _nonnegative_int("max_arg_chars", self.max_arg_chars) < 8:
            raise ConfigurationError("max_arg_chars must be >= 8", layer="Mask")
        if _nonnegative_int("step", self.step) < 1:
            raise ConfigurationError("step must be an int >= 1, got 0", layer="Mask")
        _nonnegative_int("keep_names", self.keep_names)
        _nonnegative_int("excerpt", self.excerpt)
        for name in ("trim_replies", "trim_restated", "drop_echoes"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigurationError(
                    f"{name} must be true or false, got {getattr(self, name)!r}", layer="Mask"
                )
        if self.trim_restated and not self.trim_replies:
            raise ConfigurationError(
                "trim_restated needs trim_replies = true (it trims the same replies further)",
                layer="Mask",
            )
        if not isinstance(self.templates, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in self.templates.items()
        ):
            raise ConfigurationError(
                "templates must map tool names to non-empty placeholder strings", layer="Mask"
            )
        if not isinstance(self.kept_intro, str):
            raise ConfigurationError(
                f"kept_intro must be a string, got {self.kept_intro!r}", layer="Mask"
            )
        if not isinstance(self.default_template, str) or not self.default_template:
            raise ConfigurationError("default_template must be a non-empty string", layer="Mask")
        object.__setattr__(self, "templates", MappingProxyType(dict(self.templates)))
        table = json_parts.field_table(self.keep_fields, owner="Mask")
        object.__setattr__(self, "keep_fields", MappingProxyType(dict(table)))
        object.__setattr__(self, "tools", _names("tools", self.tools))
        object.__setattr__(self, "exclude_tools", _names("exclude_tools", self.exclude_tools))
        way = tuple(
            tuple(sorted(value.items())) if isinstance(value, Mapping)
            else tuple(sorted(value)) if isinstance(value, frozenset) else value
            for value in (getattr(self, f.name) for f in fields(self) if f.init)
        )  # fmt: skip
        object.__setattr__(self, "_way", ("mask", *way))

    def __hash__(self) -> int:
        # The mapping fields are not hashable; ``_way`` holds every field, hashably. Keys
        # made of a mask (compaction's measure) are then made once, not on every read.
        return hash(self._way)

    def __repr__(self) -> str:
        # Only what differs from the defaults: stacks print this in their chain.
        changed = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.init
            and getattr(self, f.name)
            != (f.default_factory() if f.default_factory is not MISSING else f.default)
        ]
        return f"Mask({', '.join(changed)})"

    def apply(self, items: Sequence[Item]) -> list[Any]:
        """``items`` with unprotected, large enough tool outputs replaced; input untouched."""
        return self.apply_keyed(items, [None] * len(items))[0]

    def apply_keyed(
        self,
        items: Sequence[Item],
        keys: Sequence[bytes | None],
        *,
        session_id: str | None = None,
    ) -> tuple[list[Any], list[bytes | None]]:
        """``apply``, with the items' content keys (None where unknown) in and out.

        A placeholder is a pure function of the output, its call and these options, so it
        is kept in the process cache under their keys; a masked item's key follows. With
        ``session_id``, each row's facts and masked form, as this session's last read
        found them, line up with these keys first (``memstack.incremental``): only new
        rows are classified, and an old output is masked again only if its call changed.
        """
        slot = ("mask rows", *self._way, session_id)
        rows = incremental.previous(slot, keys) if session_id is not None else [MISSED] * len(keys)
        if MISSED in rows:
            for index, row in enumerate(rows):
                if row is MISSED:
                    fact = item_fact(items[index])
                    # An output keeps its masked form beside its fact; any other row,
                    # its (shared) fact alone.
                    rows[index] = [fact, None] if fact[0] in _MASKABLE and fact[1] else fact
        facts = [row if type(row) is tuple else row[0] for row in rows]
        calls: dict[tuple[str, str], int] = {}
        outputs: list[int] = []
        for index, (kind, key, _, _) in enumerate(facts):
            if key is None:
                continue
            if kind in _MASKABLE:
                outputs.append(index)
            else:
                calls[key] = index
        result, result_keys = list(items), list(keys)
        weight = fact_weight(facts) + _LIST_WEIGHT * sum(1 for row in rows if type(row) is list)
        if outputs:
            # Rows kept for the next read (``session_id``, every key known) hold each
            # masked output: it needs no entry of its own in the process cache.
            kept = session_id is not None and None not in keys
            weight += self._mask_outputs(
                items, keys, facts, rows, calls, outputs, result, result_keys, kept=kept
            )
        if self.trim_replies:  # after masking: ``trim_restated`` reads the masked view
            self._trim_replies(items, keys, result, result_keys)
        if session_id is not None:
            incremental.keep(slot, keys, rows, shared=True, weight=weight)
        return result, result_keys

    def _mask_outputs(
        self,
        items: Sequence[Item],
        keys: Sequence[bytes | None],
        facts: Sequence[Fact],
        rows: Sequence[list[Any]],
        calls: Mapping[tuple[str, str], int],
        outputs: list[int],
        result: list[Any],
        result_keys: list[bytes | None],
        *,
        kept: bool = False,
    ) -> int:
        """Old outputs replaced by their placeholders in ``result`` (in place); what the
        masked items hold of their own (a row keeps them for the next read).

        ``rows[i][1]``: ``(call key, used, masked)`` as the last read found it for the
        output at ``i``; reused only for the same call and the same ``used``.
        """
        weight = 0
        boundary = self._protected_from(facts, outputs)
        older = [index for index in outputs if index < boundary]
        for position, index in enumerate(older[: self._stepped(facts, older)]):
            key = facts[index][1]
            call = calls.get(key) if key is not None else None
            if call is not None:
                used = self._used_after(items, outputs, position, index) if self.excerpt else ()
                call_key = keys[call]
                known = rows[index][1]
                if (
                    known is not None
                    and call_key is not None
                    and known[0] == call_key
                    and known[1] == used
                ):
                    masked = known[2]
                else:
                    masked = self._masked(
                        items[index], keys[index], items[call], call_key, used, kept=kept
                    )
                    if call_key is not None and keys[index] is not None:
                        rows[index][1] = (call_key, used, masked)
                if masked is not None:
                    result[index], result_keys[index] = masked
                    # A small dict and its placeholder; its other values are the output's.
                    weight += 2 * len(masked[0]["output"]) + 256
        return weight

    def _trim_replies(
        self,
        items: Sequence[Item],
        keys: Sequence[bytes | None],
        result: list[Any],
        result_keys: list[bytes | None],
    ) -> None:
        """Replies before the protected turns, trimmed in ``result`` (in place).

        With ``trim_restated`` the names a reply repeats are looked up in what stands
        above it in ``result`` (already masked); that text changes only when the reply's
        own turn is masked or a compaction covers items above it, so the trimmed reply
        reads the same between those (the prompt prefix stays byte-stable).
        """
        turns = [s for s in split_turns(items) if is_user_message(items[s.start])]
        if len(turns) < max(self.keep_last_turns, 1):
            return
        above = _Above() if self.trim_restated else None  # the non-reply items above one
        for index in range(turns[-max(self.keep_last_turns, 1)].start):
            item = items[index]
            if item.get("role") != "assistant":
                if above is not None:
                    above.add(_shown_text(result[index]))
                continue
            key = key_of(item, keys[index])
            restated: tuple[str, ...] = ()
            if above is not None:
                restated = tuple(n for n in replies.reply_names(item) if above.shows(n))
            short = cache.get_or_put(
                ("trimmed reply", key, restated),
                lambda item=item, restated=restated: replies.trimmed_message(  # type: ignore[misc]
                    item, restated
                ),
                weight=256,
            )
            if short is not None:
                result[index] = short
                mark = b"trimmed reply" + "\x00".join(restated).encode()
                result_keys[index] = derived_key(key, mark)

    def _used_after(
        self, items: Sequence[Item], outputs: list[int], position: int, index: int
    ) -> tuple[str, ...]:
        """Names the agent used after the output at ``index``, up to where protection ended.

        Only items that are always there once the output is masked count (the next
        ``keep_last_outputs`` outputs and what came before them, or the rest of its user
        turn), so the placeholder reads the same at every later call: the prompt prefix
        stays byte-stable.
        """
        end = index + 1
        if self.keep_last_outputs:
            later = position + self.keep_last_outputs
            end = outputs[later] if later < len(outputs) else len(items)
        if self.keep_last_turns:
            turn = next(
                (i for i in range(index + 1, len(items)) if is_user_message(items[i])), len(items)
            )
            end = max(end, turn)
        return tuple(excerpts.used_names(items[index + 1 : end]))

    def _stepped(self, facts: Sequence[Fact], older: list[int]) -> int:
        """How many of the ``older`` outputs to mask: up to the newest step boundary.

        A boundary is an output whose call id hashes to 0 modulo ``step`` (one output in
        ``step`` on average): chosen by content, not by position, so a view that starts
        later (after a summary) or a process that reads the history anew masks exactly
        the same outputs, and the masked set only ever grows at a boundary.
        """
        if self.step == 1:
            return len(older)
        for position in range(len(older) - 1, -1, -1):
            key = facts[older[position]][1]
            ident = key[1] if key is not None else ""
            digest = hashlib.blake2b(ident.encode(), digest_size=8).digest()
            if int.from_bytes(digest, "big") % self.step == 0:
                return position + 1
        return 0

    def _protected_from(self, facts: Sequence[Fact], outputs: list[int]) -> int:
        """Index from which every output is protected."""
        boundary = len(facts)
        if self.keep_last_turns:
            user_turns = user_turn_starts(facts)
            if len(user_turns) < self.keep_last_turns:
                return 0
            boundary = user_turns[-self.keep_last_turns]
        if self.keep_last_outputs:
            if len(outputs) <= self.keep_last_outputs:
                return 0
            boundary = min(boundary, outputs[-self.keep_last_outputs])
        return boundary

    def _masked(
        self,
        output: Item,
        output_key: bytes | None,
        call: Item,
        call_key: bytes | None,
        used: tuple[str, ...] = (),
        *,
        kept: bool = False,
    ) -> tuple[dict[str, Any], bytes] | None:
        """The masked output and its content key; None when it stays.

        Every read meets the same old outputs again, and the outcome is a pure function of
        the output, its call, ``used`` and these options: with both keys known (a stack's
        read), it is kept whole under them, so a read pays one lookup per old output.
        ``kept``: the caller keeps it (a session's rows), so it is made, not looked up.
        """
        if kept:
            return self._mask_one(output, output_key, call, call_key, used, cached=False)
        if output_key is None or call_key is None:
            return self._mask_one(output, output_key, call, call_key, used)
        slot = ("masked output", *self._way, call_key, output_key, used)
        found = cache.get(slot)
        if found is cache.MISSING:
            found = self._mask_one(output, output_key, call, call_key, used)
            # The masked copy shares the output's other values: its own weight is the
            # placeholder and a small dict.
            weight = 64 if found is None else 2 * len(found[0]["output"]) + 256
            cache.put(slot, found, weight=weight)
        return found  # type: ignore[no-any-return]

    def _mask_one(
        self,
        output: Item,
        output_key: bytes | None,
        call: Item,
        call_key: bytes | None,
        used: tuple[str, ...],
        *,
        cached: bool = True,
    ) -> tuple[dict[str, Any], bytes] | None:
        tool = str(call.get("name") or item_type(call))
        if tool in self.exclude_tools or (self.tools is not None and tool not in self.tools):
            return None
        text = output.get("output")
        size = len(text) if isinstance(text, str) else len(json.dumps(text, default=str))
        if size < self.min_chars:
            return None
        # Only these options add to the call's placeholder what its output says.
        by_text = self.keep_names or self.excerpt or tool in self.keep_fields
        if by_text and isinstance(text, str) and text.startswith(self.placeholder(call)):
            return None  # masked already (an in-run filter sees the session's view again)
        out = key_of(output, output_key)
        if cached:  # every read masks the same old outputs again: kept by what it depends on
            slot = (*self._way, key_of(call, call_key), out if by_text else size, used)
            placeholder = cache.get_or_put(
                slot,
                lambda: self.placeholder(call, output, used),
                weight=self.max_arg_chars * 4 + self.excerpt,
            )
        else:
            placeholder = self.placeholder(call, output, used)
        if not by_text and isinstance(text, str) and text.startswith(placeholder):
            return None  # the same check: without those options, the call's placeholder
        if len(placeholder) >= size:
            return None
        masked = {**output, "output": placeholder}
        return masked, keyed_by(out, placeholder, b"masked output")

    def placeholder(self, call: Item, output: Item | None = None, used: Sequence[str] = ()) -> str:
        """The text that stands for ``output``, the output of ``call``.

        ``used``: names the agent used after the output (``excerpt`` quotes their lines).
        """
        tool = str(call.get("name") or item_type(call))
        # Only the fields the template names are made (most name ``tool`` and ``args``).
        parts = _template_parts(self.templates.get(tool, self.default_template))
        arguments: dict[str, Any] | None = None
        pieces = list(parts)
        for index in range(1, len(parts), 2):
            name = parts[index]
            if name == "tool":
                pieces[index] = tool
            elif name == "call_id":
                pieces[index] = str(call.get("call_id") or call.get("id") or "")
            else:
                if arguments is None:
                    arguments = _arguments(call)
                if name == "args":
                    pieces[index] = self._clipped_args(arguments)
                elif name in arguments:
                    value = arguments[name]
                    pieces[index] = self._clip(
                        value if isinstance(value, str) else json.dumps(value)
                    )
                else:  # unknown fields stay as written
                    pieces[index] = "{" + name + "}"
        text = "".join(pieces)
        wanted = self.keep_fields.get(tool)
        if wanted and output is not None:
            raw = output.get("output")
            full = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
            runs = json_parts.field_runs(full, wanted, drop_echoes=self.drop_echoes)
            if runs:
                text = text + self.kept_intro + "\n".join(runs)
        if self.excerpt and output is not None:
            raw = output.get("output")
            full = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
            lines = excerpts.excerpt(
                full, [*excerpts.used_names([call]), *used], budget=self.excerpt
            )
            if lines:
                text = f"{text} Lines of it the agent used:\n" + "\n".join(lines)
        if self.keep_names and output is not None:
            names = self._names(output, text)
            if names:
                text = f"{text} Names in it: {names}"
        return text

    def _names(self, output: Item, placeholder: str) -> str:
        """Salient tokens of the output not already in the placeholder, within keep_names."""
        raw = output.get("output")
        text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
        names: list[str] = []
        used = 0
        for token in salient_tokens(text):
            if used + len(token) + 1 > self.keep_names:
                continue
            if not occurs(token, placeholder):
                names.append(token)
                used += len(token) + 1
        return " ".join(names)

    def _clipped_args(self, arguments: Mapping[str, Any]) -> str:
        """``name=value, …`` (values as JSON), clipped: rendered only as far as it shows."""
        limit = self.max_arg_chars
        pieces: list[str] = []
        size = 0
        for name, value in arguments.items():
            if pieces:
                pieces.append(", ")
                size += 2
            if isinstance(value, str) and len(value) > limit:
                # Its JSON begins with the JSON of its start: that much is all the clip shows.
                value = value[:limit]
            piece = f"{name}={json.dumps(value, ensure_ascii=False)}"
            pieces.append(piece)
            size += len(piece)
            if size > limit:  # clipped within what is rendered so far
                break
        return self._clip("".join(pieces))

    def _clip(self, text: str) -> str:
        if len(text) <= self.max_arg_chars:
            return text
        return text[: self.max_arg_chars - 1] + "…"


class _Above:
    """The text above a reply, growing item by item, searched once for each name.

    The same answers as ``occurs(name, "\\n".join(texts))`` at each reply, without
    joining and searching everything above every reply again: a name is looked for only in
    what was added since it was last looked for (a name never spans the newline between
    two items).
    """

    def __init__(self) -> None:
        self._text = ""
        self._new: list[str] = []
        self._searched: dict[str, int] = {}  # how much of the text a name was looked for in
        self._found: set[str] = set()

    def add(self, text: str) -> None:
        self._new.append(text)

    def shows(self, name: str) -> bool:
        if self._new:
            self._text = "\n".join([self._text, *self._new] if self._text else self._new)
            self._new.clear()
        if name in self._found:
            return True
        start = self._searched.get(name, 0)
        self._searched[name] = len(self._text)
        if occurs(name, self._text[start:]):
            self._found.add(name)
            return True
        return False


def _shown_text(item: Item) -> str:
    """What the model reads of a (masked) view item: its text, output or call arguments."""
    if "content" in item:
        return message_text(item.get("content"))
    if item_type(item) in _MASKABLE:
        raw = item.get("output")
        return raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    return excerpts.agent_text(item)


@functools.lru_cache(maxsize=64)
def _template_parts(template: str) -> tuple[str, ...]:
    """``template`` split at its fields: text at even positions, field names at odd ones."""
    return tuple(_FIELD.split(template))


def _arguments(call: Item) -> dict[str, Any]:
    raw = call.get("arguments", call.get("input", call.get("action")))
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return {"input": raw}
        return parsed if isinstance(parsed, dict) else {"input": parsed}
    return dict(raw) if isinstance(raw, Mapping) else {}
