"""Hardening of the timeline contract: bounded JSON, finite numbers, events in order, errors instead of tracebacks."""

import json
import math
import time
from dataclasses import replace

import pytest
from test_timeline_format import good_events, make_timeline

from clocktune.actions import ActionParseError, parse_action, strict_json_loads
from clocktune.encoding.time_codecs import AbsBinsCodec, LogDeltaCodec, TextCodec
from clocktune.rendered_dataset import load_timeline_files
from clocktune.runtime.journal import JournalError, log_from_json
from clocktune.timeline import Event, LatencyModel, TimelineFormatError, timeline_to_json, validate_timeline
from clocktune.timeline.bounded_json import MAX_DEPTH, check_json_bounds, json_depth, loads_bounded
from clocktune.timeline.validate import validate_file
from data_gen.cli import main as datagen_main

DEEP = 10_000


def deep_array(depth: int) -> str:
    return "[" * depth + "]" * depth


def good_line() -> str:
    return timeline_to_json(make_timeline(good_events()))


def with_deep_arguments(line: str, depth: int = DEEP) -> str:
    # The arguments of event 3 as a JSON string holding an array nested ``depth`` deep.
    record = json.loads(line)
    record["events"][3]["arguments"] = deep_array(depth)
    return json.dumps(record)


def with_time(line: str, index: int, literal: str) -> str:
    # Python's json writes NaN and Infinity as bare literals; pydantic's dump cannot, so patch the text.
    record = json.loads(line)
    old = json.dumps(record["events"][index]["t"])
    marker = f'"id":"e{index}","t":{old}'
    assert marker in line
    return line.replace(marker, f'"id":"e{index}","t":{literal}')


def issues_of(events):
    return [(issue.field, issue.message) for issue in validate_timeline(make_timeline(events))]


# --- the bounded loader ---


def test_depth_is_measured_outside_strings_and_without_recursion():
    assert json_depth('{"a": [1, {"b": "[[[[{{{{"}]}') == 3
    assert json_depth(b'[["\\"]]]"]]') == 2  # an escaped quote does not end the string
    assert json_depth(deep_array(100_000)) == 100_000
    assert json_depth("3") == 0


def test_loads_bounded_accepts_the_limit_and_rejects_one_level_more():
    assert loads_bounded(deep_array(MAX_DEPTH)) is not None
    with pytest.raises(ValueError, match=f"nested deeper than {MAX_DEPTH}"):
        loads_bounded(deep_array(MAX_DEPTH + 1))
    with pytest.raises(ValueError, match="nested deeper than 100"):
        loads_bounded(deep_array(DEEP))


def test_loads_bounded_rejects_text_longer_than_the_limit():
    with pytest.raises(ValueError, match="longer than the limit of 10"):
        loads_bounded('"' + "x" * 20 + '"', max_chars=10)


def test_an_unterminated_string_full_of_escaped_quotes_is_scanned_in_linear_time():
    text = '["' + '\\"[' * 300_000
    start = time.perf_counter()
    check_json_bounds(text)  # the brackets are inside the (unterminated) string
    assert time.perf_counter() - start < 1.0
    with pytest.raises(ValueError):
        loads_bounded(text)


# --- deep nesting no longer kills the tools ---


def test_validate_reports_a_deep_arguments_string_and_two_other_bad_lines(tmp_path, capsys):
    backwards = json.loads(good_line())
    backwards["events"][5]["t"] = 0.1
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([with_deep_arguments(good_line()), json.dumps(backwards), good_line()[:70]]) + "\n")

    assert datagen_main(["validate", str(path)]) == 1
    captured = capsys.readouterr()
    assert f"{path}:1:events.3.arguments: Value error, JSON nested deeper than 100 levels" in captured.out
    assert f"{path}:2:events.5.t: time goes backwards" in captured.out
    assert f"{path}:3:-: not valid JSON" in captured.out
    assert "3 issue(s) on 3 of 3 timeline(s)" in captured.out
    assert "Traceback" not in captured.out + captured.err


