"""Mask: which outputs are replaced, what the placeholder says, and that pairs stay valid."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from memstack import ConfigurationError
from memstack.compaction import Mask
from memstack.history import history_problems

BIG = "line of output\n" * 100  # 1500 characters


def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(args),
    }


def output(call_id: str, text: str = BIG) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def history() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "be brief"},
        user("read two files"),
        call("c1", "read_file", path="a.py"),
        output("c1"),
        call("c2", "grep", pattern="TODO", path="src"),
        output("c2"),
        {"role": "assistant", "content": "done"},
        user("and a third"),
        call("c3", "read_file", path="b.py"),
        output("c3"),
    ]


def outputs_of(items: list[dict[str, Any]]) -> list[str]:
    return [i["output"] for i in items if i.get("type") == "function_call_output"]


def test_outputs_before_the_last_turn_become_placeholders_naming_the_call() -> None:
    items = history()
    masked = Mask(templates={"read_file": "File content of {path} — re-read if needed"}).apply(
        items
    )
    assert outputs_of(masked) == [
        "File content of a.py — re-read if needed",
        '[Output of grep(pattern="TODO", path="src") omitted to save context; '
        "call it again if needed]",
        BIG,  # the last turn is kept verbatim
    ]
    # Only outputs change; calls, messages and order stay; the input list is untouched.
    assert [i for i in masked if i.get("type") != "function_call_output"] == [
        i for i in items if i.get("type") != "function_call_output"
    ]
    assert items == history()
    assert history_problems(masked) == []


def test_keep_last_outputs_masks_inside_one_long_turn() -> None:
    steps = [(call(f"c{n}", "bash", command=f"ls {n}"), output(f"c{n}")) for n in range(5)]
    items = [user("fix it"), *[item for step in steps for item in step]]
    # One user turn: keep_last_turns protects it all; keep_last_outputs does not.
    assert outputs_of(Mask(keep_last_turns=1).apply(items)) == [BIG] * 5
    masked = outputs_of(Mask(keep_last_turns=0, keep_last_outputs=2).apply(items))
    assert masked[3:] == [BIG, BIG]
    assert all(text.startswith("[Output of bash(command=") for text in masked[:3])


def test_thresholds_and_tool_lists() -> None:
    items = history()
    assert outputs_of(Mask(min_chars=2000).apply(items)) == [BIG] * 3
    only_grep = outputs_of(Mask(tools=["grep"]).apply(items))
    assert only_grep[0] == BIG and only_grep[1] != BIG
    not_grep = outputs_of(Mask(exclude_tools={"grep"}).apply(items))
    assert not_grep[0] != BIG and not_grep[1] == BIG


def test_placeholder_never_longer_than_the_output_and_masking_is_idempotent() -> None:
    items = [
        user("q"),
        call("c1", "f", x="y" * 500),
        output("c1", "short output " * 20),
        user("next"),
    ]
    mask = Mask(min_chars=0)
    once = mask.apply(items)
    assert once[2]["output"] != items[2]["output"]
    assert len(once[2]["output"]) < len(items[2]["output"])
    assert "…" in once[2]["output"]  # long argument values are clipped
    assert mask.apply(once) == once
    tiny = [user("q"), call("c1", "f"), output("c1", "ok"), user("next")]
    assert mask.apply(tiny) == tiny


def test_unknown_template_fields_stay_and_structured_outputs_are_masked() -> None:
    structured = {
        "type": "function_call_output",
        "call_id": "c1",
        "output": [{"type": "input_text", "text": BIG}],
    }
    items = [user("q"), call("c1", "read_file", path="x"), structured, user("next")]
    masked = Mask(templates={"read_file": "{path} {nope} {tool}"}).apply(items)
    assert masked[2]["output"] == "x {nope} read_file"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"keep_last_turns": -1}, "keep_last_turns"),
        ({"keep_last_turns": 0, "keep_last_outputs": 0}, "keep_last_outputs"),
        ({"min_chars": "10"}, "min_chars"),
        ({"templates": {"read_file": ""}}, "templates"),
        ({"tools": "read_file"}, "tools"),
        ({"exclude_tools": [1]}, "exclude_tools"),
        ({"max_arg_chars": 2}, "max_arg_chars"),
    ],
)
def test_options_are_validated(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigurationError, match=field):
        Mask(**options)


def bash_step(n: int, text: str = BIG) -> list[dict[str, Any]]:
    return [call(f"b{n}", "bash", command=f"cat part{n}.txt"), output(f"b{n}", text)]


def test_step_masks_in_batches_so_the_prefix_stays_put_between_them() -> None:
    mask = Mask(keep_last_turns=0, keep_last_outputs=2, step=5)
    items = [user("go")]
    views = []
    for n in range(60):
        items += bash_step(n)
        views.append(mask.apply(items))
    masked = [sum(o != BIG for o in outputs_of(v)) for v in views]
    assert masked == sorted(masked)  # only ever grows
    changes = sum(a != b for a, b in itertools.pairwise(masked))
    assert 6 <= changes <= 20  # about one change in 5 outputs; every call would be 58
    # between two changes the view only grows: the earlier view is a prefix of the next
    for before, after, a, b in zip(views, views[1:], masked, masked[1:], strict=False):
        if a == b:
            assert after[: len(before)] == before
    assert not any(history_problems(v) for v in views)


def test_steps_are_chosen_by_content_so_a_later_start_masks_the_same_outputs() -> None:
    mask = Mask(keep_last_turns=0, keep_last_outputs=2, step=4)
    items = [user("go")]
    for n in range(40):
        items += bash_step(n)
    whole = mask.apply(items)
    # Masking happened (in steps of about 4, the two newest outputs kept): the comparison
    # below would hold for a mask that masks nothing.
    assert 30 <= sum(o != BIG for o in outputs_of(whole)) <= 38
    for start in (1, 21, 41):  # the view after a summary starts later
        later = mask.apply(items[start:])
        assert later == whole[start:]
        assert any(o != BIG for o in outputs_of(later))


def test_keep_names_puts_the_outputs_salient_tokens_in_the_placeholder() -> None:
    listing = "src/pkg/loader.py:120: def read_config(path):\n" + "    pass\n" * 100
    items = [user("go"), *bash_step(1, listing), *bash_step(2)]
    mask = Mask(keep_last_turns=0, keep_last_outputs=1, keep_names=40)
    placeholder = outputs_of(mask.apply(items))[0]
    assert placeholder.endswith("Names in it: src/pkg/loader.py 120 read_config")
    assert "part1.txt" in placeholder  # the command itself, from the template
    # budget in characters; a token already in the placeholder is not repeated
    small = Mask(keep_last_turns=0, keep_last_outputs=1, keep_names=20)
    assert outputs_of(small.apply(items))[0].endswith("Names in it: src/pkg/loader.py")
    repeat = [user("go"), *bash_step(1, "part1.txt\n" * 100), *bash_step(2)]
    assert "Names in it" not in outputs_of(mask.apply(repeat))[0]


@pytest.mark.parametrize(
    ("options", "message"),
    [({"step": 0}, "step must be an int >= 1"), ({"keep_names": -1}, "keep_names must be")],
)
def test_step_and_keep_names_are_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Mask(**options)


@pytest.mark.parametrize("keep_names", [0, 40])
def test_a_masked_outputs_key_names_what_it_holds(keep_names: int) -> None:
    """Masking gives each item it replaces a key: equal keys must mean equal items, the
    second time too (when the placeholder comes from the process cache)."""
    from memstack.content_keys import content_key

    mask = Mask(keep_names=keep_names)
    seen: dict[bytes, dict[str, Any]] = {}
    for text in (BIG, BIG + "changed", BIG):  # the same placeholder over other outputs
        # c9 repeats c1's call: the same placeholder stands for a different output item.
        again = [call("c9", "read_file", path="a.py"), output("c9")]
        items = [*history()[:4], *again, *history()[4:], user("later")]
        items[3] = output("c1", text)
        keys: list[bytes | None] = [content_key(item) for item in items]
        for _ in range(2):
            masked, masked_keys = mask.apply_keyed(items, keys)
            assert masked == mask.apply(items)
            for item, key in zip(masked, masked_keys, strict=True):
                assert key is not None
                assert seen.setdefault(key, dict(item)) == item
            assert masked_keys != keys  # some outputs were masked, with keys of their own


SUPPORT_FIELDS = {"get_reservation_details": ["flights", "payment_history"]}
RESERVATION = json.dumps(
    {
        "reservation_id": "4WQ150",
        "user_id": "chen_jackson_3290",
        "address": "901 Pine Lane, Suite 360, Houston, TX 77271 " * 3,
        "flights": [{"flight_number": "HAT001", "date": "2024-05-01", "price": 120}],
        "payment_history": [{"payment_id": "credit_card_4421486", "amount": 120}],
    }
)
LONG_REPLY = (
    "Thanks for waiting while I looked everything up for you in our systems today. "
    "Your flight HAT001 departs on 2024-05-01 and the fare was $120. "
    "Please let me know whether there is anything else I can help you with at all."
)


def support_chat() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Which flight is on reservation 4WQ150?"},
        call("r1", "get_reservation_details", reservation_id="4WQ150"),
        output("r1", RESERVATION),
        {"role": "assistant", "content": LONG_REPLY},
        {"role": "user", "content": "Thanks. Can I add a bag?"},
    ]


def test_keep_fields_quotes_a_json_answers_key_fields_verbatim() -> None:
    masked = Mask(keep_last_turns=1, keep_fields=SUPPORT_FIELDS).apply(support_chat())
    placeholder = masked[2]["output"]
    assert placeholder.startswith("[Output of get_reservation_details(")
    assert '{"flight_number": "HAT001", "date": "2024-05-01", "price": 120}' in placeholder
    assert '"payment_history": [{"payment_id": "credit_card_4421486"' in placeholder
    assert "Pine Lane" not in placeholder and "chen_jackson_3290" not in placeholder
    assert not history_problems(masked)
    # the newest turn is protected; another tool's answer gets the plain placeholder
    assert (
        Mask(keep_last_turns=1, keep_fields={"other_tool": ["x"]})
        .apply(support_chat())[2]["output"]
        .endswith("call it again if needed]")
    )


def test_trim_replies_trims_replies_before_the_protected_turns_only() -> None:
    items = support_chat()
    trimmed = Mask(keep_last_turns=1, trim_replies=True).apply(items)
    assert trimmed[3]["content"] == (
        "… Your flight HAT001 departs on 2024-05-01 and the fare was $120. …"
    )
    assert items[3]["content"] == LONG_REPLY  # the input is untouched
    # in the protected turn, the reply stays whole
    assert Mask(keep_last_turns=2, trim_replies=True).apply(items)[3]["content"] == LONG_REPLY
    assert Mask(keep_last_turns=1).apply(items)[3]["content"] == LONG_REPLY  # off by default


def test_trimmed_replies_and_kept_fields_read_the_same_at_every_later_call() -> None:
    mask = Mask(keep_last_turns=1, trim_replies=True, keep_fields=SUPPORT_FIELDS)
    first = mask.apply(support_chat())
    later = mask.apply([*support_chat(), {"role": "assistant", "content": "Sure: HAT001."}])
    assert later[: len(first)] == first  # the prompt prefix stays byte-stable


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"keep_fields": {"get_order": "items"}}, "keep_fields"),
        ({"keep_fields": ["items"]}, "keep_fields"),
        ({"trim_replies": "yes"}, "trim_replies"),
        ({"trim_replies": True, "trim_restated": 1}, "trim_restated"),
        ({"trim_restated": True}, "trim_restated needs trim_replies"),
    ],
)
def test_keep_fields_and_trim_replies_are_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Mask(**options)


def test_trim_restated_leaves_out_sentences_that_only_repeat_what_stands_above() -> None:
    mask = Mask(
        keep_last_turns=1, keep_fields=SUPPORT_FIELDS, trim_replies=True, trim_restated=True
    )
    # HAT001, 2024-05-01 and 120 stand verbatim in the answer's kept fields just above
    assert mask.apply(support_chat())[3]["content"] == (
        "Thanks for waiting while I looked everything up for you in our systems today. …"
    )
    # without kept fields the placeholder does not show them: the sentence stays
    plain = Mask(keep_last_turns=1, trim_replies=True, trim_restated=True)
    assert "HAT001 departs" in plain.apply(support_chat())[3]["content"]
    # a sentence with one name the view does not show above stays, whole
    items = support_chat()
    items[3] = {"role": "assistant", "content": LONG_REPLY.replace("$120", "$135")}
    assert (
        "Your flight HAT001 departs on 2024-05-01 and the fare was $135."
        in (mask.apply(items)[3]["content"])
    )


def test_trim_restated_reads_the_same_at_every_later_call() -> None:
    mask = Mask(
        keep_last_turns=1, keep_fields=SUPPORT_FIELDS, trim_replies=True, trim_restated=True
    )
    first = mask.apply(support_chat())
    later = mask.apply(
        [
            *support_chat(),
            {"role": "assistant", "content": "Sure: HAT001 on 2024-05-01."},
            {"role": "user", "content": "And the fare of $120?"},
        ]
    )
    assert later[: len(first) - 1] == first[:-1]  # the prompt prefix stays byte-stable
    assert mask.apply(first) == first  # masking the view again changes nothing


def test_trim_replies_trims_the_sdks_structured_messages_too() -> None:
    items = support_chat()
    items[3] = {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": LONG_REPLY, "annotations": []}],
    }
    trimmed = Mask(keep_last_turns=1, trim_replies=True).apply(items)[3]
    assert trimmed["content"] == [
        {
            "type": "output_text",
            "text": "… Your flight HAT001 departs on 2024-05-01 and the fare was $120. …",
            "annotations": [],
        }
    ]
    assert {k: v for k, v in trimmed.items() if k != "content"} == {
        k: v for k, v in items[3].items() if k != "content"
    }


def test_a_placeholder_with_kept_fields_is_not_masked_again() -> None:
    # Found through the Runner: the in-run input filter masks the session's view again,
    # and the kept fields were lost from outputs masked at an earlier turn.
    mask = Mask(keep_last_turns=1, keep_fields=SUPPORT_FIELDS, trim_replies=True)
    once = mask.apply(support_chat())
    assert mask.apply(once) == once


RENDERED: list[str] = []


class CountingMask(Mask):
    """A Mask that notes every placeholder it renders."""

    def placeholder(self, call: Any, output: Any = None, used: Any = ()) -> str:
        RENDERED.append(str(call.get("call_id")))
        return super().placeholder(call, output, used)


def test_a_keyed_read_decides_each_old_output_once_and_by_options_and_content() -> None:
    """Reads of a stack meet the same old outputs again: with their keys known, what
    masking makes of one is kept whole, so later reads render no placeholder; a change of
    options or of the output's content is a different answer, never the kept one."""
    from memstack.content_keys import content_key

    items = [*history(), user("later")]
    keys: list[bytes | None] = [content_key(item) for item in items]
    mask = CountingMask(min_chars=17)  # options no other test uses: a cold process cache
    RENDERED.clear()
    first, first_keys = mask.apply_keyed(items, keys)
    assert RENDERED  # the first read decided
    RENDERED.clear()
    assert mask.apply_keyed(items, keys) == (first, first_keys)
    assert RENDERED == []  # the second read reused every decision
    assert first == mask.apply(items)  # and decided as the keyless path does

    # Other options over the same keys: their own decisions (nothing masked here).
    assert outputs_of(Mask(min_chars=5000).apply_keyed(items, keys)[0]) == [BIG] * 3
    # Another output under c1's call: its own key, its own decision.
    changed = list(items)
    changed[3] = output("c1", "tiny")
    changed_keys = list(keys)
    changed_keys[3] = content_key(changed[3])
    assert outputs_of(mask.apply_keyed(changed, changed_keys)[0])[0] == "tiny"


