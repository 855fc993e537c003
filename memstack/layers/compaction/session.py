"""Compaction: mask old tool outputs, summarise old history — without losing any of it.

    >>> import asyncio
    >>> from memstack.compaction import ExtractiveSummarizer, Items, Mask, Summarize
    >>> from memstack.layers import CompactionSession
    >>> from memstack.testing import InMemorySession, sample_items
    >>> store = InMemorySession("s1")
    >>> session = CompactionSession(
    ...     store,
    ...     strategy=[Mask(keep_last_turns=1), Summarize(ExtractiveSummarizer(), max_tokens=300)],
    ...     trigger=Items(12, target=4),
    ...     keep_last_turns=1,
    ... )
    >>> asyncio.run(session.add_items(sample_items(16)))
    >>> view = asyncio.run(session.get_items())
    >>> view[0]["role"], len(view), len(store.rows)
    ('developer', 5, 17)

Why a layer that (by default) only appends: the model's context is bounded, but the
history is a record its users may need whole, so this layer changes what the model sees,
not what is kept. ``Mask`` rewrites the view on each read; ``Summarize`` (any model) or
``ResponsesCompact`` (OpenAI's ``responses.compact``) writes one record standing for older
units when the ``trigger`` fires after ``add_items``, or on ``compact()``. The policy is
pure, in ``memstack.compaction``: options in ``config``, the stored format in ``records``,
what a read shows in ``view``, where to cut in ``plan``. This file asks them, calls the
strategy and writes; reads go through the stack's one loop (``memstack.pipeline``).
What users can rely on (modes, crashes, pop and expiry, ``on_error``) is in README
("Compaction").
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from itertools import compress
from operator import is_not
from typing import TYPE_CHECKING, Any, Literal

import aiologic
from agents.memory import OpenAIConversationsSession

import memstack.cache as cache
from memstack.backends.adapters import capabilities_of
from memstack.backends.capabilities import Tail
from memstack.backends.translate import store_errors
from memstack.base import SessionLayer
from memstack.compaction.carry import carried_pairs, carry, pin_lasting
from memstack.compaction.config import CompactionOptions
from memstack.compaction.masking import Mask
from memstack.compaction.plan import Plan, anchors_after, decide
from memstack.compaction.records import Record, RecordFormatError, is_record, parse_record, pop_last
from memstack.compaction.strategies import Compactor
from memstack.compaction.triggers import Estimate, Tokens, Trigger, after_write
from memstack.compaction.view import Need as ResolveNeed
from memstack.compaction.view import Resolution, resolve
from memstack.content_keys import derived_key
from memstack.errors import (
    CapabilityError,
    CompactionWarning,
    ConfigurationError,
    ItemValidationError,
    SummarizerError,
)
from memstack.history import stored_items
from memstack.pipeline import Need
from memstack.tokens import ItemCounter, counts, default_counter, total

if TYPE_CHECKING:
    from agents.memory import Session
    from agents.run_context import RunContextWrapper

__all__ = ["CompactionSession"]

logger = logging.getLogger("memstack.compaction")
# After an automatic compaction fails (``on_error="warn"``), this session's next attempts
# wait, doubling from 30 s to 10 min: a summariser that hangs or refuses must not cost
# every later write its timeout. Kept in the process cache, so stacks built per request
# share it; ``compact()`` is never held back. The clock is the module's, for tests.
_BACKOFF_FIRST, _BACKOFF_MOST = 30.0, 600.0
clock = time.monotonic

_MAKING_LOCKS = threading.Lock()


@functools.lru_cache(maxsize=256)
def _reprs(trigger: object, mask: object) -> tuple[str, str]:
    return repr(trigger), repr(mask)


def _policy_key(trigger: object, mask: object) -> tuple[str, str]:
    """What the trigger's measure of a view depends on besides the session and counter."""
    try:
        return _reprs(trigger, mask)
    except TypeError:  # a policy of the caller's that is not hashable
        return repr(trigger), repr(mask)


