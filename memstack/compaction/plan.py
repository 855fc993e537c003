"""Where to cut and what a compaction covers, computed from one resolved read.

    >>> from memstack.compaction.plan import choose_stop
    >>> raw = [
    ...     {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
    ...     {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"},
    ... ]
    >>> choose_stop(raw, [1, 1, 1, 1], keep_last_turns=1, target=10)
    2

Pure functions: the layer reads, asks ``decide`` (an ``Estimate`` while the view is within
the trigger's limit, else the ``Plan`` to carry out), calls the strategy, and writes. The
kept tail is the last ``keep_last_turns`` user turns, cut further (at unit boundaries
only) while it measures more than the trigger's ``target``; the newest unit is always
kept, and a tool call whose output has not been written yet is never covered.

A cooldown keeps back-to-back compactions apart: in a long agent loop one large tool
output can lift a freshly compacted view past the limit again at once, and each
compaction then covers the answer the agent is about to use (and re-bills the prompt
after the summary). With ``cooldown=N`` a view that has a summary is compacted again
only once its uncovered history holds ``N`` tool outputs and messages; until then the
view may exceed the limit (a window layer above still bounds it).

The newest user message is never summarised away: when an agent loop is long enough
that its own turn is covered, the message that set the task is carried verbatim in the
record (like system messages), and summarised only once a newer user message exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memstack.compaction.records import Anchors, Record, digest
from memstack.compaction.triggers import Estimate, Trigger
from memstack.compaction.view import Resolution
from memstack.history import cut_points, is_output, is_pinned, is_user_message, pair_key
from memstack.tokens import ItemCounter

__all__ = ["Plan", "anchors_after", "choose_stop", "decide", "plan_compaction"]

Item = dict[str, Any]


def _first_open_call(raw: Sequence[Item]) -> int:
    """Index of the first call whose output is not (yet) in ``raw``; ``len(raw)`` if none."""
    answered = {pair_key(item) for item in raw if is_output(item)}
    for index, item in enumerate(raw):
        key = pair_key(item)
        if key is not None and not is_output(item) and key not in answered:
            return index
    return len(raw)


def choose_stop(
    raw: Sequence[Item], weights: Sequence[int], *, keep_last_turns: int, target: int | None
) -> int:
    """How many of the oldest ``raw`` items to cover (0: nothing can be compacted)."""
    n = len(raw)
    ok = cut_points(raw)
    cuts = [i for i in range(n + 1) if ok[i]]
    if keep_last_turns == 0:
        stop = n
    else:
        users = [i for i in cuts[:-1] if is_user_message(raw[i])]
        protect = users[-keep_last_turns] if len(users) >= keep_last_turns else 0
        starts = [i for i in cuts if protect <= i < n]
        if not starts:
            return 0
        suffix = [0] * (n + 1)
        for i in range(n - 1, -1, -1):
            suffix[i] = suffix[i + 1] + weights[i]
        fitting = [i for i in starts if target is None or suffix[i] <= target]
        stop = fitting[0] if fitting else starts[-1]
    cap = min(stop, _first_open_call(raw))
    return max(i for i in cuts if i <= cap)


@dataclass(frozen=True)
class Plan:
    """One compaction: what the strategy summarises, and what it must still find to apply."""

    base: Record | None  # the record in force when the history was read
    stop: int  # how many uncovered items are covered
    covered_hashes: tuple[str, ...]  # of those items, pinned ones included
    previous: list[Item]  # items that already stood for older history
    covered: list[Item]  # raw items to summarise, oldest first
    pinned: list[Item]  # carried verbatim in front of the summary
    count: int
    replace: int  # rewrite mode: how many of the oldest stored entries are replaced
    sources: list[int]  # window indices whose write times bound the record's lifetime

    def record(self, summary: Sequence[Item], method: Any, anchors: Anchors | None) -> Record:
        return Record(
            summary=tuple(dict(item) for item in summary),
            count=self.count,
            anchors=anchors,
            pinned=tuple(dict(item) for item in self.pinned),
            method=method,
        )

    def derived_from(self, written_at: Sequence[float | None]) -> float | None:
        """The oldest known write time of what the record stands for (per window entry)."""
        known = [t for i in self.sources if (t := written_at[i]) is not None]
        return min(known) if known else None


def decide(
    res: Resolution,
    masked: Sequence[Item],
    *,
    trigger: Trigger | None,
    counter: ItemCounter,
    keep_last_turns: int,
    force: bool,
    cooldown: int = 0,
) -> Estimate | Plan | None:
    """What one read asks of a compaction.

    ``masked`` is ``res.raw`` as the model sees it. An ``Estimate`` when the view is within
    the trigger's limit (nothing to do; the measure to carry across later writes), a
    ``Plan`` to carry out, or None when every uncovered unit is kept verbatim. ``force``
    (``compact()``) skips the measure. ``cooldown``: past the limit, a view that already
    has a summary still waits until its uncovered history holds that many tool outputs
    and messages (module docstring).
    """
    if not force and trigger is not None:
        measure = sum(trigger.weights([*res.head, *masked], counter))
        if measure <= trigger.limit or (res.record is not None and _fresh(res.raw) < cooldown):
            return Estimate(measure)
    weights = trigger.weights(masked, counter) if trigger is not None else [1] * len(masked)
    target = trigger.target if trigger is not None else None
    stop = choose_stop(res.raw, weights, keep_last_turns=keep_last_turns, target=target)
    return plan_compaction(res, stop)


def _fresh(raw: Sequence[Item]) -> int:
    """Tool outputs and messages among ``raw`` (a call waits for its output)."""
    return sum(1 for item in raw if is_output(item) or item.get("role") is not None)


def plan_compaction(res: Resolution, stop: int) -> Plan | None:
    """The compaction covering the first ``stop`` uncovered items; None if nothing to do."""
    covered_idx = list(res.raw_indices[:stop])
    window, prev = res.window, res.record
    task = _newest_user_message(res, stop)
    covered = [window[i] for i in covered_idx if not is_pinned(window[i]) and i != task]
    if not covered:
        return None
    carried = [window[i] for i in covered_idx if is_pinned(window[i]) or i == task]
    earlier = list(prev.pinned if prev else ())
    if task is not None or any(is_user_message(window[i]) for i in res.raw_indices[stop:]):
        # A newer task exists now: the one carried so far becomes history like any other.
        covered = [item for item in earlier if is_user_message(item)] + covered
        earlier = [item for item in earlier if not is_user_message(item)]
    return Plan(
        base=prev,
        stop=stop,
        covered_hashes=tuple(str(res.hashes[i]) for i in covered_idx),
        previous=[dict(item) for item in (prev.summary if prev else ())],
        covered=[dict(item) for item in covered],
        pinned=[dict(item) for item in (*earlier, *carried)],
        count=(prev.count if prev else 0) + len(covered_idx),
        replace=covered_idx[-1] + 1,
        sources=([res.record_index] if prev is not None else []) + covered_idx,
    )


def _newest_user_message(res: Resolution, stop: int) -> int | None:
    """Window index of the newest user message when it is among the first ``stop`` raw items."""
    for i in reversed(res.raw_indices):
        if is_user_message(res.window[i]):
            return i if i in res.raw_indices[:stop] else None
    return None


def anchors_after(res: Resolution, plan: Plan) -> Anchors | None:
    """Anchors for ``plan``'s record appended right after ``res``'s window.

    None when the history no longer matches the plan: another record applies now, or
    the covered items are not the first uncovered ones any more (popped, expired,
    cleared). Items appended since the plan was made only lengthen ``after``.
    """
    if res.record != plan.base:
        return None
    uncovered = res.raw_indices
    if tuple(str(res.hashes[i]) for i in uncovered[: plan.stop]) != plan.covered_hashes:
        return None
    last = uncovered[plan.stop - 1]
    base = plan.base
    if base is not None and base.anchors is not None:
        first, span = base.anchors.first, base.anchors.span + (last - res.anchor_index)
    else:
        first, span = str(res.hashes[uncovered[0]]), last - uncovered[0] + 1
    after = [str(res.hashes[i]) for i in uncovered[plan.stop :]]
    return Anchors(first, str(res.hashes[last]), span, len(after), digest(after))