def test_kept_rows_mask_as_a_fresh_read_does_as_the_history_grows():
    # Each read keeps its rows' facts and masked outputs (``session_id``); reads that
    # append, move on, reuse a call id for another call, or rewrite a row must mask
    # exactly as a read that keeps nothing.
    import hashlib

    from memstack import cache

    def key(item: dict[str, Any]) -> bytes:
        return hashlib.blake2b(json.dumps(item, sort_keys=True).encode(), digest_size=16).digest()

    items: list[dict[str, Any]] = []
    for n in range(12):
        items += [
            user(f"step {n}"),
            call(f"c{n % 5}", "read_file", path=f"{n}.py"),
            output(f"c{n % 5}"),
        ]
        if n % 3 == 2:
            items.append({"type": "reasoning", "id": f"r{n}", "summary": []})
            items.append({"role": "assistant", "content": f"done {n}"})
    cache.clear()
    for mask in (
        Mask(keep_last_turns=1, keep_last_outputs=2),
        Mask(keep_last_turns=0, keep_last_outputs=1, step=3),
    ):
        views = [items[:end] for end in range(1, len(items) + 1)]
        views += [
            items[5:],
            items[9:],
            items[9:-2],
            [output("c1", "other text " * 200), *items[3:]],
        ]
        for view in views:
            keys = [key(item) for item in view]
            kept = mask.apply_keyed(view, keys, session_id="s1")
            assert kept == mask.apply_keyed(view, keys), len(view)
            assert kept[0] == mask.apply(view)


