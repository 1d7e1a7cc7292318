"""Importing tool-calling conversations (``messages`` + ``tools``) as timelines, and the determinability rule.

The conversations come from ``examples/conversations.jsonl``: parallel calls (``parallel-weather``), a call whose
argument comes from an earlier result (``dependent-booking``, and across turns ``cross-turn-email``), an argument
spoken early in a long sentence (``early-order``) and a no-tool turn (``no-tool-then-booking``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from clocktune.runtime.play import run_policy
from clocktune.runtime.scripted import ScriptedPolicy
from clocktune.runtime.session import SessionConfig
from clocktune.timeline import read_timelines, validate_timeline
from clocktune.timeline.events import LatencyModel
from clocktune.tools import BrokenCallError, ToolError
from data_gen.backends import check_ground_truth_state, make_backend
from data_gen.cli import main as datagen_main
from data_gen.determinable import Utterance, accumulate_readings, canonical, place, tokens
from data_gen.importers.bfcl.entries import build_task as build_bfcl_task
from data_gen.importers.chat import (
    ChatImportError,
    Conversation,
    RecordedBackend,
    build_task,
    find_path,
    import_chat,
    parse_conversation,
    reader,
    side_effect,
)
from data_gen.importers.chat.conversation import MAX_MESSAGE_CHARS, MAX_PAYLOAD_DEPTH
from data_gen.task import PlannedCall

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "conversations.jsonl"


def _rows() -> list[dict]:
    return [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    """The example conversations imported once (seed 0, default config): the shard."""
    result = import_chat(EXAMPLES, tmp_path_factory.mktemp("chat"), seed=0)
    assert result["written"] == len(_rows())
    return result["path"]


def _by_id(path: Path) -> dict:
    return {timeline.id: timeline for timeline in read_timelines(path)}


# The determinability rule -------------------------------------------------------------------------------------------


def test_normalisation_ignores_case_and_punctuation():
    assert tokens("Chez-Panisse!") == tokens("chez panisse") == ["chez", "panisse"]
    assert tokens("'final_report.pdf'") == ["final", "report", "pdf"]
    assert Utterance.of("Book at CHEZ PANISSE, please").heard_at("Chez Panisse") == 4


def test_normalisation_reads_numbers_in_words_or_digits():
    assert tokens("three") == tokens("3") == tokens("3.0") == ["3"]
    assert tokens("twenty five people") == ["25", "people"]
    assert tokens("one thousand five hundred") == tokens("1,500") == ["1500"]
    assert tokens("the 3rd and the third") == ["the", "3", "and", "the", "3"]
    assert tokens("five six") == ["5", "6"]  # two numbers, not one
    utterance = Utterance.of("a table for three at seven")
    assert utterance.heard_at(3) == 4 and utterance.heard_at("3") == 4 and utterance.heard_at(7.0) == 6
    assert utterance.heard_at(4) is None


def test_normalisation_reads_simple_dates():
    # 2026-03-09 is a Monday.
    assert Utterance.of("fly out on Monday please").heard_at("2026-03-09") == 4
    assert Utterance.of("on March 9th in the morning").heard_at("2026-03-09") == 3
    assert Utterance.of("on the ninth of march").heard_at("2026-03-09") == 5
    assert Utterance.of("on 2026-03-09 exactly").heard_at("2026-03-09") == 2
    assert Utterance.of("sept 9").heard_at("2026-09-09") == 2
    assert Utterance.of("on Tuesday").heard_at("2026-03-09") is None
    assert Utterance.of("it's Monday").heard_at("monday") == 2  # a weekday value is a plain word


def test_a_call_is_determinable_once_its_last_value_is_heard():
    words = Utterance.of("find flights from Boston to Denver tomorrow and book the cheapest")
    assert place({"origin": "Boston", "destination": "Denver"}, words).at_word == 6
    # Flags and nulls are not spoken: they do not hold the call back.
    assert place({"origin": "boston", "direct": True, "via": None}, words).at_word == 4


def test_a_call_without_heard_values_waits_for_the_end_of_the_turn():
    words = Utterance.of("list my files please")
    assert place({}, words).at_word is None  # nothing marks when the intent became clear
    assert place({"all": True}, words).at_word is None
    unresolved = place({"folder": "documents", "name": "files"}, words)
    assert unresolved.at_word is None and unresolved.unresolved == ["folder"]
    # A value available elsewhere (here: replaced by a reference) no longer holds the call back.
    ref = place({"folder": "documents", "name": "files"}, words, lambda value: {"$ref": "c1.folder"})
    assert ref.at_word == 3 and ref.arguments == {"folder": {"$ref": "c1.folder"}, "name": "files"}


def test_readings_accumulate_calls_in_gold_order():
    first, second = PlannedCall("a", "f", {}), PlannedCall("b", "g", {})
    readings = accumulate_readings([(5, second), (2, first)], 8)
    assert [(r.at_word, [c.key for c in r.calls]) for r in readings] == [(2, ["a"]), (5, ["b", "a"]), (8, ["b", "a"])]
    assert all(r.confidence == 1.0 for r in readings)


def test_canonical_arguments_agree_up_to_normalisation():
    assert canonical({"city": "Paris", "n": 3}) == canonical({"n": "three", "city": "paris."})
    assert canonical({"city": "Paris"}) != canonical({"city": "Lyon"})


def test_bfcl_places_a_call_at_its_determinable_point():
    words = "Please go into the documents folder and then list everything there for me".split()
    task = build_bfcl_task("multi_turn_base", [(words, [("cd", {"folder": "documents"}), ("ls", {})])])
    (turn,) = task.turns
    # cd is determined by "documents" (word 5); ls has nothing to hear and keeps the end of the turn.
    assert [(r.at_word, [c.name for c in r.calls]) for r in turn.readings] == [(5, ["cd"]), (13, ["cd", "ls"])]


# The recorded-response backend and side effects ---------------------------------------------------------------------


def test_recorded_backend_serves_matching_calls_and_refuses_others():
    backend = RecordedBackend(
        [
            {"name": "get_weather", "arguments": {"city": "Paris"}, "content": {"temp_c": 18}},
            {"name": "book", "arguments": {"seats": 3}, "content": {"id": "B1"}},
        ],
        {"get_weather": False, "book": True},
    )
    assert backend.execute("get_weather", {"city": "paris"}) == {"temp_c": 18}
    with pytest.raises(ToolError, match="no recorded response") as refusal:
        backend.execute("get_weather", {"city": "Lyon"})
    assert not isinstance(refusal.value, BrokenCallError)
    with pytest.raises(BrokenCallError, match="unknown tool"):
        backend.execute("launch_rocket", {})
    assert backend.state() == {"writes": []}
    assert backend.execute("book", {"seats": "three"}) == {"id": "B1"}
    # The state is the served writes in their recorded form.
    assert backend.state() == {"writes": [{"name": "book", "arguments": {"seats": 3}}]}


def test_side_effects_follow_the_schema_then_the_name():
    def tool(name: str, **extra) -> dict:
        return {"type": "function", "function": {"name": name, **extra}}

    assert side_effect(tool("lookup_thing", side_effect=True))[0] is True
    assert side_effect(tool("delete_file", **{"x-side-effect": False}))[0] is False
    assert side_effect(tool("sendEmail"))[0] is True
    assert side_effect(tool("order_pizza"))[0] is True
    assert side_effect(tool("get_order_status"))[0] is False  # a reading verb first
    assert side_effect(tool("weather"))[0] is False
    with pytest.raises(ValueError, match="true or false"):
        side_effect(tool("f", side_effect="yes"))


def test_find_path_searches_the_result_for_the_value():
    result = {"flights": [{"id": "UA221", "price": 189}, {"id": "DL88"}], "a.b": {"x": "hidden"}}
    assert find_path(result, "UA221") == "flights.0.id"
    assert find_path(result, 189) == "flights.0.price"
    assert find_path(result, "189") is None  # same JSON type only: the resolved value must equal the recorded one
    assert find_path(result, "hidden") is None  # a dotted key cannot be written in a reference
    assert find_path("UA221", "UA221") == ""


# Imported timelines -------------------------------------------------------------------------------------------------


def test_example_conversations_import_to_valid_timelines(imported, capsys):
    timelines = read_timelines(imported)
    assert [t.id for t in timelines] == [row["id"] for row in _rows()]
    for timeline in timelines:
        assert timeline.domain == "chat" and timeline.task == "conversations"
        assert validate_timeline(timeline) == [], timeline.id
        assert check_ground_truth_state(timeline) == [], timeline.id
    assert datagen_main(["validate", "--strict", str(imported)]) == 0
    assert capsys.readouterr().out.strip().endswith(f"{len(timelines)} timeline(s) valid")
    stamp = json.loads((imported.parents[1] / "generation.json").read_text())
    assert stamp["source"] == "chat" and stamp["seed"] == 0
    assert json.loads((imported.parents[1] / "stats.json").read_text())["dialogues"] == len(timelines)


def test_scripted_oracle_replays_imported_conversations_at_accuracy_one(imported):
    timelines = read_timelines(imported)
    for name in ("oracle", "sync", "speculative"):
        run = run_policy(name, timelines, lambda t, n=name: ScriptedPolicy(t, n), make_backend, SessionConfig())
        assert [r.failure for r in run.results] == [None] * len(timelines), name
        assert sum(r.accurate for r in run.results) / len(timelines) == 1.0
        assert sum(r.side_effect_violations for r in run.results) == 0


def test_speculative_teacher_calls_an_early_spoken_argument_before_the_end_of_speech(imported):
    timeline = _by_id(imported)["early-order"]
    (call,) = [e for e in timeline.events if e.kind == "tool_call"]
    final = next(e for e in timeline.events if e.kind == "user_chunk" and e.final)
    assert call.arguments == {"order_id": "48213"}
    assert call.t < final.t


def test_parallel_calls_of_one_message_both_import(imported):
    timeline = _by_id(imported)["parallel-weather"]
    calls = [(e.name, e.arguments) for e in timeline.events if e.kind == "tool_call"]
    assert calls == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Tokyo"})]
    assert {"18", "sunny", "22", "cloudy"} <= set(timeline.ground_truth.facts)


def test_an_argument_from_an_earlier_result_becomes_a_reference(imported):
    timelines = _by_id(imported)
    booking = timelines["dependent-booking"]
    search, book = [e for e in booking.events if e.kind == "tool_call"]
    assert book.arguments == {"flight_id": {"$ref": f"{search.call_id}.flights.0.id"}}
    # Ground truth (what reached the backend) holds the resolved value, and the write is the final state.
    assert [(c.name, c.arguments) for c in booking.ground_truth.calls][1] == ("book_flight", {"flight_id": "UA221"})
    assert booking.ground_truth.final_state == {
        "writes": [{"name": "book_flight", "arguments": {"flight_id": "UA221"}}]
    }
    assert {"UA221", "189", "X7K2Q"} <= set(booking.ground_truth.facts)
    # Across turns: the address the user never says comes from the first turn's search.
    email = timelines["cross-turn-email"]
    first, send = [e for e in email.events if e.kind == "tool_call"]
    assert send.arguments["to"] == {"$ref": f"{first.call_id}.contacts.0.email"}
    assert email.ground_truth.calls[1].arguments["to"] == "alice@example.com"


def test_a_no_tool_turn_answers_without_calls(imported):
    timeline = _by_id(imported)["no-tool-then-booking"]
    finals = [e for e in timeline.events if e.kind == "user_chunk" and e.final]
    answers = [e for e in timeline.events if e.kind == "say" and e.final]
    assert len(finals) == len(answers) == 2
    assert answers[0].text == "I can reserve restaurant tables for you."
    assert not any(e.kind == "tool_call" and e.t <= answers[0].t for e in timeline.events)
    # The booking's party size is "three" in words, 3 in the call; the state-changing call waits for the commit.
    (call,) = [e for e in timeline.events if e.kind == "tool_call"]
    assert call.arguments["party_size"] == 3 and call.t < finals[1].t
    commit = next(e for e in timeline.events if e.kind == "commit")
    result = next(e for e in timeline.events if e.kind == "tool_result")
    assert finals[1].t <= commit.t <= result.t


def test_dataset_and_parquet_import_the_same_as_jsonl(tmp_path, imported):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _rows()
    saved = tmp_path / "saved"
    datasets.Dataset.from_list(rows).save_to_disk(str(saved))
    parquet = tmp_path / "conversations.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    expected = read_timelines(imported)
    for source in (saved, parquet):
        result = import_chat(source, tmp_path / f"out-{source.name}", seed=0, name="conversations")
        # Equal as data (same events, times, calls, results); Arrow may list an object's keys in another order.
        assert read_timelines(result["path"]) == expected, source


def test_arguments_as_objects_and_json_arrays_import(tmp_path):
    rows = _rows()[:1]
    for message in rows[0]["messages"]:
        for call in message.get("tool_calls") or []:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    source = tmp_path / "conversations.json"
    source.write_text(json.dumps(rows))
    (timeline,) = read_timelines(import_chat(source, tmp_path / "out")["path"])
    assert timeline.ground_truth.calls[0].arguments == {"city": "Paris"}


# Malformed conversations --------------------------------------------------------------------------------------------


def _bad_file(tmp_path: Path) -> Path:
    good = _rows()
    rows = [json.dumps(row) for row in good[:2]]
    missing_id = json.loads(rows[0])
    del missing_id["messages"][3]["tool_call_id"]
    no_call = json.loads(rows[0])
    no_call["messages"][4]["tool_call_id"] = "call_9"
    bad_schema = json.loads(rows[1])
    bad_schema["messages"][1]["tool_calls"][0]["function"]["arguments"] = json.dumps({"origin": 5})
    unknown_role = json.loads(rows[0])
    unknown_role["messages"][0]["role"] = "narrator"
    lines = [
        rows[0],  # 1: fine
        json.dumps(missing_id),  # 2
        json.dumps(no_call),  # 3
        json.dumps(bad_schema),  # 4
        rows[1][: len(rows[1]) // 2],  # 5: truncated JSON
        json.dumps(unknown_role),  # 6
        rows[1],  # 7: fine
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_malformed_rows_are_listed_as_file_line_field_and_nothing_is_written(tmp_path, capsys):
    path = _bad_file(tmp_path)
    out = tmp_path / "out"
    assert datagen_main(["import-chat", str(path), "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    printed = captured.out.strip().splitlines()
    wanted = [
        f"{path}:2:messages.3.tool_call_id: missing",
        f"{path}:2:messages.2.tool_calls.0: call 'call_1' has no tool message",
        f"{path}:3:messages.4.tool_call_id: 'call_9' answers no call",
        f"{path}:3:messages.2.tool_calls.1: call 'call_2' has no tool message",
        f"{path}:4:messages.1.tool_calls.0.function.arguments.origin: 5 is not of type 'string'",
        f"{path}:5:-: not valid JSON",
        f"{path}:6:messages.0.role: unknown role 'narrator'",
    ]
    for start in wanted:
        assert any(line.startswith(start) for line in printed), (start, printed)
    assert not any(f"{path}:1:" in line or f"{path}:7:" in line or "answers no call" in line and ":4:" in line
                   for line in printed)  # fmt: skip
    assert printed[-1].endswith("nothing was imported")
    assert not out.exists()  # not even the stamp: the corrected file imports with the same command
    with pytest.raises(ChatImportError) as error:
        import_chat(path, out)
    assert {issue.line for issue in error.value.issues} == {2, 3, 4, 5, 6}


def test_import_chat_cli_end_to_end(tmp_path, capsys):
    out = tmp_path / "chat"
    assert datagen_main(["import-chat", str(EXAMPLES), "--out", str(out), "--limit", "2", "--seed", "3"]) == 0
    assert capsys.readouterr().out.startswith("imported 2 conversation(s) to ")
    assert len(read_timelines(out / "data" / "train-00000-of-00001.jsonl")) == 2
    assert datagen_main(["import-chat", str(EXAMPLES), "--out", str(out), "--seed", "4"]) == 2
    assert "other settings" in capsys.readouterr().err
    assert datagen_main(["import-chat", str(tmp_path / "nothing.jsonl"), "--out", str(tmp_path / "x")]) == 2
    assert "no such file" in capsys.readouterr().err


# Bounds: message length, nesting, what the source is ------------------------------------------------------------------


def _long_answer_row(chars: int) -> dict:
    """The first example with a result of ``chars / 8`` distinct values that its answer all repeats, last first."""
    row = _rows()[0]
    count = chars // 8
    result = json.loads(row["messages"][3]["content"])
    row["messages"][3]["content"] = json.dumps({**result, "items": [f"w{i}" for i in range(count)]})
    row["messages"][-1]["content"] += " " + " ".join(f"w{i}" for i in range(count - 1, -1, -1))
    return row


def _import_seconds(tmp_path: Path, row: dict, name: str) -> float:
    """The fastest of two imports of one row through the CLI (the machine may be busy)."""
    source = tmp_path / f"{name}.jsonl"
    source.write_text(json.dumps(row) + "\n")
    times = []
    for attempt in range(2):
        started = time.perf_counter()
        assert datagen_main(["import-chat", str(source), "--out", str(tmp_path / f"{name}-{attempt}")]) == 0
        times.append(time.perf_counter() - started)
    return min(times)


def test_a_message_over_the_length_limit_is_refused_at_once_naming_its_field(tmp_path, capsys):
    row = _rows()[0]
    row["messages"][1]["content"] = "weather " * 125_000  # 1 MB
    source = tmp_path / "long.jsonl"
    source.write_text(json.dumps(row) + "\n")
    started = time.perf_counter()
    assert datagen_main(["import-chat", str(source), "--out", str(tmp_path / "out")]) == 1
    assert time.perf_counter() - started < 2.0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert captured.out.splitlines()[0] == (
        f"{source}:1:messages.1.content: 1,000,000 characters, over the limit of {MAX_MESSAGE_CHARS:,}"
    )
    assert not (tmp_path / "out").exists()


def test_import_time_grows_linearly_with_a_long_result_and_the_answer_that_repeats_it(tmp_path, capsys):
    # Every value of the result is looked up in the answer: that was the product of their lengths.
    small = _import_seconds(tmp_path, _long_answer_row(10_000), "small")
    large = _import_seconds(tmp_path, _long_answer_row(40_000), "large")
    assert large < 8 * small, (small, large)
    assert large < 5.0
    capsys.readouterr()


def test_the_task_of_a_long_conversation_takes_time_linear_in_its_turns():
    # The context (system text and earlier turns) and the results so far were read again at every turn.
    def conversation(turns: int) -> Conversation:
        messages = [{"role": "system", "content": "You help with item lookups. " * 200}]
        for turn in range(turns):
            messages += [
                {"role": "user", "content": f"Look up item {turn} please"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": f"c{turn}",
                            "type": "function",
                            "function": {"name": "get_item", "arguments": json.dumps({"item": str(turn)})},
                        },
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": f"c{turn}",
                    "content": json.dumps([f"v{turn}x{i}" for i in range(20)]),
                },
                {"role": "assistant", "content": f"Item {turn} has v{turn}x1 and v{turn}x2."},
            ]
        tools = [{"type": "function", "function": {"name": "get_item", "parameters": {"type": "object"}}}]
        parsed, issues = parse_conversation({"tools": tools, "messages": messages}, "long", LatencyModel(), "-", 1)
        assert issues == []
        return parsed

    def seconds(turns: int) -> float:
        chat = conversation(turns)
        started = time.perf_counter()
        task = build_task(chat, "long")
        elapsed = time.perf_counter() - started
        assert task.turns[-1].answer(None).facts == [f"v{turns - 1}x1", f"v{turns - 1}x2"]
        return elapsed

    small, large = min(seconds(50) for _ in range(2)), min(seconds(200) for _ in range(2))
    assert large < 8 * small, (small, large)


def test_a_deeply_nested_result_or_arguments_text_is_one_issue_naming_its_field(tmp_path, capsys):
    deep_result, deep_arguments = _rows()[0], _rows()[0]
    deep_result["messages"][3]["content"] = "[" * 10_000 + "]" * 10_000
    deep_arguments["messages"][2]["tool_calls"][1]["function"]["arguments"] = '{"a":' * 10_000 + "1" + "}" * 10_000
    source = tmp_path / "deep.jsonl"
    source.write_text(json.dumps(deep_result) + "\n" + json.dumps(deep_arguments) + "\n")
    assert datagen_main(["import-chat", str(source), "--out", str(tmp_path / "out")]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    printed = captured.out.splitlines()
    assert printed[:2] == [
        f"{source}:1:messages.3.content: JSON nested deeper than {MAX_PAYLOAD_DEPTH} levels",
        f"{source}:2:messages.2.tool_calls.1.function.arguments: not valid JSON (JSON nested deeper than "
        f"{MAX_PAYLOAD_DEPTH} levels): " + repr('{"a":' * 12),
    ]
    assert printed[2:] == ["2 issue(s) on 2 row(s); nothing was imported"]


def test_a_result_nested_to_the_limit_imports_and_reads_back(tmp_path):
    row = _rows()[0]
    nested = "[" * (MAX_PAYLOAD_DEPTH - 1) + "]" * (MAX_PAYLOAD_DEPTH - 1)
    row["messages"][3]["content"] = '{"city": "Paris", "temp_c": 18, "conditions": "sunny", "x": ' + nested + "}"
    source = tmp_path / "nested.jsonl"
    source.write_text(json.dumps(row) + "\n")
    (timeline,) = read_timelines(import_chat(source, tmp_path / "out")["path"])  # the timeline is nested 3 deeper
    assert validate_timeline(timeline) == []


def test_a_source_that_is_not_a_regular_file_is_refused_without_reading_it(tmp_path, capsys):
    fifo = tmp_path / "conversations.jsonl"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    for source in (fifo, zero):
        codes: list[int] = []
        args = ["import-chat", str(source), "--out", str(tmp_path / "o")]
        worker = threading.Thread(target=lambda args=args, codes=codes: codes.append(datagen_main(args)), daemon=True)
        worker.start()
        worker.join(timeout=10)
        if worker.is_alive():  # blocked opening the FIFO: a writer releases it
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        assert codes == [2], source
        captured = capsys.readouterr()
        assert captured.err.strip() == f"error: {source}: not a regular file"
        assert "Traceback" not in captured.out + captured.err
    assert not (tmp_path / "o").exists()


def test_a_line_over_the_length_limit_is_reported_and_the_next_lines_still_read(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "MAX_LINE_BYTES", 4096)
    good = [json.dumps(row) for row in _rows()[:2]]
    source = tmp_path / "lines.jsonl"
    source.write_text("\n".join([good[0], '{"id": "' + "x" * 100_000 + '"}', good[1]]) + "\n")
    rows = reader.read_rows(source)
    assert [(row.line, row.record is not None) for row in rows] == [(1, True), (2, False), (3, True)]
    assert str(rows[1].issue) == f"{source}:2:-: line longer than the limit of 4,096 bytes"
