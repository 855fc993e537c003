"""Mutation checks: break one promised behaviour at a time; the tests named for it must fail.

    python tests/mutants.py            # every mutant; exit 1 naming each one that survives
    python tests/mutants.py mask-off   # some of them

Each mutant is a monkeypatch applied when pytest starts (``tests/conftest.py`` calls
``apply`` when ``MEMSTACK_MUTANT`` names one), then only the tests named for it run, in a
child pytest: a mutant is caught when at least one of them fails (pytest exits 1). A
mutant that cannot be applied (its target renamed) fails the check too, so the list keeps
up with the code. CI runs this after the suite has passed unmutated, so a failure here is
the mutant's doing.

The README's promises, one or more mutants each: masking (and summaries), expiry and purge,
window cuts, encryption authentication, redaction, memory scoping, forget, and ``limit``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ENV = "MEMSTACK_MUTANT"


@dataclass(frozen=True)
class Mutant:
    """One behaviour broken, and the tests (pytest node ids, ``-k`` allowed) that must see it."""

    name: str
    breaks: str
    patch: Callable[[Any], None]  # given pytest's MonkeyPatch
    tests: tuple[str, ...]
    select: str | None = None  # a -k expression, to run a few cases of parametrised tests
    #: Every one of ``tests`` must fail (each is a test once known to let this mutant
    #: through); otherwise one failure is enough and the run stops there.
    each: bool = False


# -- the patches ------------------------------------------------------------------------------
def _mask_apply_identity(mp: Any) -> None:
    from memstack.compaction.masking import Mask

    mp.setattr(Mask, "apply", lambda self, items: list(items))


def _mask_off(mp: Any) -> None:
    from memstack.compaction.masking import Mask

    mp.setattr(Mask, "apply", lambda self, items: list(items))
    mp.setattr(Mask, "apply_keyed", lambda self, items, keys: (list(items), list(keys)))


def _summaries_off(mp: Any) -> None:
    from memstack.compaction.triggers import Items

    mp.setattr(Items, "weights", lambda self, items, counter: [0] * len(items))


def _expiry_off(mp: Any) -> None:
    from memstack.layers.ttl.policy import Expiry

    mp.setattr(Expiry, "dead", lambda self, stamp, generation, now: False)


def _idle_expiry_off(mp: Any) -> None:
    from memstack.layers.ttl.policy import Expiry

    mp.setattr(Expiry, "idle", lambda self, newest, now: False)


def _purge_off(mp: Any) -> None:
    import memstack.layers.ttl.purge as purge
    import memstack.layers.ttl.session as session

    async def delete_nothing(*args: Any, **kwargs: Any) -> int:
        return 0

    mp.setattr(purge, "delete_records", delete_nothing)
    mp.setattr(session, "delete_records", delete_nothing)


def _window_cut_off(mp: Any) -> None:
    from memstack.layers.window.policy import Tail

    mp.setattr(Tail, "plan", lambda self, budget, low, *, anchored=True: 0)


def _aead_tag_unchecked(mp: Any) -> None:
    """GCM decryption without the tag check: the counter-mode keystream, the tag ignored."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    import memstack.crypto.envelope as envelope

    class Unchecked:
        def __init__(self, key: bytes) -> None:
            self.key, self.sealing = key, AESGCM(key)

        def encrypt(self, nonce: bytes, data: bytes, aad: bytes | None) -> bytes:
            return self.sealing.encrypt(nonce, data, aad)

        def decrypt(self, nonce: bytes, data: bytes, aad: bytes | None) -> bytes:
            counter = modes.CTR(nonce + b"\x00\x00\x00\x02")  # GCM's first data block
            plain = Cipher(algorithms.AES(self.key), counter).decryptor()
            return plain.update(data[:-16]) + plain.finalize()

    original = envelope._SessionKey.derive.__func__  # type: ignore[attr-defined]

    def derive(cls: Any, master: bytes, session_id: str, kid: str) -> Any:
        known = original(cls, master, session_id, kid)
        known.aead = Unchecked(envelope._session_key(master, session_id))
        return known

    mp.setattr(envelope._SessionKey, "derive", classmethod(derive))


def _redaction_off(mp: Any) -> None:
    from memstack.redaction.policy import Redaction, RedactionPolicy

    mp.setattr(
        RedactionPolicy, "apply", lambda self, items: Redaction(items=[dict(i) for i in items])
    )