def test_a_mask_is_hashable_so_its_policy_key_is_made_once() -> None:
    """Compaction keys its measure by the policies' reprs, kept per (trigger, mask): an
    unhashable mask made them again on every read and write."""
    from memstack.compaction.triggers import Tokens
    from memstack.layers.compaction.session import _policy_key, _reprs

    one = Mask(templates={"read": "[read {path}]"}, keep_fields={"get": ["id"]}, tools=["read"])
    same = Mask(templates={"read": "[read {path}]"}, keep_fields={"get": ["id"]}, tools=["read"])
    other = Mask(templates={"read": "[{path}]"}, keep_fields={"get": ["id"]}, tools=["read"])
    assert hash(one) == hash(same) and one == same and one != other
    trigger = Tokens(60_000, target=30_000)
    _policy_key(trigger, one)
    hits = _reprs.cache_info().hits
    assert _policy_key(trigger, same) == _policy_key(trigger, one) != _policy_key(trigger, other)
    assert _reprs.cache_info().hits == hits + 2


def test_drop_echoes_leaves_out_kept_members_that_repeat_their_key() -> None:
    profile = json.dumps(
        {
            "email": "mia@example.com",
            "payment_methods": {
                "gift_card_7359776": {"source": "gift_card", "amount": 39,
                                      "id": "gift_card_7359776"},
            },
        }
    )  # fmt: skip
    chat = [
        {"role": "user", "content": "Pay with my gift card"},
        call("u1", "get_user_details", user_id="mia_kim_4397"),
        output("u1", profile + " " * 200),
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Thanks."},
    ]
    fields = {"get_user_details": ["payment_methods"]}
    kept = Mask(keep_fields=fields).apply(chat)[2]["output"]
    short = Mask(keep_fields=fields, drop_echoes=True).apply(chat)[2]["output"]
    assert kept.count("gift_card_7359776") == 2
    assert short.endswith('"gift_card_7359776": {"source": "gift_card", "amount": 39}}')
    with pytest.raises(ConfigurationError, match="drop_echoes"):
        Mask(drop_echoes=1)  # type: ignore[arg-type]


def test_kept_intro_is_what_stands_between_the_placeholder_and_the_kept_fields() -> None:
    fields = {"get_reservation_details": ["payment_history"]}
    mask = Mask(
        default_template="[answered earlier, in part:]", kept_intro="\n", keep_fields=fields
    )
    placeholder = mask.apply(support_chat())[2]["output"]
    assert placeholder == (
        '[answered earlier, in part:]\n"payment_history": [{"payment_id": "credit_card_4421486", '
        '"amount": 120}]'
    )
    default = Mask(default_template="[answered earlier]", keep_fields=fields)
    assert " Kept from it, verbatim:\n" in default.apply(support_chat())[2]["output"]
    with pytest.raises(ConfigurationError, match="kept_intro"):
        Mask(kept_intro=3)  # type: ignore[arg-type]
