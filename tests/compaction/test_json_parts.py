"""JSON answers cut at their own seams (json_parts) and old replies trimmed (replies)."""

from __future__ import annotations

import json

import pytest

from memstack.bench.in_context import normalized, shown_in_context
from memstack.compaction import Mask
from memstack.compaction.json_parts import field_parts, field_runs, field_table, json_parts
from memstack.compaction.replies import trimmed_reply
from memstack.errors import ConfigurationError

RESERVATION = json.dumps(
    {
        "reservation_id": "4WQ150",
        "user_id": "chen_jackson_3290",
        "flights": [
            {"origin": "JFK", "destination": "SEA", "flight_number": "HAT001", "date": "2024-05-01",
             "price": 120},
            {"origin": "SEA", "destination": "JFK", "flight_number": "HAT002", "date": "2024-05-03",
             "price": 95},
        ],
        "payment_history": [{"payment_id": "credit_card_4421486", "amount": 215}],
        "insurance": "no",
    }
)  # fmt: skip


def test_every_part_is_the_original_text_and_together_they_cover_the_answer() -> None:
    parts = json_parts(RESERVATION, width=120)
    assert [path for path, _ in parts] == [
        "reservation_id",
        "user_id",
        "flights[0]",
        "flights[1]",
        "payment_history",
        "insurance",
    ]
    assert all(part in RESERVATION for _, part in parts)
    # what no part holds: separators, and the key of the member that was cut up
    rest = _without(RESERVATION, [p for _, p in parts]).replace('"flights": ', "")
    assert set(rest) <= set(" ,{}[]")


def _without(text: str, parts: list[str]) -> str:
    for part in parts:
        text = text.replace(part, "", 1)
    return text


def test_a_long_member_is_cut_into_its_members_and_a_long_string_stays_whole() -> None:
    text = json.dumps({"notes": "x" * 300, "seats": {"economy": 3, "business": 1}})
    assert json_parts(text, width=20) == [
        ("notes", f'"notes": "{"x" * 300}"'),
        ("seats.economy", '"economy": 3'),
        ("seats.business", '"business": 1'),
    ]


@pytest.mark.parametrize("text", ["", "Transfer successful", "12.0", '{"a": 1} trailing', "{oops"])
def test_text_that_is_not_one_json_object_or_array_has_no_parts(text: str) -> None:
    assert json_parts(text) == []


def test_a_top_level_list_gives_one_part_per_element() -> None:
    flights = json.dumps([{"flight_number": f"HAT{n:03}", "price": 100 + n} for n in range(3)])
    assert [path for path, _ in json_parts(flights)] == ["[0]", "[1]", "[2]"]


def test_kept_fields_are_shown_in_context_and_the_rest_is_left_out() -> None:
    runs = field_runs(RESERVATION, ["flights", "payment_history"], width=120)
    kept = "\n".join(runs)
    assert "chen_jackson_3290" not in kept and "insurance" not in kept
    holder = normalized(RESERVATION)
    for token in ("HAT001", "2024-05-03", "credit_card_4421486", "215"):
        assert shown_in_context(token, [holder], normalized(kept)), token
    # the two flights stood side by side: one stretch, as written
    assert len(runs) == 2 and all(run in RESERVATION for run in runs)
    assert runs[0].count("flight_number") == 2
    assert [p for p, _ in field_parts(RESERVATION, ["flights"], width=120)] == [
        "flights[0]",
        "flights[1]",
    ]


def test_the_field_table_is_checked() -> None:
    assert field_table({"get_order": ["items"]}, owner="Mask") == {"get_order": ("items",)}
    assert field_table(None, owner="Mask") == {}
    for bad in ({"get_order": "items"}, ["items"], {"get_order": [""]}, {"get_order": [1]}):
        with pytest.raises(ConfigurationError, match="keep_fields"):
            field_table(bad, owner="Mask")


REPLY = (
    "Thank you for your patience! I have looked into everything for you. "
    "Your flight HAT056 from EWR to IAH departs on 2024-05-25 and costs $155.\n\n"
    "- **Reservation ID**: FQ8APE\n"
    "- **Cabin**: Economy\n\n"
    "If you need further assistance or have any other requests, please let me know!"
)


def test_a_trimmed_reply_keeps_the_sentences_with_names_verbatim() -> None:
    short = trimmed_reply(REPLY)
    assert short is not None and len(short) < len(REPLY) / 1.5
    assert "Thank you for your patience" not in short and "let me know" not in short
    holder = normalized(REPLY)
    for token in ("HAT056", "2024-05-25", "FQ8APE"):
        assert shown_in_context(token, [holder], normalized(short)), token
    assert short.startswith("… ") and short.endswith(" …")


def test_a_reply_without_names_keeps_its_first_sentence_and_a_short_one_stays() -> None:
    assert trimmed_reply("I cannot change that. Anything else I can do for you today?") == (
        "I cannot change that. …"
    )
    assert trimmed_reply("Done: HAT001 is booked.") is None  # nothing would go
    assert trimmed_reply("") is None


