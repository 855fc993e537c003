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

Strategies compose: ``Mask`` rewrites the view only (old tool outputs become a one-line
placeholder naming the call); ``Summarize`` (any model via the ``openai`` client or an SDK
``Model``) or ``ResponsesCompact`` (OpenAI's ``responses.compact``) replaces older units
by a pinned summary when the ``trigger`` fires after ``add_items``, or on ``compact()``.
The last ``keep_last_turns`` user turns stay verbatim, unless they alone measure more
than the trigger's ``target``: a long agent loop is one turn, so its older units are
summarised too (a tool call is never separated from its output).

Non-destructive by default: every raw item stays in the store. A compaction is one
appended record (``memstack.compaction.records``) naming the first and last items it
covers by content hash and its distance to them; reads take the newest tail of the
store (what follows the last summary, plus one count), growing it only when needed, and
return the newest record whose anchors are all present with the items after it. One
append is one write: a crash leaves the history as it was before or after, and items
appended while a summary was being made sit after its anchor, so they are never
covered. A record whose items were popped, expired or cleared no longer applies, so a
summary never outlives what it covers; ``pop_item`` undoes a compaction it meets instead
of returning it. Reads go through the capability adapter below (``read_tail``), which
reports each item's write time where a TTL layer keeps one; the record is then written
with ``add_derived(…, derived_from=`` the oldest of what it covers ``)``, so it expires
with it.

``mode="rewrite"`` instead replaces the covered items by the record in one
``replace_oldest(…, expect=…)`` transaction (atomic stores only); a history that
changed since it was read is left alone. A failed summariser never produces a summary:
``on_error="warn"`` (default) leaves history uncompacted with a ``CompactionWarning``,
``"raise"`` raises ``SummarizerError`` from ``add_items`` (after the items are stored).
``compact()`` always raises.

The SDK reads the session once per run; ``memstack.input_filter(stack)``
applies the same masking (and the stack's window) to every model call inside a run.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

import aiologic
from agents.memory import OpenAIConversationsSession
from agents.memory.session_settings import resolve_session_limit
from pydantic import Field, model_validator

from memstack.backends.adapters import capabilities_of
from memstack.base import SessionLayer
from memstack.compaction.config import strategy_from_config, trigger_from_config
from memstack.compaction.masking import Mask
from memstack.compaction.plan import Plan, anchors_after, choose_stop, plan_compaction
from memstack.compaction.records import Record, RecordFormatError, is_record, parse_record
from memstack.compaction.strategies import Compactor, Summarize
from memstack.compaction.triggers import Estimate, Tokens, Trigger
from memstack.compaction.view import Need, Resolution, resolve
from memstack.errors import (
    CapabilityError,
    CompactionWarning,
    ConfigurationError,
    ItemValidationError,
    SummarizerError,
)
from memstack.history import stored_items
from memstack.options import Counter, ModelName, Options, Size
from memstack.tokens import ItemCounter, TokenCounter

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import Session
    from agents.run_context import RunContextWrapper

__all__ = ["CompactionSession"]

logger = logging.getLogger("memstack.compaction")

Item = dict[str, Any]
Strategy = Mask | Compactor
_FIRST_READ = 32


class CompactionOptions(Options, layer="CompactionSession"):
    keep_last_turns: Size = 1
    mode: Annotated[Literal["append", "rewrite"], Field(description="'append' or 'rewrite'")] = (
        "append"
    )
    on_error: Annotated[Literal["warn", "raise"], Field(description="'warn' or 'raise'")] = "warn"
    counter: Counter = None
    model: ModelName = None

    @model_validator(mode="after")
    def _one_counter(self) -> Self:
        if self.model is not None and self.counter is not None:
            raise ValueError("pass model or counter, not both")
        return self


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
        counter: ItemCounter | None = None,
        model: str | None = None,
    ) -> None:
        super().__init__(inner)
        name = type(self).__name__
        try:  # recipes write policies as plain tables
            strategy = strategy_from_config(strategy)
            trigger = trigger_from_config(trigger)
        except ConfigurationError as exc:
            raise ConfigurationError(exc.reason, layer=name) from exc
        self.mask, self.compactor = _split_strategy(strategy, name)
        if self.compactor is not None and isinstance(self.backend, OpenAIConversationsSession):
            raise ConfigurationError(
                "the history is kept by OpenAI's Conversations API, which stores Responses "
                "items only (no compaction records); use a local store, or OpenAI's own "
                "compaction there",
                layer=name,
            )
        if trigger is not None and not isinstance(trigger, Trigger):
            raise ConfigurationError(
                f"trigger must be Tokens(...), Items(...) or Turns(...), not {trigger!r}",
                layer=name,
            )
        if trigger is not None and self.compactor is None:
            raise ConfigurationError(
                "a trigger needs a strategy that compacts (Summarize or ResponsesCompact); "
                "Mask alone applies on every read",
                layer=name,
            )
        options = CompactionOptions.check(
            keep_last_turns=keep_last_turns,
            mode=mode,
            on_error=on_error,
            counter=counter,
            model=model,
        )
        if options.mode == "rewrite":
            if self.compactor is None:
                raise ConfigurationError(
                    "mode='rewrite' needs Summarize or ResponsesCompact", layer=name
                )
            if not capabilities_of(inner).atomic:
                raise CapabilityError(
                    f"mode='rewrite' needs a store that replaces items atomically; "
                    f"{type(inner).__name__} cannot (use the default mode='append')",
                    layer=name,
                )
        if (
            isinstance(trigger, Tokens)
            and isinstance(self.compactor, Summarize)
            and trigger.target is not None
            and trigger.target + self.compactor.max_tokens >= trigger.limit
        ):
            raise ConfigurationError(
                f"trigger.target ({trigger.target}) + the summary's max_tokens "
                f"({self.compactor.max_tokens}) must stay below trigger.limit ({trigger.limit}),"
                " or a compacted view could fire the trigger again at once",
                layer=name,
            )
        self.trigger = trigger
        self.keep_last_turns = options.keep_last_turns
        self.mode: Literal["append", "rewrite"] = options.mode
        self.on_error: Literal["warn", "raise"] = options.on_error
        self.counter: ItemCounter = counter if counter is not None else TokenCounter(model)
        # Thread-safe and bound to no event loop: the SDK lets threads, each with its own
        # loop (Runner.run_sync in workers), share one session, so a stack must allow it.
        self._lock = aiologic.Lock()  # one compaction at a time
        self._write_lock = aiologic.Lock()  # this process's writes vs. placing a record
        # How many stored entries the last read needed; only sizes the next first read.
        self._read_hint = _FIRST_READ
        # The trigger's measure as of the last full check, plus this process's writes.
        self._estimate: Estimate | None = None

    # -- Session ------------------------------------------------------------------------
    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        """The view (summary, then uncovered items, masked); with ``limit``, its last items."""
        res, _ = await self._read(wrapper)
        view = self._view(res)
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is None:
            return view  # type: ignore[return-value]
        return view[-limit:] if limit > 0 else []  # type: ignore[return-value]

    async def add_items(
        self, items: list[TResponseInputItem], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        if any(is_record(item) for item in items):
            raise ItemValidationError(
                "items of type 'memstack.compaction' are written by this layer only",
                layer=type(self).__name__,
            )
        async with self._write_lock:
            await self.inner.add_items(items, **self.forward(wrapper))
        if items and self.trigger is not None and not self._lock.locked():
            # The last full check's measure plus these items decides most writes, with no
            # read: a turn costs one view read (the Runner's), not two.
            if self._estimate is not None:
                added = sum(self.trigger.weights(items, self.counter))
                estimate = self._estimate.plus(added)
                if estimate.decides(limit=self.trigger.limit):
                    self._estimate = estimate
                    return
            await self._auto_compact(wrapper)

    async def pop_item(
        self, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> TResponseInputItem | None:
        """The newest item; a compaction record met on the way is removed, not returned."""
        self._estimate = None
        async with self._write_lock:
            return await self._pop(wrapper)

    async def clear_session(self, *, wrapper: RunContextWrapper[Any] | None = None) -> None:
        self._estimate = None
        async with self._write_lock:
            await self.inner.clear_session(**self.forward(wrapper))

    async def _pop(self, wrapper: RunContextWrapper[Any] | None) -> TResponseInputItem | None:
        while True:
            item = await self.inner.pop_item(**self.forward(wrapper))
            if item is None or not is_record(item):
                return item
            try:
                record = parse_record(item)
            except RecordFormatError:
                continue
            if record.anchors is None:
                # Rewrite mode: the record is the oldest history itself; hand out its last
                # item and keep the rest (two writes: only a crash between them loses it).
                *rest, last = record.head
                if len(record.head) > 1:
                    shorter = Record(
                        summary=tuple(rest[len(record.pinned) :]),
                        pinned=tuple(rest[: len(record.pinned)]),
                        count=record.count,
                        method=record.method,
                    )
                    stored: Any = [shorter.to_item()]
                    await self.inner.add_items(stored, **self.forward(wrapper))
                return last  # type: ignore[return-value]

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
        async with self._lock:
            return await self._compact(wrapper, force=True)

    async def _auto_compact(self, wrapper: RunContextWrapper[Any] | None) -> None:
        async with self._lock:
            try:
                await self._compact(wrapper, force=False)
            except SummarizerError as exc:
                if self.on_error == "raise":
                    raise
                message = f"{type(self).__name__}: compaction failed, history left as is: {exc}"
                logger.warning(message)
                warnings.warn(CompactionWarning(message), stacklevel=3)

    async def _compact(
        self, wrapper: RunContextWrapper[Any] | None, *, force: bool
    ) -> Record | None:
        assert self.compactor is not None
        rewrite = self.mode == "rewrite"
        res, times = await self._read(wrapper, complete=rewrite)
        raw = self.mask.apply(res.raw) if self.mask is not None else res.raw
        trigger = self.trigger
        self._estimate = None  # what follows changes the view, or measures it afresh
        if not force and trigger is not None:
            view = [*res.head, *raw]
            measure = sum(trigger.weights(view, self.counter))
            if measure <= trigger.limit:
                self._estimate = Estimate(measure)
                return None
        weights = trigger.weights(raw, self.counter) if trigger is not None else [1] * len(raw)
        stop = choose_stop(
            res.raw,
            weights,
            keep_last_turns=self.keep_last_turns,
            target=trigger.target if trigger is not None else None,
        )
        plan = plan_compaction(res, stop)
        if plan is None:
            logger.debug("nothing to compact: every uncovered unit is kept verbatim")
            return None
        summary = await self.compactor.compact(plan.previous, plan.covered)
        if rewrite:  # the adapter below dates the record by the oldest item it replaces
            record = await self._replace(res, plan, summary)
        else:
            when = _oldest([times[i] for i in plan.sources])
            record = await self._append(plan, summary, wrapper, derived_from=when)
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

    # -- reading ------------------------------------------------------------------------
    async def _read(
        self,
        wrapper: RunContextWrapper[Any] | None,
        *,
        complete: bool = False,
    ) -> tuple[Resolution, list[float | None]]:
        """Resolve the newest stored entries, reading further back until it is decided.

        ``complete`` reads everything. Returns the write time of each entry of the window
        (None where no retention layer below knows it).
        """
        size = max(_FIRST_READ, self._read_hint + self._read_hint // 4)
        caps = capabilities_of(self.inner)
        native = caps.counts_cheaply
        while True:
            tail = await caps.read_tail(size, wrapper=wrapper)
            window = stored_items(tail.items, layer=type(self).__name__, session_id=self.session_id)
            done = len(window) < size
            # The generic adapter, and a TTL layer's (it counts live items), count by
            # reading everything, which would make every read read the whole history. The
            # generic one's store cannot drop its oldest items atomically, and a retention
            # layer dates the record to expire with them (``add_derived``), so there the
            # first covered item is checked only when the read reaches it.
            res = resolve(window, complete=done, trust_first=not native)
            if res is Need.SIZE:
                stored = await caps.count()
                res = resolve(window, complete=done, store_size=stored)
            if isinstance(res, Resolution) and (done or not complete):
                break
            size *= 4
        # Next time read from the anchor on: the first covered item is checked by count.
        needed = res.anchor_index if res.record is not None else res.reach
        self._read_hint = max(_FIRST_READ, len(window) - max(0, needed))
        return res, tail.written_at

    def _view(self, res: Resolution) -> list[Item]:
        view = res.view
        return self.mask.apply(view) if self.mask is not None else view

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
        return options


def _oldest(times: Sequence[float | None]) -> float | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


def _split_strategy(strategy: object, layer: str) -> tuple[Mask | None, Compactor | None]:
    parts = list(strategy) if isinstance(strategy, list | tuple) else [strategy]
    masks = [p for p in parts if isinstance(p, Mask)]
    compactors = [p for p in parts if not isinstance(p, Mask) and isinstance(p, Compactor)]
    if not parts or len(masks) + len(compactors) != len(parts):
        raise ConfigurationError(
            "strategy must be Mask(...), Summarize(...), ResponsesCompact(...) or a list of "
            f"them, got {strategy!r}",
            layer=layer,
        )
    if len(masks) > 1 or len(compactors) > 1:
        raise ConfigurationError(
            "strategy takes at most one Mask and one of Summarize/ResponsesCompact",
            layer=layer,
        )
    return (masks[0] if masks else None), (compactors[0] if compactors else None)