def test_a_whole_line_nested_ten_thousand_deep_is_an_issue_of_that_line(tmp_path, capsys):
    path = tmp_path / "deep.jsonl"
    path.write_text(good_line() + "\n" + '{"id": ' + deep_array(DEEP) + "}\n")
    count, issues = validate_file(path)
    assert count == 2
    assert [(issue.line, issue.field) for issue in issues] == [(2, "-")]
    assert "nested deeper than 100" in issues[0].message

    assert datagen_main(["show", str(path), "--index", "1"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == f"{path}:2:-: not a timeline line (JSON nested deeper than 100 levels)"


def test_the_action_parser_rejects_deep_output_with_a_parse_error():
    with pytest.raises(ActionParseError, match="nested deeper than 100"):
        parse_action("<|modify|>" + '{"id": "c1", "arguments": ' + deep_array(DEEP) + "}<|im_end|>", "qwen2.5")
    with pytest.raises(ValueError, match="nested deeper"):
        strict_json_loads(deep_array(DEEP))


def test_a_deep_journal_line_is_a_journal_error_naming_the_line():
    with pytest.raises(JournalError, match="runs/x.jsonl:7: .*nested deeper than 100"):
        log_from_json('{"index": ' + deep_array(DEEP) + "}", "runs/x.jsonl", 7)


# --- numbers that make sense ---


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_time_in_a_file_is_an_issue_of_that_event(tmp_path, literal):
    path = tmp_path / "t.jsonl"
    path.write_text(with_time(good_line(), 3, literal) + "\n")
    _, issues = validate_file(path)
    assert [(issue.line, issue.field) for issue in issues] == [(1, "events.3.t")]
    assert issues[0].message.startswith("must be finite")


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_non_finite_time_in_memory_is_an_issue_and_does_not_hide_order(value):
    events = good_events()
    events[3] = replace(events[3], t=value)
    events[5] = replace(events[5], t=0.1)
    found = issues_of(events)
    assert ("events.3.t", f"must be finite, got {value!r}") in found
    assert any(field == "events.5.t" and "backwards" in message for field, message in found), found


def test_latency_numbers_must_be_finite_and_in_range():
    timeline = make_timeline(good_events())
    timeline.tools[0] = replace(timeline.tools[0], latency=LatencyModel(median_s=math.inf, tail_prob=1.5))
    timeline.tools[1] = replace(
        timeline.tools[1], latency=LatencyModel(sigma=1e6, tail_scale=0.5, failure_rate=math.nan)
    )
    found = {issue.field: issue.message for issue in validate_timeline(timeline)}
    assert found == {
        "tools.0.latency.median_s": "must be finite, got inf",
        "tools.0.latency.tail_prob": "must be in [0.0, 1.0], got 1.5",
        "tools.1.latency.sigma": "must be in [0.0, 3.0], got 1000000.0",  # exp() of a draw would overflow
        "tools.1.latency.tail_scale": "must be in [1.0, 100.0], got 0.5",
        "tools.1.latency.failure_rate": "must be finite, got nan",
    }


def test_a_non_finite_latency_in_a_file_is_an_issue_of_that_field(tmp_path):
    path = tmp_path / "t.jsonl"
    line = good_line()
    assert '"sigma":0.45' in line
    path.write_text(line.replace('"sigma":0.45', '"sigma":NaN', 1) + "\n")
    _, issues = validate_file(path)
    assert [(issue.field, issue.message) for issue in issues] == [("tools.0.latency.sigma", "must be finite, got nan")]


def test_a_broken_parameter_schema_is_an_issue_not_a_traceback():
    timeline = make_timeline(good_events())
    timeline.tools[0] = replace(timeline.tools[0], parameters={"type": "object", "properties": {"city": {"type": 5}}})
    found = [(issue.field, issue.message) for issue in validate_timeline(timeline)]
    assert [field for field, _ in found] == ["tools.0.parameters"]
    assert "not a valid JSON Schema" in found[0][1]


# --- events in order ---


def test_a_final_answer_before_any_user_chunk_is_an_issue():
    events = [
        Event("early", 0.1, "say", "agent", text="Done.", final=True),
        *(replace(event, t=event.t + 0.2) for event in good_events()),
    ]
    assert issues_of(events) == [("events.0.final", "final answer before any final user chunk of its turn")]


def test_a_final_answer_while_the_turn_is_still_spoken_is_an_issue():
    events = good_events()
    events.insert(6, Event("x", 1.4, "say", "agent", text="Booked.", final=True))
    assert ("events.6.final", "final answer before any final user chunk of its turn") in issues_of(events)


def test_a_second_final_answer_needs_a_new_user_turn():
    events = [*good_events(), Event("x", 3.0, "say", "agent", text="Again.", final=True)]
    assert issues_of(events) == [("events.11.final", "final answer before any final user chunk of its turn")]
    events.insert(11, Event("u", 2.9, "user_chunk", "user", text="thanks", final=True))
    assert issues_of(events) == []


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (Event("x", 3.0, "tool_modify", "agent", call_id="c9", arguments={"city": "Rome"}), "was never issued"),
        (Event("x", 3.0, "tool_cancel", "agent", call_id="c9"), "was never issued"),
        (Event("x", 3.0, "tool_result", "tool", call_id="c9", content={}), "result for unknown call id 'c9'"),
    ],
)
def test_modify_cancel_and_result_address_only_known_calls(event, message):
    found = issues_of([*good_events(), event])
    assert any(field == "events.11.call_id" and message in text for field, text in found), found