def test_a_star_index_keeps_those_members_of_every_element_and_a_short_element_whole() -> None:
    flight = {
        "flight_number": "HAT169", "origin": "DTW", "destination": "JFK",
        "departure": "04:00:00", "status": "available",
        "seats": {"economy": 12, "business": 19}, "prices": {"economy": 171, "business": 294},
        "note": "x" * 80,
    }  # fmt: skip
    text = json.dumps([flight, {"flight_number": "HAT002", "prices": {"economy": 9}}])
    runs = field_runs(text, ["[*].flight_number", "[*].origin", "[*].destination", "[*].prices"])
    assert runs == [
        '"flight_number": "HAT169", "origin": "DTW", "destination": "JFK"',
        '"prices": {"economy": 171, "business": 294}',
        '{"flight_number": "HAT002", "prices": {"economy": 9}}',  # one part: kept whole
    ]
    nested = json.dumps([[flight, flight]])  # a list of lists (one-stop connections)
    prices = '"prices": {"economy": 171, "business": 294}'
    assert field_runs(nested, ["[*][*].prices"]) == [prices, prices]
    assert field_runs(nested, ["[*].prices"]) == []  # a star stands for one index, not two
    inside = json.dumps({"flights": [flight]})
    assert field_runs(inside, ["flights[*].origin"]) == ['"origin": "DTW"']


def test_a_star_field_in_a_list_short_enough_to_be_one_part_keeps_that_list_whole() -> None:
    """A search with one or two small results: the list (or one pair of a one-stop list)
    is one part, and holds the field; it is kept whole, not dropped (found in review)."""
    small = [{"flight_number": "HAT1", "dep": "08:00"}]
    text = json.dumps({"flights": small, "note": "n" * 200})
    assert field_runs(text, ["flights[*].flight_number"]) == [f'"flights": {json.dumps(small)}']
    pairs = [
        [{"flight_number": "A1", "p": 1}, {"flight_number": "A2", "p": 2}],
        [{"flight_number": "B1", "x": "y" * 200}, {"flight_number": "B2"}],
    ]
    kept = field_runs(json.dumps(pairs), ["[*][*].flight_number"])
    assert kept[0] == json.dumps(pairs[0])  # the short pair, whole
    assert '"flight_number": "B1"' in kept[1] and "y" * 50 not in "".join(kept)
    mask = Mask(
        default_template="[answered earlier]", keep_fields={"search": ["flights[*].flight_number"]}
    )
    call = {"type": "function_call", "call_id": "c", "name": "search", "arguments": "{}"}
    out = {"type": "function_call_output", "call_id": "c", "output": text}
    assert "HAT1" in mask.placeholder(call, out)


PROFILE = json.dumps(
    {
        "name": {"first_name": "Mia", "last_name": "Kim"},
        "payment_methods": {
            "gift_card_7359776": {"source": "gift_card", "amount": 39, "id": "gift_card_7359776"},
            "credit_card_4421486": {"source": "credit_card", "brand": "visa",
                                    "last_four": "7447", "id": "credit_card_4421486"},
            "certificate_1": {"id": "certificate_1", "amount": 100},
        },
        "reservations": ["C4GP7M", "XL2C75"],
    }
)  # fmt: skip


def test_dropping_echoes_leaves_out_a_member_that_repeats_its_objects_key() -> None:
    runs = field_runs(PROFILE, ["payment_methods", "reservations"], drop_echoes=True)
    kept = "\n".join(runs)
    assert kept.count("gift_card_7359776") == 1 and kept.count("credit_card_4421486") == 1
    assert '"gift_card_7359776": {"source": "gift_card", "amount": 39}' in kept
    assert '"credit_card_4421486": {"source": "credit_card", "brand": "visa"' in kept
    # a first member stays: the key's text runs on into it
    assert '"certificate_1": {"id": "certificate_1", "amount": 100}' in kept
    # every name is still shown with its original surroundings
    holder = normalized(PROFILE)
    for token in ("gift_card_7359776", "39", "credit_card_4421486", "7447", "certificate_1"):
        assert shown_in_context(token, [holder], normalized(kept)), token
    # without the option the runs are the original text, echoes and all
    assert field_runs(PROFILE, ["payment_methods"]) == [
        PROFILE[PROFILE.index('"gift_card_7359776"') : PROFILE.index(', "reservations"') - 1]
    ]


def test_dropping_echoes_leaves_a_member_equal_to_another_key_alone() -> None:
    text = json.dumps({"a": {"x": "b", "y": 1}, "b": {"x": "a", "y": 2}})
    assert field_runs(text, ["a", "b"], drop_echoes=True) == field_runs(text, ["a", "b"])
    assert field_runs("[1, 2]", ["[*]"], drop_echoes=True) == ["1, 2"]
