"""The readings of the earliest determinable point: relative dates, clock times, enum members and counted nouns.

``tests/fixtures/determinable_readings.jsonl`` holds conversations written for these readings (at least six for
each, adversarial ones among them: a corrected date, a time whose part of the day comes later, an enum word used in
another sense, a bare number before the counted one). Each names, per call, the word of its turn at which a careful
listener knows every argument (``expect``; ``"end"`` when not before the end of speech).
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from clocktune.runtime.play import run_policy
from clocktune.runtime.scripted import ScriptedPolicy
from clocktune.runtime.session import SessionConfig
from clocktune.timeline import read_timelines
from clocktune.timeline.events import ArgumentPlacement, LatencyModel
from data_gen.backends import make_backend
from data_gen.cli import main as datagen_main
from data_gen.determinable import Setting, Utterance, place
from data_gen.importers.chat import import_chat
from data_gen.importers.chat.conversation import parse_conversation
from data_gen.importers.chat.placement import build_task
from data_gen.readings.clock_times import clock_time

FIXTURE = Path(__file__).parent / "fixtures" / "determinable_readings.jsonl"
ROWS = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
MONDAY = datetime.date(2026, 3, 9)


def placed(row: dict) -> dict[str, int | str]:
    """Where the importer places each call of a fixture row: the words heard, or "end"."""
    conversation, issues = parse_conversation(row, row["id"], LatencyModel(), str(FIXTURE), 0)
    assert not issues, issues
    task = build_task(conversation, "fixture")
    return {placement.key: "end" if placement.at_word is None else placement.at_word for placement in task.placements}


def test_the_fixture_has_six_conversations_for_each_reading_two_of_them_adversarial():
    for reading in ("relative_date", "clock_time", "enum", "counted"):
        rows = [row for row in ROWS if row["reading"] == reading]
        assert len(rows) >= 6 and sum(row["adversarial"] for row in rows) >= 2, reading


@pytest.mark.parametrize("row", ROWS, ids=[row["id"] for row in ROWS])
def test_each_call_is_placed_where_a_careful_listener_knows_its_arguments(row):
    assert placed(row) == row["expect"]


def test_no_call_of_the_fixture_is_placed_before_its_values_are_settled():
    early = [
        (row["id"], key, at)
        for row in ROWS
        for key, at in placed(row).items()
        if at != "end" and (row["expect"][key] == "end" or at < row["expect"][key])
    ]
    assert early == []


def _heard(text: str, arguments: dict, parameters: dict | None = None, anchor=MONDAY, names=None):
    placement = place(arguments, Utterance.of(text), None, Setting(anchor, parameters or {}, names or {}))
    return placement.at_word, {
        reason.path: (reason.kind, reason.at_word, reason.words) for reason in placement.reasons
    }


def test_relative_dates_are_read_against_the_anchor():
    # Monday 2026-03-09.
    assert _heard("dinner tomorrow please", {"date": "2026-03-10"})[1]["date"] == ("date", 2, "tomorrow")
    assert _heard("the day after tomorrow", {"date": "2026-03-11"})[0] == 4
    assert _heard("the day after tomorrow", {"date": "2026-03-10"})[0] is None  # not "tomorrow" alone
    assert _heard("this Friday works", {"date": "2026-03-13"})[0] == 2
    assert _heard("next Friday works", {"date": "2026-03-20"})[0] == 2  # either Friday may be meant
    assert _heard("in two weeks", {"date": "2026-03-23"})[0] == 3
    assert _heard("a week from today", {"date": "2026-03-16"})[0] == 4
    assert _heard("on the 15th please", {"date": "2026-03-15"})[0] == 3
    assert _heard("on the 3rd please", {"date": "2026-04-03"})[0] == 3  # the 3rd has passed in March
    assert _heard("the 3rd floor on Friday", {"date": "2026-03-03"})[0] is None  # not a date before a noun
    assert _heard("the 3rd of next month", {"date": "2026-04-03"})[0] == 5


def test_a_date_is_its_weekday_name_only_without_an_anchor():
    # With the anchor Monday 2026-03-09, "Monday" is the 16th, not the 23rd; without one any Monday was heard.
    assert _heard("see you Monday", {"date": "2026-03-23"})[0] is None
    assert _heard("see you Monday", {"date": "2026-03-23"}, anchor=None)[0] == 3


def test_a_stay_of_n_nights_settles_the_check_out_date_once_the_check_in_is_heard():
    at, reasons = _heard("from Friday for three nights", {"check_in": "2026-03-13", "check_out": "2026-03-16"})
    assert at == 5 and reasons["check_out"] == ("nights", 5, "three nights")


def test_a_corrected_or_negated_mention_does_not_settle_a_value():
    assert _heard("Friday, no sorry, Saturday", {"date": "2026-03-14"})[0] == 4
    assert _heard("Friday, no sorry, Saturday", {"date": "2026-03-13"})[0] is None  # taken back
    assert _heard("not Friday, Saturday", {"date": "2026-03-13"})[0] is None
    assert _heard("tomorrow, no, Thursday, no, tomorrow is fine", {"date": "2026-03-10"})[0] == 5


def test_clock_times_wait_for_the_part_of_the_day():
    assert _heard("at 6:30 pm", {"time": "18:30"})[0] == 3
    assert _heard("at 6:30 please", {"time": "18:30"})[0] is None
    assert _heard("at 6:30 please", {"time": "06:30"})[0] is None
    assert _heard("half past six in the evening", {"time": "18:30"})[0] == 6
    assert _heard("quarter to eight tonight", {"time": "19:45"})[0] == 4
    assert _heard("seven o'clock in the morning", {"time": "07:00"})[0] == 5
    assert _heard("at noon", {"time": "12:00"})[0] == 2
    assert _heard("at 18:30 sharp", {"time": "18:30"})[0] == 2
    assert _heard("at 6, no, 7 pm", {"time": "19:00"})[0] == 5
    assert _heard("at six thirty for two, in the evening", {"time": "18:30"})[0] == 8


CABINS = {
    "type": "object",
    "properties": {"cabin_class": {"enum": ["ECONOMY", "PREMIUM_ECONOMY", "BUSINESS", "FIRST"]}},
}
SORT = {
    "type": "object",
    "properties": {
        "sort": {
            "enum": ["rating_desc", "price_asc"],
            "description": "rating_desc: best rated first; price_asc: cheapest first",
        }
    },
}


def test_enum_members_are_heard_by_their_words_their_noun_or_their_cue():
    assert _heard("fly business class", {"cabin_class": "BUSINESS"}, CABINS)[0] == 3
    assert _heard("in economy, please", {"cabin_class": "ECONOMY"}, CABINS)[0] == 2
    assert _heard("premium economy please", {"cabin_class": "PREMIUM_ECONOMY"}, CABINS)[0] == 2
    assert _heard("premium economy please", {"cabin_class": "ECONOMY"}, CABINS)[0] is None
    assert _heard("first, a seat in first class", {"cabin_class": "FIRST"}, CABINS)[0] == 6
    assert _heard("after the business meeting", {"cabin_class": "BUSINESS"}, CABINS)[0] is None
    assert _heard("best rated first please", {"sort": "rating_desc"}, SORT)[0] == 3
    assert _heard("not cheapest first, best rated first", {"sort": "rating_desc"}, SORT)[0] == 6


def test_an_identifier_is_heard_by_the_name_an_earlier_result_gave_it():
    names = {(str, "H-4412"): ["Grand Plaza"]}
    assert _heard("book the Grand Plaza tonight", {"hotel_id": "H-4412"}, names=names)[1]["hotel_id"] == (
        "name",
        4,
        "Grand Plaza",
    )


def test_counts_are_heard_before_the_noun_an_argument_is_named_for():
    at, reasons = _heard("two nights, two adults and a child", {"adults": 2, "children": 1})
    assert reasons["adults"] == ("count", 4, "two adults") and reasons["children"] == ("count", 7, "a child")
    assert _heard("a couple of rooms", {"rooms": 2})[0] == 4
    assert _heard("a table for four", {"party_size": 4})[0] == 4
    assert _heard("with a few kids", {"children": 1})[0] is None
    assert _heard("two rooms, no, make it three rooms", {"rooms": 3})[0] == 7


def test_a_clock_time_value_is_recognised_in_24_hour_form():
    assert clock_time("18:30") == "18:30" and clock_time("7:05") == "07:05" and clock_time("18:30:00") == "18:30"
    assert clock_time("25:00") is None and clock_time("1830") is None


def test_today_inside_a_week_from_today_is_not_today():
    assert _heard("a week from today", {"date": "2026-03-09"})[0] is None


def test_import_chat_records_why_each_call_was_placed_reports_each_kind_and_lists_the_rows_left_at_the_end(
    tmp_path, capsys
):
    source = tmp_path / "rows.jsonl"
    chosen = [row for row in ROWS if row["id"] in ("date-tomorrow", "time-bare-hour", "count-child")]
    source.write_text("".join(json.dumps(row) + "\n" for row in chosen))
    out = tmp_path / "chat"
    assert datagen_main(["import-chat", str(source), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    # "at seven" waits for the end; "two adults and a child" is settled by its last word, the end too.
    assert "argument kind" in printed and "2 conversation(s) with every call at the end of speech" in printed
    table = [line.split() for line in printed.splitlines()]
    assert ["time", "0", "1"] in table and ["date", "1", "0"] in table and ["count", "0", "1"] in table
    left = [json.loads(line) for line in (out / "calls_at_end.jsonl").read_text().splitlines()]
    assert [row["id"] for row in left] == ["time-bare-hour", "count-child"]
    assert left[0]["placements"][0]["at_word"] is None and left[1]["placements"][0]["at_word"] == 10
    timelines = read_timelines(out / "data" / "train-00000-of-00001.jsonl")
    assert timelines[0].id == "date-tomorrow"
    assert timelines[0].placements[0].arguments[-1] == ArgumentPlacement("date", "date", 9, "tomorrow", "date")
    assert datagen_main(["show", str(out / "data" / "train-00000-of-00001.jsonl"), "--index", "0"]) == 0
    assert "t0c0 search_flights: turn 0, word 9 of 13: " in capsys.readouterr().out


def test_the_fixture_imports_and_the_oracle_and_teachers_replay_it_at_accuracy_one(tmp_path):
    result = import_chat(FIXTURE, tmp_path / "readings", seed=0)
    timelines = read_timelines(result["path"])
    assert len(timelines) == len(ROWS)
    for name in ("oracle", "speculative", "sync"):
        run = run_policy(name, timelines, lambda t, n=name: ScriptedPolicy(t, n), make_backend, SessionConfig())
        assert [r.failure for r in run.results] == [None] * len(timelines), name
        assert sum(r.accurate for r in run.results) == len(timelines), name
    # Calls the readings settle before the end of speech are issued before it: the speculative teacher's first call
    # of "date-tomorrow" comes before the user's last chunk.
    tomorrow = next(timeline for timeline in timelines if timeline.id == "date-tomorrow")
    first_call = next(event.t for event in tomorrow.events if event.kind == "tool_call")
    last_chunk = max(event.t for event in tomorrow.events if event.kind == "user_chunk")
    assert first_call < last_chunk


def test_an_identifier_named_for_a_thing_is_not_a_count_of_it():
    # BFCL's ticket_id: "a ticket" is not ticket 1.
    assert _heard("open a ticket for me, number 1", {"ticket_id": 1})[1]["ticket_id"][0] == "literal"
    assert _heard("a table for 4", {"party_size": 4})[1]["party_size"][0] == "count"