def _memory_layer_scope_ignored(mp: Any) -> None:
    from memstack.layers.memory import MemorySession

    init = MemorySession.__init__

    def one_scope(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.scope = "everyone"

    mp.setattr(MemorySession, "__init__", one_scope)


def _memory_recall_scope_ignored(mp: Any) -> None:
    from memstack.memory.queries import RecallQueries

    frequencies, ranked = RecallQueries._frequencies, RecallQueries._ranked
    unscoped = "scope = :scope AND "
    mp.setattr(
        RecallQueries, "_frequencies", lambda self, n: frequencies(self, n).replace(unscoped, "")
    )
    mp.setattr(RecallQueries, "_ranked", lambda self, n: ranked(self, n).replace(unscoped, ""))


def _forget_sessions_kept(mp: Any) -> None:
    from memstack.governance.erasers import SessionEraser

    async def erase(self: Any, request: Any) -> dict[str, int]:
        ids = request.owned(info.session_id for info in await request.store.list_sessions())
        return {"sessions": len(ids), "items": len(ids)}  # reported, not deleted

    mp.setattr(SessionEraser, "erase", erase)


def _forget_vault_kept(mp: Any) -> None:
    from memstack.governance.erasers import VaultEraser

    async def erase(self: Any, request: Any) -> dict[str, int]:
        return {"vault_entries": len(request.owned(await request.store.vault_sessions()))}

    mp.setattr(VaultEraser, "erase", erase)


def _limit_ignored(mp: Any) -> None:
    from memstack.base import SessionLayer

    view = SessionLayer._caller_view

    async def whole(self: Any, limit: int | None, wrapper: Any) -> Any:
        return await view(self, None, wrapper)

    mp.setattr(SessionLayer, "_caller_view", whole)


def _limit_oldest(mp: Any) -> None:
    from memstack.base import SessionLayer

    view = SessionLayer._caller_view

    async def oldest(self: Any, limit: int | None, wrapper: Any) -> Any:
        items = await view(self, None, wrapper)
        return items if limit is None else items[:limit]

    mp.setattr(SessionLayer, "_caller_view", oldest)


def _limit_drops_cut_outputs(mp: Any) -> None:
    """The regression the SDK contract fix repaired: a limit cut dropped outputs."""
    import memstack.base as base
    from memstack.history import newest_valid

    mp.setattr(base, "newest_valid", lambda items, n, *, whole: newest_valid(items, n, whole=True))


# -- the mutants, and the tests named for each -------------------------------------------------
UNIT_EXPIRY = "tests/test_unit_expiry.py"
MASKING = "tests/compaction/test_masking.py"
MODELS = "tests/test_reference_models.py"
MUTANTS = [
    Mutant(
        "mask-apply-identity",
        "Mask.apply returns its input",
        _mask_apply_identity,
        (
            f"{MASKING}::test_steps_are_chosen_by_content_so_a_later_start_masks_the_same_outputs",
            f"{MASKING}::test_a_masked_outputs_key_names_what_it_holds",
        ),
        each=True,
    ),
    Mutant(
        "mask-off",
        "Mask masks nothing, in the layer too (apply and apply_keyed)",
        _mask_off,
        (f"{MODELS}::test_compaction_masks_like_the_model",),
    ),
    Mutant(
        "summaries-off",
        "an Items trigger never fires: no summary, however long the history",
        _summaries_off,
        (f"{MODELS}::test_compaction_summarises_like_the_model",),
    ),
    Mutant(
        "ttl-expiry-off",
        "no record is ever dead by ttl",
        _expiry_off,
        (
            f"{UNIT_EXPIRY}::test_every_layer_order_on_every_backend",
            f"{UNIT_EXPIRY}::test_every_shipped_recipe",
            f"{MODELS}::test_ttl_shows_and_keeps_like_the_model",
        ),
        select="not test_every_layer_order or sqlite-file-ttl-encrypted-compaction-window",
        each=True,
    ),
    Mutant(
        "ttl-idle-off",
        "an idle session never expires",
        _idle_expiry_off,
        (f"{MODELS}::test_ttl_shows_and_keeps_like_the_model",),
    ),
    Mutant(
        "ttl-purge-off",
        "purges delete nothing",
        _purge_off,
        (
            f"{MODELS}::test_ttl_shows_and_keeps_like_the_model",
            f"{UNIT_EXPIRY}::test_every_layer_order_on_every_backend",
        ),
        select="not test_every_layer_order or sqlite-file-ttl-encrypted-compaction-window",
    ),
    Mutant(
        "window-cut-off",
        "the window starts at the oldest item read",
        _window_cut_off,
        (f"{MODELS}::test_window_shows_like_the_model",),
    ),
    Mutant(
        "aead-tag-unchecked",
        "decryption skips the GCM tag check",
        _aead_tag_unchecked,
        (f"{MODELS}::test_encrypted_round_trips_and_refuses_any_altered_bit",),
    ),
    Mutant(
        "redaction-off",
        "the redaction policy rewrites nothing",
        _redaction_off,
        (f"{MODELS}::test_redaction_stores_like_the_model",),
    ),
    Mutant(
        "memory-layer-scope-ignored",
        "every MemorySession reads one scope",
        _memory_layer_scope_ignored,
        (f"{MODELS}::test_memory_shows_only_its_scope",),
    ),
    Mutant(
        "memory-recall-scope-ignored",
        "recall's SQL searches every scope",
        _memory_recall_scope_ignored,
        (f"{MODELS}::test_memory_shows_only_its_scope",),
    ),
    Mutant(
        "forget-sessions-kept",
        "forget reports the user's sessions but deletes none",
        _forget_sessions_kept,
        ("tests/governance/test_forget.py",),
    ),
    Mutant(
        "forget-vault-kept",
        "forget reports the user's vault entries but deletes none",
        _forget_vault_kept,
        ("tests/governance/test_forget.py",),
    ),
    Mutant(
        "limit-ignored",
        "get_items(limit=n) returns the whole view",
        _limit_ignored,
        ("tests/test_stateful.py",),
        select="sqlite-file-passthrough",
    ),
    Mutant(
        "limit-oldest",
        "get_items(limit=n) returns the oldest n",
        _limit_oldest,
        ("tests/test_stateful.py",),
        select="sqlite-file-passthrough",
    ),
    Mutant(
        "limit-drops-cut-outputs",
        "a limit cut drops an output whose call lies before it",
        _limit_drops_cut_outputs,
        ("tests/test_stateful.py",),
        select="sqlite-file-passthrough",
    ),
]
BY_NAME = {mutant.name: mutant for mutant in MUTANTS}


def apply(name: str, mp: Any) -> None:
    """Apply the mutant ``name`` (from ``tests/conftest.py``, before any test runs)."""
    if name not in BY_NAME:
        raise SystemExit(f"{ENV}={name!r}: no such mutant; known: {sorted(BY_NAME)}")
    BY_NAME[name].patch(mp)


# -- the runner -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    code: int
    seconds: float
    tail: str

    missed: tuple[str, ...] = ()  # with ``each``: named tests that did not fail

    @property
    def caught(self) -> bool:
        # Tests failed; 0 is a survivor, anything else a broken check.
        return self.code == 1 and not self.missed


def run(mutant: Mutant) -> Outcome:
    command = [sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider"]
    command += ["--no-header", *([] if mutant.each else ["-x"]), *mutant.tests]
    if mutant.select:
        command += ["-k", mutant.select]
    started = time.monotonic()
    done = subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, ENV: mutant.name},
        capture_output=True,
        text=True,
        timeout=600,
    )
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-6:])
    failed = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("FAILED ")]
    missed = tuple(
        test
        for test in (mutant.tests if mutant.each else ())
        if not any(node == test or node.startswith(f"{test}[") for node in failed)
    )
    return Outcome(mutant, done.returncode, time.monotonic() - started, tail, missed)


def main(names: list[str]) -> int:
    chosen = [BY_NAME[name] for name in names] if names else MUTANTS
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=int(os.environ.get("MEMSTACK_MUTANT_JOBS", "2"))) as pool:
        outcomes = list(pool.map(run, chosen))
    for outcome in outcomes:
        verdict = "caught" if outcome.caught else "SURVIVED" if outcome.code < 2 else "ERROR"
        print(
            f"{verdict:8} {outcome.mutant.name:28} {outcome.seconds:5.1f}s  {outcome.mutant.breaks}"
        )
    bad = [outcome for outcome in outcomes if not outcome.caught]
    for outcome in bad:
        if outcome.code == 0:
            what = "survived"
        elif outcome.code == 1:
            what = f"survived in {', '.join(outcome.missed)}"
        else:
            what = f"could not be checked (pytest exit {outcome.code})"
        print(
            f"\nmutant {outcome.mutant.name!r} ({outcome.mutant.breaks}) {what}; "
            f"its tests: {', '.join(outcome.mutant.tests)}\n{outcome.tail}",
            file=sys.stderr,
        )
    caught, seconds = len(outcomes) - len(bad), time.monotonic() - started
    print(f"{caught}/{len(outcomes)} mutants caught in {seconds:.0f}s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
