"""The timeline format: serialisation, schema, and the validator's rules with file:line:field errors."""

import json
from dataclasses import replace

import pytest

from clocktune.timeline import (
    Event,
    GroundTruth,
    GroundTruthCall,
    Timeline,
    TimelineFormatError,
    ToolSchema,
    read_timelines,
    timeline_from_json,
    timeline_json_schema,
    timeline_to_json,
    validate_file,
    validate_timeline,
    write_timelines,
)
from data_gen.cli import main as datagen_main

LOOKUP = ToolSchema(
    "lookup",
    "Looks a city up.",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    side_effect=False,
)
BOOK = ToolSchema(
    "book",
    "Books an id.",
    {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"], "additionalProperties": False},
    side_effect=True,
)


def make_timeline(events: list[Event]) -> Timeline:
    return Timeline(
        id="t0",
        domain="test",
        task="dependent",
        seed=1,
        teacher="speculative",
        tools=[LOOKUP, BOOK],
        initial_state={"bookings": []},
        ground_truth=GroundTruth([GroundTruthCall("lookup", {"city": "Oslo"})], {"bookings": ["x1"]}, ["x1"]),
        events=events,
    )


def good_events() -> list[Event]:
    return [
        Event("e0", 0.5, "user_chunk", "user", text="look up", final=False),
        Event("e1", 0.9, "user_chunk", "user", text="Osl", final=False),
        Event("e2", 1.1, "user_chunk", "user", text="Oslo", final=False, revises="e1"),
        Event("e3", 1.11, "tool_call", "agent", call_id="c1", name="lookup", arguments={"city": "Oslo"}),
        Event("e4", 1.2, "tool_call", "agent", call_id="c2", name="book", arguments={"id": {"$ref": "c1.best.id"}}),
        Event("e5", 1.3, "wait", "agent"),
        Event("e6", 1.5, "user_chunk", "user", text="and book it", final=True),
        Event("e7", 1.51, "commit", "agent"),
        Event("e8", 1.9, "tool_result", "tool", call_id="c1", content={"best": {"id": "x1"}}),
        Event("e9", 2.4, "tool_result", "tool", call_id="c2", content={"ok": True}),
        Event("e10", 2.41, "say", "agent", text="Booked x1.", final=True),
    ]


def issues_of(events):
    return [(issue.field, issue.message) for issue in validate_timeline(make_timeline(events))]


def test_round_trip_keeps_every_field_and_stores_payloads_as_strings():
    timeline = make_timeline(good_events())
    line = timeline_to_json(timeline)
    record = json.loads(line)
    assert isinstance(record["events"][3]["arguments"], str)
    assert isinstance(record["tools"][0]["parameters"], str)
    # Every event carries every key, so an Arrow schema inferred from any shard is the same.
    assert len({tuple(event) for event in record["events"]}) == 1
    assert timeline_from_json(line) == timeline


def test_valid_timeline_has_no_issues():
    assert issues_of(good_events()) == []


def test_json_schema_accepts_a_line():
    import jsonschema

    schema = timeline_json_schema()
    jsonschema.validate(json.loads(timeline_to_json(make_timeline(good_events()))), schema)
    assert set(schema["$defs"]) >= {"Event", "ToolSchema", "GroundTruth"}


@pytest.mark.parametrize(
    ("mutate", "field", "words"),
    [
        (lambda ev: ev.__setitem__(5, replace(ev[5], t=0.1)), "events.5.t", "backwards"),
        (lambda ev: ev.__setitem__(5, replace(ev[5], id="e0")), "events.5.id", "duplicate"),
        (lambda ev: ev.__setitem__(8, replace(ev[8], call_id="c9")), "events.8.call_id", "unknown call"),
        (lambda ev: ev.__setitem__(3, replace(ev[3], name="fly")), "events.3.name", "unknown tool"),
        (lambda ev: ev.__setitem__(3, replace(ev[3], arguments={"town": "Oslo"})), "events.3.arguments", "town"),
        (lambda ev: ev.__setitem__(4, replace(ev[4], arguments={"id": {"$ref": "c7"}})), "events.4.arguments", "$ref"),
        (lambda ev: ev.__setitem__(5, replace(ev[5], source="user")), "events.5.source", "wait comes from agent"),
        (lambda ev: ev.__setitem__(2, replace(ev[2], revises="e9")), "events.2.revises", "revises"),
        (lambda ev: ev.insert(7, Event("x", 1.5, "tool_cancel", "agent", call_id="c5")), "events.7.call_id", "never"),
        (lambda ev: ev.__setitem__(7, replace(ev[7], kind="wait")), "events.9.call_id", "before its commit"),
        (lambda ev: ev.insert(6, Event("x", 1.3, "commit", "agent")), "events.6.kind", "still speaking"),
        (lambda ev: ev.__setitem__(6, replace(ev[6], final=False)), "events.10", "no final chunk"),
        (
            lambda ev: ev.append(Event("x", 3.0, "tool_modify", "agent", call_id="c2", arguments={"id": "y"})),
            "events.11.call_id",
            "executed",
        ),
        (
            lambda ev: ev.append(Event("x", 3.0, "tool_result", "tool", call_id="c1", content={})),
            "events.11.call_id",
            "second result",
        ),
        (lambda ev: ev.__setitem__(8, replace(ev[8], error="boom")), "events.8.content", "exactly one"),
    ],
)
def test_validator_names_field_of_each_violation(mutate, field, words):
    events = good_events()
    mutate(events)
    found = issues_of(events)
    assert any(f == field and words in message for f, message in found), found


def test_modify_reruns_the_call_and_its_read_only_dependents():
    events = [
        Event("e0", 0.5, "user_chunk", "user", text="weather where", final=False),
        Event("e1", 0.6, "tool_call", "agent", call_id="c1", name="lookup", arguments={"city": "Oslo"}),
        Event("e2", 0.7, "tool_call", "agent", call_id="c2", name="lookup", arguments={"city": {"$ref": "c1.near"}}),
        Event("e3", 1.2, "tool_result", "tool", call_id="c1", content={"near": "Moss"}),
        Event("e4", 1.7, "tool_result", "tool", call_id="c2", content={"ok": 1}),
        Event("e5", 1.8, "user_chunk", "user", text="Bergen is", final=True),
        Event("e6", 1.9, "tool_modify", "agent", call_id="c1", arguments={"city": "Bergen"}),
        Event("e7", 2.4, "tool_result", "tool", call_id="c1", content={"near": "Voss"}),
        Event("e8", 2.9, "tool_result", "tool", call_id="c2", content={"ok": 2}),
        Event("e9", 3.0, "say", "agent", text="ok", final=True),
    ]
    assert issues_of(events) == []
    # Without the modify, the second results are errors.
    del events[6]
    assert [field for field, message in issues_of(events) if "second result" in message] == [
        "events.6.call_id",
        "events.7.call_id",
    ]


def test_ground_truth_must_match_tools():
    timeline = make_timeline(good_events())
    timeline.ground_truth.calls.append(GroundTruthCall("lookup", {"city": 3}))
    timeline.ground_truth.calls.append(GroundTruthCall("teleport", {}))
    fields = [issue.field for issue in validate_timeline(timeline)]
    assert "ground_truth.calls.1.arguments.city" in fields
    assert "ground_truth.calls.2.name" in fields


def test_read_reports_every_bad_line(tmp_path):
    path = tmp_path / "t.jsonl"
    good = timeline_to_json(make_timeline(good_events()))
    path.write_text("\n".join([good, good[:50], good, good.replace('"t":0.5', '"t":"soon"')]) + "\n")
    with pytest.raises(TimelineFormatError) as error:
        read_timelines(path)
    assert [(issue.line, issue.field) for issue in error.value.issues] == [(2, "-"), (4, "events.0.t")]


def test_validate_cli_names_all_three_bad_lines(tmp_path, capsys):
    good = make_timeline(good_events())
    backwards = make_timeline(good_events())
    backwards.events[5] = replace(backwards.events[5], t=0.2)
    unknown = make_timeline(good_events())
    unknown.events[8] = replace(unknown.events[8], call_id="c42")
    path = tmp_path / "bad.jsonl"
    write_timelines(path, [good, backwards, good, unknown])
    lines = path.read_text().splitlines()
    lines[2] = lines[2][: len(lines[2]) // 2]  # a truncated line
    path.write_text("\n".join(lines) + "\n")

    assert datagen_main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{path}:2:events.5.t: time goes backwards" in out
    assert f"{path}:3:-: not valid JSON" in out
    assert f"{path}:4:events.8.call_id: result for unknown call id 'c42'" in out
    assert "3 issue(s) on 3 of 4 timeline(s)" in out
    assert "Traceback" not in out


def test_validate_file_counts_good_file(tmp_path):
    path = tmp_path / "ok.jsonl"
    write_timelines(path, [make_timeline(good_events())] * 3)
    assert validate_file(path) == (3, [])


def test_atomic_writer_leaves_no_partial_file(tmp_path):
    path = tmp_path / "x.jsonl"

    def broken():
        yield make_timeline(good_events())
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_timelines(path, broken())
    assert list(tmp_path.iterdir()) == []