Item = dict[str, Any]
Strategy = Mask | Compactor


class CompactionSession(SessionLayer):
    """Shows the model masked tool outputs and a summary instead of old history."""

    layer_name = "compaction"
    view_only = True
    transforms_items = True

    def __init__(
        self,
        inner: Session,
        *,
        strategy: Strategy | Sequence[Strategy] | Mapping[str, Any] | Sequence[Mapping[str, Any]],
        trigger: Trigger | Mapping[str, Any] | None = None,
        keep_last_turns: int = 1,
        mode: Literal["append", "rewrite"] = "append",
        on_error: Literal["warn", "raise"] = "warn",
        carry_fields: bool = False,
        carry_beyond_turn: Sequence[str] = (),
        carry_turn_fields: Mapping[str, Sequence[str]] | None = None,
        cooldown: int = 0,
        counter: ItemCounter | None = None,
        model: str | None = None,
    ) -> None:
        super().__init__(inner)
        options = CompactionOptions.check(
            strategy=strategy,
            trigger=trigger,
            keep_last_turns=keep_last_turns,
            mode=mode,
            on_error=on_error,
            carry_fields=carry_fields,
            carry_beyond_turn=carry_beyond_turn,
            carry_turn_fields=carry_turn_fields,
            cooldown=cooldown,
            counter=counter,
            model=model,
        )
        self.mask, self.compactor = options.mask, options.compactor
        self._check_store(options)
        self.trigger = options.trigger
        self.keep_last_turns = options.keep_last_turns
        self.mode: Literal["append", "rewrite"] = options.mode
        self.on_error: Literal["warn", "raise"] = options.on_error
        self.carry_fields = options.carry_fields
        self.carry_beyond_turn = options.carry_beyond_turn
        self.carry_turn_fields = options.carry_turn_fields
        # What a compaction carries: the Mask's key fields, and the turn-only ones.
        self._carry_mask = (
            dataclasses.replace(
                self.mask, keep_fields={**self.mask.keep_fields, **self.carry_turn_fields}
            )
            if self.mask is not None and self.carry_turn_fields
            else self.mask
        )
        self.cooldown = options.cooldown
        self.counter: ItemCounter = (
            options.counter if options.counter is not None else default_counter(options.model)
        )

    # Locks are made on first use: most live stacks of a server only read, and a stack
    # holds nothing a read does not need (thousands of them live in one process).
    _compacting: aiologic.Lock | None = None
    _writing: aiologic.Lock | None = None

    @property
    def _lock(self) -> aiologic.Lock:
        """One compaction at a time."""
        if self._compacting is None:
            self._make_locks()
        return self._compacting  # type: ignore[return-value]

    @property
    def _write_lock(self) -> aiologic.Lock:
        """This process's writes vs. placing a record."""
        if self._writing is None:
            self._make_locks()
        return self._writing  # type: ignore[return-value]

    def _make_locks(self) -> None:
        # Thread-safe and bound to no event loop: the SDK lets threads, each with its own
        # loop (Runner.run_sync in workers), share one session, so a stack must allow it;
        # made under a lock so that two threads never take two different locks.
        with _MAKING_LOCKS:
            if self._compacting is None:
                self._compacting = aiologic.Lock()
                self._writing = aiologic.Lock()

    def _compacting_now(self) -> bool:
        return self._compacting is not None and self._compacting.locked()

    @property
    def _measured(self) -> tuple[object, ...]:
        """The key of the trigger's measure of the view, as of the last read, for the
        whole process (made per use, not held: a stack keeps no per-session tuple)."""
        return (
            "compaction measure",
            type(self.backend).__name__,
            self.session_id,
            _policy_key(self.trigger, self.mask),
            getattr(self.counter, "way", id(self.counter)),
        )

    def _check_store(self, options: CompactionOptions) -> None:
        """The two rules that depend on the store below, not on the options alone."""
        name = type(self).__name__
        if options.compactor is not None and isinstance(self.backend, OpenAIConversationsSession):
            raise ConfigurationError(
                "the history is kept by OpenAI's Conversations API, which stores Responses "
                "items only (no compaction records); use a local store, or OpenAI's own "
                "compaction there",
                layer=name,
            )
        if options.mode == "rewrite" and not capabilities_of(self.inner).atomic:
            raise CapabilityError(
                f"mode='rewrite' needs a store that replaces items atomically; "
                f"{type(self.inner).__name__} cannot (use the default mode='append')",
                layer=name,
            )

    # -- the layer protocol -------------------------------------------------------------
    async def shape(self, below: Tail, wrapper: RunContextWrapper[Any] | None) -> Tail | Need:
        """The view: the summary, then the uncovered items, masked."""
        res = await self._resolve(below)
        if res is None:
            return Need.MORE
        tail = self._view(res, below)
        if isinstance(self.trigger, Tokens):
            measure = total(
                self.counter, tail.items, tail.keys, session_id=self.session_id, sealed=tail.sealed
            )
            cache.put(self._measured, Estimate(measure), weight=64)
        elif self.trigger is not None:
            measure = sum(self._weights(tail))
            cache.put(self._measured, Estimate(measure), weight=64)
        return tail

    async def _resolve(self, below: Tail) -> Resolution | None:
        """``below`` resolved (the record that applies and what it leaves); None: read more."""
        window = stored_items(below.items, layer=type(self).__name__, session_id=self.session_id)
        # The generic adapter, and a TTL layer's (it counts live items), count by reading
        # everything, which would make every read read the whole history. The generic
        # one's store cannot drop its oldest items atomically, and a retention layer dates
        # the record to expire with them (``add_derived``), so there the first covered
        # item is checked only when the read reaches it.
        caps = capabilities_of(self.inner)
        trust_first = not caps.counts_cheaply
        res = resolve(window, complete=below.complete, trust_first=trust_first, keys=below.keys)
        if res is ResolveNeed.SIZE:
            stored = await caps.count()
            res = resolve(window, complete=below.complete, store_size=stored, keys=below.keys)
        return res if isinstance(res, Resolution) else None

    def _view(self, res: Resolution, below: Tail) -> Tail:
        head = res.head
        record_key = below.keys[res.record_index] if res.record is not None else None
        head_keys = [
            None if record_key is None else derived_key(record_key, b"summary %d" % i)
            for i in range(len(head))
        ]
        raw, raw_keys = res.raw, [below.keys[i] for i in res.raw_indices]
        kept_keys = raw_keys
        if self.mask is not None:
            raw, raw_keys = self.mask.apply_keyed(raw, raw_keys, session_id=self.session_id)
        sealed: list[Any] = []
        if below.sealed:  # what was sealed with an item the view shows as it was stored
            sealed = list(map(below.sealed.__getitem__, res.raw_indices))
            for changed in compress(range(len(raw_keys)), map(is_not, raw_keys, kept_keys)):
                sealed[changed] = None
            sealed[:0] = [None] * len(head)
        return Tail(
            [*head, *raw],
            [None] * len(head) + [below.written_at[i] for i in res.raw_indices],
            [*head_keys, *raw_keys],
            complete=True,
            reach=below.reach_from(len(res.window) - res.depth),
            sealed=sealed,
        )

    def _weights(self, view: Tail) -> list[int]:
        assert self.trigger is not None
        if isinstance(self.trigger, Tokens):
            count = counts(
                self.counter, view.items, view.keys, session_id=self.session_id, sealed=view.sealed
            )
            return [count(i) for i in range(len(view.items))]
        return self.trigger.weights(view.items, self.counter)

    async def write(self, items: Sequence[Any], wrapper: RunContextWrapper[Any] | None) -> None:
        if any(is_record(item) for item in items):
            raise ItemValidationError(
                "items of type 'memstack.compaction' are written by this layer only",
                layer=type(self).__name__,
            )
        async with self._write_lock:
            await self.write_below(items, wrapper)
        if items and self.trigger is not None and not self._compacting_now():
            known = cache.get(self._measured)
            estimate = None if known is cache.MISSING else known
            estimate = after_write(estimate, self.trigger, items, self.counter)
            if estimate is None:
                await self._auto_compact(wrapper)
            else:
                cache.put(self._measured, estimate, weight=64)

    async def pop(self, wrapper: RunContextWrapper[Any] | None) -> Any:
        """The newest item; a compaction record met on the way is removed, not returned."""
        cache.put(self._measured, None, weight=0)
        async with self._write_lock:
            while True:
                item = await self.pop_below(wrapper)
                if item is None or not is_record(item):
                    return item
                try:
                    record = parse_record(item)
                except RecordFormatError:
                    continue
                if record.anchors is None:  # rewrite mode: the record is the oldest history
                    last, shorter = pop_last(record)
                    if shorter is not None:  # two writes: only a crash between them loses it
                        await self.write_below([shorter.to_item()], wrapper)
                    return last

    async def clear(self, wrapper: RunContextWrapper[Any] | None) -> None:
        cache.put(self._measured, None, weight=0)
        async with self._write_lock:
            await self.clear_below(wrapper)

    async def _read(
        self, wrapper: RunContextWrapper[Any] | None, *, complete: bool = False
    ) -> tuple[Resolution, Tail]:
        """The history below, resolved, read back as far as needed (all of it: ``complete``)."""

        async def resolved(below: Tail) -> tuple[Resolution, Tail] | None:
            if complete and not below.complete:
                return None
            res = await self._resolve(below)
            return None if res is None else (res, below)

        def reached(found: tuple[Resolution, Tail], below: Tail) -> int:
            # From the record's anchor on, as a view read: the first item it covers is
            # checked by count (or trusted), so the next write need not read back to it.
            res = found[0]
            return below.reach_from(len(res.window) - res.depth)

        return await self.read_below(resolved, wrapper, reach_of=None if complete else reached)

    # -- compaction ---------------------------------------------------------------------
    async def compact(self, *, wrapper: RunContextWrapper[Any] | None = None) -> Record | None:
        """Compact now, whatever the trigger says; the record written, or None.

        None when there was nothing to cover or the history changed meanwhile. Raises
        ``SummarizerError`` when the strategy fails (nothing is written then).
        """
        if self.compactor is None:
            raise ConfigurationError(
                "compact() needs Summarize or ResponsesCompact in strategy",
                layer=type(self).__name__,
            )
        # Not one of the four Session methods the base translates: do it here.
        with store_errors(self.inner, layer=type(self).__name__):
            async with self._lock:
                return await self._compact(wrapper, force=True)

    async def _auto_compact(self, wrapper: RunContextWrapper[Any] | None) -> None:
        place = capabilities_of(self.backend).place()
        backoff = ("compaction backoff", place, self.session_id)
        waiting = cache.get(backoff)  # (until, failures) after a failed attempt
        if waiting is not cache.MISSING and clock() < waiting[0] and self.on_error == "warn":
            return
        async with self._lock:
            try:
                await self._compact(wrapper, force=False)
            except SummarizerError as exc:
                if self.on_error == "raise":
                    raise
                failures = 1 if waiting is cache.MISSING else waiting[1] + 1
                delay = min(_BACKOFF_MOST, _BACKOFF_FIRST * 2 ** (failures - 1))
                cache.put(backoff, (clock() + delay, failures), weight=64)
                message = (
                    f"{type(self).__name__}: compaction failed, history left as is "
                    f"(next attempt in {delay:.0f} s): {exc}"
                )
                logger.warning(message)
                warnings.warn(CompactionWarning(message), stacklevel=3)
            else:
                if waiting is not cache.MISSING:
                    cache.discard(backoff)

    async def _compact(
        self, wrapper: RunContextWrapper[Any] | None, *, force: bool
    ) -> Record | None:
        assert self.compactor is not None
        rewrite = self.mode == "rewrite"
        res, below = await self._read(wrapper, complete=rewrite)
        masked = self.filter_model_input(res.raw)
        step = decide(
            res,
            masked,
            trigger=self.trigger,
            counter=self.counter,
            keep_last_turns=self.keep_last_turns,
            force=force,
            cooldown=self.cooldown,
        )
        # Carried across later writes only when measured afresh; a compaction changes the view.
        cache.put(self._measured, step if isinstance(step, Estimate) else None, weight=64)
        times = below.written_at
        if not isinstance(step, Plan):
            if step is None:
                logger.debug("nothing to compact: every uncovered unit is kept verbatim")
            return None
        kept = masked[step.stop :]  # what the model will still see verbatim after the summary
        carried: list[Item] = []
        if self.carry_fields and self._carry_mask is not None:
            step, carried = carry(
                step, res.raw, self._carry_mask, beyond_turn=self.carry_beyond_turn
            )
            step, carried = pin_lasting(step, carried, beyond_turn=self.carry_beyond_turn)
        # The summary skips what the model still sees: the tail and the carried fields.
        pinned_pairs = carried_pairs(step.pinned)
        summary = await self.compactor.compact(
            step.previous, step.covered, kept=[*pinned_pairs, *carried, *kept]
        )
        summary = [*summary, *carried]
        if rewrite:  # the adapter below dates the record by the oldest item it replaces
            record = await self._replace(res, step, summary)
        else:
            when = step.derived_from(times)
            record = await self._append(step, summary, wrapper, derived_from=when)
        if record is None:
            logger.info("compaction discarded: the history changed while it was being made")
        return record

    async def _append(
        self,
        plan: Plan,
        summary: list[Item],
        wrapper: RunContextWrapper[Any] | None,
        *,
        derived_from: float | None,
    ) -> Record | None:
        assert self.compactor is not None
        # Re-read and write with no other write of this process in between, so ``after``
        # (the items since the covered ones) is exact; another process appending in that
        # instant only voids the record (reads then ignore it), it never hides an item.
        async with self._write_lock:
            current, _ = await self._read(wrapper)
            anchors = anchors_after(current, plan)
            if anchors is None:
                return None
            record = plan.record(summary, self.compactor.method, anchors)
            await capabilities_of(self.inner).add_derived(
                [record.to_item()], derived_from=derived_from, wrapper=wrapper
            )
        return record

    async def _replace(
        self, snapshot: Resolution, plan: Plan, summary: list[Item]
    ) -> Record | None:
        assert self.compactor is not None
        record = plan.record(summary, self.compactor.method, None)
        expect = [dict(entry) for entry in snapshot.window[: plan.replace]]
        caps = capabilities_of(self.inner)
        async with self._write_lock:
            done = await caps.replace_oldest(plan.replace, [record.to_item()], expect=expect)
        return record if done else None

    # -- within a run -------------------------------------------------------------------
    def filter_model_input(self, items: Sequence[Item]) -> list[Item]:
        """This layer's view transform on an in-run model input (masking only)."""
        return self.mask.apply(items) if self.mask is not None else list(items)

    def repr_options(self) -> dict[str, object]:
        options: dict[str, object] = {}
        strategies = [s for s in (self.mask, self.compactor) if s is not None]
        options["strategy"] = strategies[0] if len(strategies) == 1 else strategies
        if self.trigger is not None:
            options["trigger"] = self.trigger
        options["keep_last_turns"] = self.keep_last_turns
        if self.mode != "append":
            options["mode"] = self.mode
        if self.carry_fields:
            options["carry_fields"] = True
        if self.carry_beyond_turn:
            options["carry_beyond_turn"] = list(self.carry_beyond_turn)
        if self.carry_turn_fields:
            options["carry_turn_fields"] = {k: list(v) for k, v in self.carry_turn_fields.items()}
        if self.cooldown:
            options["cooldown"] = self.cooldown
        return options
