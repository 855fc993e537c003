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
what a read shows in ``view``, where to cut in ``plan``. ``reader`` reads the
tail; this file asks them, calls the strategy and writes. What users can rely on (modes,
crashes, pop and expiry, ``on_error``) is in README ("Compaction").
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import aiologic
from agents.memory import OpenAIConversationsSession
from agents.memory.session_settings import resolve_session_limit

from memstack.backends.adapters import capabilities_of
from memstack.backends.translate import store_errors
from memstack.base import SessionLayer
from memstack.compaction.config import CompactionOptions
from memstack.compaction.masking import Mask
from memstack.compaction.plan import Plan, anchors_after, decide
from memstack.compaction.records import Record, RecordFormatError, is_record, parse_record, pop_last
from memstack.compaction.strategies import Compactor
from memstack.compaction.triggers import Estimate, Trigger, after_write
from memstack.compaction.view import Resolution
from memstack.errors import (
    CapabilityError,
    CompactionWarning,
    ConfigurationError,
    ItemValidationError,
    SummarizerError,
)
from memstack.layers.compaction.reader import TailReader
from memstack.tokens import ItemCounter, TokenCounter

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import Session
    from agents.run_context import RunContextWrapper

__all__ = ["CompactionSession"]

logger = logging.getLogger("memstack.compaction")

Item = dict[str, Any]
Strategy = Mask | Compactor


class CompactionSession(SessionLayer):
    """Shows the model masked tool outputs and a summary instead of old history."""

    layer_name = "compaction"
    alters_what_it_reads = False
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
        options = CompactionOptions.check(
            strategy=strategy,
            trigger=trigger,
            keep_last_turns=keep_last_turns,
            mode=mode,
            on_error=on_error,
            counter=counter,
            model=model,
        )
        self.mask, self.compactor = options.mask, options.compactor
        self._check_store(options)
        self.trigger = options.trigger
        self.keep_last_turns = options.keep_last_turns
        self.mode: Literal["append", "rewrite"] = options.mode
        self.on_error: Literal["warn", "raise"] = options.on_error
        self.counter: ItemCounter = (
            options.counter if options.counter is not None else TokenCounter(options.model)
        )
        # Thread-safe and bound to no event loop: the SDK lets threads, each with its own
        # loop (Runner.run_sync in workers), share one session, so a stack must allow it.
        self._lock = aiologic.Lock()  # one compaction at a time
        self._write_lock = aiologic.Lock()  # this process's writes vs. placing a record
        self.reader = TailReader(inner, layer=type(self).__name__)
        # The trigger's measure as of the last full check, plus this process's writes.
        self._estimate: Estimate | None = None

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

    # -- Session ------------------------------------------------------------------------
    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        """The view (summary, then uncovered items, masked); with ``limit``, its last items."""
        res, _ = await self.reader.read(wrapper)
        view = self.filter_model_input(res.view)
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
            self._estimate = after_write(self._estimate, self.trigger, items, self.counter)
            if self._estimate is None:
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
            if record.anchors is None:  # rewrite mode: the record is the oldest history
                last, shorter = pop_last(record)
                if shorter is not None:  # two writes: only a crash between them loses it
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
        # Not one of the four Session methods the base translates: do it here.
        with store_errors(self.inner, layer=type(self).__name__):
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
        res, times = await self.reader.read(wrapper, complete=rewrite)
        masked = self.filter_model_input(res.raw)
        step = decide(
            res,
            masked,
            trigger=self.trigger,
            counter=self.counter,
            keep_last_turns=self.keep_last_turns,
            force=force,
        )
        # Carried across later writes only when measured afresh; a compaction changes the view.
        self._estimate = step if isinstance(step, Estimate) else None
        if not isinstance(step, Plan):
            if step is None:
                logger.debug("nothing to compact: every uncovered unit is kept verbatim")
            return None
        summary = await self.compactor.compact(step.previous, step.covered)
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
            current, _ = await self.reader.read(wrapper)
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
        return options