# --- empty inputs ---


def test_an_empty_file_and_an_empty_folder_fail_validation(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    folder = tmp_path / "nothing"
    folder.mkdir()
    assert datagen_main(["validate", str(empty)]) == 1
    assert f"{empty}:0:-: no timelines in {empty}" in capsys.readouterr().out
    assert datagen_main(["validate", str(folder)]) == 1
    assert f"{folder}:0:-: no timelines in {folder}" in capsys.readouterr().out
    assert datagen_main(["show", str(empty)]) == 1
    assert capsys.readouterr().err.strip() == f"{empty}:0:-: no timelines in {empty}"


# --- loading for render, train and eval validates ---


def test_loading_rejects_a_nan_final_chunk_naming_file_line_and_field(tmp_path):
    path = tmp_path / "nan.jsonl"
    path.write_text(good_line() + "\n" + with_time(good_line(), 6, "NaN") + "\n")
    with pytest.raises(TimelineFormatError) as error:
        load_timeline_files([path])
    assert [str(issue) for issue in error.value.issues] == [f"{path}:2:events.6.t: must be finite, got nan"]


def test_loading_rejects_a_modify_of_an_unknown_call_naming_file_line_and_field(tmp_path):
    record = json.loads(good_line())
    modify = dict(record["events"][5], id="m", kind="tool_modify", call_id="c42", arguments='{"city":"Rome"}')
    record["events"].insert(6, modify)
    path = tmp_path / "modify.jsonl"
    path.write_text(good_line() + "\n" + json.dumps(record) + "\n")
    with pytest.raises(TimelineFormatError) as error:
        load_timeline_files([path])
    assert [str(issue) for issue in error.value.issues] == [
        f"{path}:2:events.6.call_id: tool_modify of 'c42', which was never issued"
    ]


def test_loading_valid_files_returns_every_timeline(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text((good_line() + "\n") * 3)
    assert len(load_timeline_files([tmp_path])) == 3


# --- the time codecs ---


@pytest.mark.parametrize("codec", [TextCodec(), AbsBinsCodec(), LogDeltaCodec()], ids=lambda codec: codec.name)
@pytest.mark.parametrize("value", [math.inf, math.nan])
def test_the_time_codecs_reject_a_non_finite_time_with_a_value_error(codec, value):
    with pytest.raises(ValueError, match=f"got {value!r}"):
        codec.encode(value)
    with pytest.raises(ValueError, match="previous event time"):
        codec.encode(1.0, prev_t=-math.inf)
