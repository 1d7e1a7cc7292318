"""The BFCL v4 multi-turn importer: call parsing, tool classification, the backend, and imported timelines.

Entries come from the fixture in ``tests/fixtures/bfcl`` (copied from the ``bfcl-eval`` wheel); the simulated API
classes come from the installed wheel (``make bfcl``). Tests that need the wheel are skipped only when it is not
installed; parsing tests run without it.
"""

from __future__ import annotations

import ast
import json
import shutil
import uuid
from pathlib import Path

import pytest

from clocktune.timeline import read_timelines, validate_timeline
from clocktune.timeline.analysis import call_records
from data_gen.backends import check_ground_truth_state
from data_gen.cli import main as datagen_main
from data_gen.config import GeneratorConfig
from data_gen.domains.base import ToolError
from data_gen.importers import bfcl
from data_gen.importers.bfcl import (
    API_CLASSES,
    CATEGORIES,
    SIDE_EFFECTS,
    BfclBackend,
    BfclCallError,
    BfclError,
    doc_to_schema,
    find_bfcl_root,
    function_docs,
    import_bfcl,
    parse_call,
    to_json,
)

FIXTURE = Path(__file__).parent / "fixtures" / "bfcl"
FIXTURE_COUNTS = {"multi_turn_base": 3, "multi_turn_miss_param": 1, "multi_turn_miss_func": 1}


def _installed() -> bool:
    try:
        find_bfcl_root()
    except BfclError:
        return False
    return True


needs_bfcl = pytest.mark.skipif(not _installed(), reason="bfcl-eval is not installed (run `make bfcl`)")


def _fixture_pairs(category: str) -> list[tuple[dict, list]]:
    return bfcl.load_entries(category, FIXTURE)


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> dict[str, Path]:
    """Each fixture category imported once (seed 0, default config): category -> shard path."""
    if not _installed():
        pytest.skip("bfcl-eval is not installed (run `make bfcl`)")
    paths = {}
    for category, count in FIXTURE_COUNTS.items():
        result = import_bfcl(category, tmp_path_factory.mktemp(category), seed=0, data_dir=FIXTURE)
        assert result["skipped"] == {}, result["skipped"]
        assert result["written"] == result["entries"] == count
        paths[category] = result["path"]
    return paths


# Call strings ---------------------------------------------------------------------------------------------------


def test_parse_call_keyword_literals():
    assert parse_call("cd(folder='document')") == ("cd", {"folder": "document"})
    assert parse_call("mv(source='a', destination='b')") == ("mv", {"source": "a", "destination": "b"})
    assert parse_call("check_tire_pressure()") == ("check_tire_pressure", {})
    assert parse_call("f(a=True, b=None, c=1.5, d='x,y')") == ("f", {"a": True, "b": None, "c": 1.5, "d": "x,y"})


def test_parse_call_nested_and_negative_values():
    name, arguments = parse_call("edit_ticket(ticket_id=0, updates={'status':'Urgent', 'priority':5})")
    assert (name, arguments) == ("edit_ticket", {"ticket_id": 0, "updates": {"status": "Urgent", "priority": 5}})
    _, arguments = parse_call("f(x=-3, y=-2.5, z=[-1, (2, -3), {'k': [-0.5]}], w=+4)")
    # Tuples become lists: the arguments are JSON.
    assert arguments == {"x": -3, "y": -2.5, "z": [-1, [2, -3], {"k": [-0.5]}], "w": 4}
    json.dumps(arguments)


def test_parse_call_maps_positional_arguments_to_parameter_names():
    parameters = {"sort": ["file_name"], "tail": ["file_name", "lines"]}
    assert parse_call("sort('final_report.pdf')", parameters) == ("sort", {"file_name": "final_report.pdf"})
    assert parse_call("tail('log.txt', lines=20)", parameters) == ("tail", {"file_name": "log.txt", "lines": 20})
    with pytest.raises(BfclError, match="no documented parameters"):
        parse_call("sort('a')", {}, where="entry e1: turn 0 call 0")
    with pytest.raises(BfclError, match="3 positional arguments"):
        parse_call("tail('a', 1, 2)", parameters)
    with pytest.raises(BfclError, match="twice"):
        parse_call("tail('a', file_name='b')", parameters)


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('x')",
        "os.system('x')",
        "cd(folder=__import__('os').getcwd())",
        "cd(folder=open('/etc/passwd').read())",
        "cd(folder=x)",
        "cd(**{'folder': 'x'})",
        "cd(*['x'])",
        "cd(folder=lambda: 1)",
        "cd(folder='a'); rm(file_name='b')",
        "cd(folder='a') or rm(file_name='b')",
        "cd(folder={1, 2})",
        "cd(folder=1e999)",
        "cd(folder=b'x')",
        "[cd(folder='a')]",
        "cd(folder='a'",
    ],
)
def test_parse_call_rejects_anything_but_a_literal_call(text):
    with pytest.raises(BfclError) as error:
        parse_call(text, {"cd": ["folder"]}, where="entry multi_turn_base_7: turn 2 call 1")
    # The message names where the string came from and the string itself.
    assert "multi_turn_base_7: turn 2 call 1" in str(error.value)
    assert repr(text.strip()) in str(error.value)


# Function docs and classification ---------------------------------------------------------------------------------


@needs_bfcl
def test_every_function_of_every_class_is_classified():
    for class_name, (_, doc_file) in API_CLASSES.items():
        documented = {doc["name"] for doc in function_docs(class_name)}
        assert documented == set(SIDE_EFFECTS[class_name]), (class_name, doc_file)
        # The docs cover every public method BFCL would dispatch to, and no more.
        cls = bfcl.api_class(class_name)
        methods = {name for name in vars(cls) if not name.startswith("_") and callable(getattr(cls, name))}
        assert methods == documented, class_name
    assert set(SIDE_EFFECTS) == set(API_CLASSES)
    assert any(SIDE_EFFECTS["GorillaFileSystem"].values()) and not any(SIDE_EFFECTS["MathAPI"].values())


@needs_bfcl
def test_every_class_of_every_category_is_supported():
    root = find_bfcl_root()
    for category in CATEGORIES:
        for entry, _ in bfcl.load_entries(category, root / "data"):
            assert set(entry["involved_classes"]) <= set(API_CLASSES), entry["id"]


@needs_bfcl
def test_positional_parameter_order_matches_the_docs_where_the_data_uses_it():
    # Positional arguments bind to the method's order; the docs agree for every function called that way.
    root = find_bfcl_root()
    for class_name in API_CLASSES:
        order = bfcl.parameter_names([class_name])
        for doc in function_docs(class_name):
            if doc["name"] != "purchase_insurance":  # documented in another order, only ever called by keyword
                assert order[doc["name"]] == list(doc["parameters"]["properties"]), doc["name"]
    for category in CATEGORIES:
        for _, ground_truth in bfcl.load_entries(category, root / "data"):
            for text in (text for turn in ground_truth for text in turn):
                call = ast.parse(text, mode="eval").body
                assert call.func.id != "purchase_insurance" or not call.args, text


def test_unclassified_function_is_an_error():
    doc = {"name": "launch_rocket", "description": "x", "parameters": {"type": "dict", "properties": {}}}
    with pytest.raises(BfclError, match="SIDE_EFFECTS"):
        doc_to_schema(doc, "VehicleControlAPI")


def test_doc_types_become_json_schema():
    doc = {
        "name": "place_order",
        "description": "Place an order.",
        "parameters": {
            "type": "dict",
            "properties": {
                "price": {"type": "float", "description": "p"},
                "amount": {"type": "integer"},
                "pair": {"type": "tuple", "items": {"type": "float"}},
                "anything": {"type": "any"},
                "options": {"type": "dict", "properties": {"note": {"type": "string"}}},
            },
            "required": ["price"],
        },
    }
    schema = doc_to_schema(doc, "TradingBot")
    assert schema.side_effect is True and schema.name == "place_order"
    parameters = schema.parameters
    assert parameters["type"] == "object" and parameters["additionalProperties"] is False
    assert parameters["required"] == ["price"]
    properties = parameters["properties"]
    assert properties["price"] == {"type": "number", "description": "p"}
    assert properties["pair"] == {"type": "array", "items": {"type": "number"}}
    assert properties["anything"] == {}
    assert properties["options"] == {"type": "object", "properties": {"note": {"type": "string"}}}
    assert schema.latency.median_s == pytest.approx(0.6)
    with pytest.raises(BfclError, match="unknown BFCL type"):
        doc_to_schema({**doc, "parameters": {"type": "dict", "properties": {"x": {"type": "complex"}}}}, "TradingBot")


# The backend ------------------------------------------------------------------------------------------------------


def _file_system() -> BfclBackend:
    config = {
        "GorillaFileSystem": {
            "root": {
                "alex": {
                    "type": "directory",
                    "contents": {
                        "notes.txt": {"type": "file", "content": "b\na"},
                        "docs": {"type": "directory", "contents": {}},
                    },
                }
            }
        },
        "TwitterAPI": {"username": "alex", "password": "pw", "authenticated": True, "tweets": {}, "tweet_counter": 0},
    }
    return BfclBackend(["GorillaFileSystem", "TwitterAPI"], config)


@needs_bfcl
def test_backend_executes_and_reports_refusals_and_broken_calls():
    backend = _file_system()
    assert backend.execute("sort", {"file_name": "notes.txt"}) == {"sorted_content": "a\nb"}
    assert backend.execute("mkdir", {"dir_name": "new"}) == {}  # BFCL returns None
    with pytest.raises(ToolError, match="No such file") as refusal:
        backend.execute("cat", {"file_name": "missing.txt"})
    assert not isinstance(refusal.value, BfclCallError)
    with pytest.raises(BfclCallError, match="no such function"):
        backend.execute("launch_rocket", {})
    with pytest.raises(BfclCallError, match="TypeError"):
        backend.execute("cd", {"folder": "docs", "force": True})


@needs_bfcl
def test_backend_names_a_scenario_it_cannot_load():
    with pytest.raises(BfclError, match="initial_config.GorillaFileSystem"):
        BfclBackend(["GorillaFileSystem"], {"GorillaFileSystem": {"root": {"alex": {"type": "directory"}}}})
    with pytest.raises(BfclError, match="unsupported BFCL class 'MemoryAPI_kv'"):
        BfclBackend(["MemoryAPI_kv"], {})


@needs_bfcl
def test_backend_state_is_public_attributes_as_json():
    backend = _file_system()
    tags = ["#a"]
    backend.execute("post_tweet", {"content": "hi", "tags": tags, "mentions": []})
    tags.append("#changed")  # the backend holds a copy, not the caller's list
    backend.execute("cd", {"folder": "docs"})
    state = backend.state()
    assert list(state) == ["GorillaFileSystem", "TwitterAPI"]
    assert json.loads(json.dumps(state)) == state
    tweets = state["TwitterAPI"]["tweets"]
    assert list(tweets) == ["0"] and tweets["0"]["tags"] == ["#a"]
    root = state["GorillaFileSystem"]["root"]
    # Back-references (Directory.parent) are left out; private attributes (the current directory) too.
    assert set(root) == {"name", "contents"} and set(root["contents"]["docs"]) == {"name", "contents"}
    assert root["contents"]["notes.txt"] == {"name": "notes.txt", "content": "b\na"}
    assert "_current_dir" not in state["GorillaFileSystem"]


def test_to_json_is_deterministic_and_safe():
    class Node:
        def __init__(self):
            self.name = "n"
            self._hidden = 1
            self.me = self

    value = {1: (1.5, float("nan")), "s": {3, 1, 2}, "node": Node()}
    assert to_json(value) == {"1": [1.5, "nan"], "s": [1, 2, 3], "node": {"name": "n", "me": "<cycle Node>"}}


def test_missing_wheel_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("CLOCKTUNE_BFCL_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(BfclError, match="make bfcl") as error:
        find_bfcl_root()
    assert "CLOCKTUNE_BFCL_DIR" in str(error.value)
    with pytest.raises(BfclError, match="make bfcl"):
        find_bfcl_root(tmp_path)


@needs_bfcl
def test_find_bfcl_root_accepts_the_target_folder(monkeypatch):
    root = find_bfcl_root()
    assert find_bfcl_root(root.parent) == root
    monkeypatch.setenv("CLOCKTUNE_BFCL_DIR", str(root.parent))
    assert find_bfcl_root() == root


# Imported timelines -------------------------------------------------------------------------------------------------


@needs_bfcl
def test_imported_timelines_are_valid_and_replay(imported):
    for category, path in imported.items():
        timelines = read_timelines(path)
        assert [t.id for t in timelines] == [entry["id"] for entry, _ in _fixture_pairs(category)]
        for timeline in timelines:
            assert timeline.domain == "bfcl" and timeline.task == category
            assert validate_timeline(timeline) == [], timeline.id
            assert check_ground_truth_state(timeline) == [], timeline.id
            assert timeline.ground_truth.facts == []
        assert datagen_main(["validate", str(path)]) == 0


@needs_bfcl
def test_ground_truth_calls_and_turns_follow_the_possible_answer(imported):
    for category, path in imported.items():
        for timeline, (entry, ground_truth) in zip(read_timelines(path), _fixture_pairs(category), strict=True):
            parameters = bfcl.parameter_names(entry["involved_classes"])
            expected = [parse_call(call, parameters) for turn in ground_truth for call in turn]
            assert [(call.name, call.arguments) for call in timeline.ground_truth.calls] == expected
            spoken = sum(1 for turn in entry["question"] if turn)  # miss_func's reveal turn has no words
            finals = [e for e in timeline.events if e.kind == "user_chunk" and e.final]
            answers = [e for e in timeline.events if e.kind == "say" and e.final]
            assert len(finals) == len(answers) == spoken
            assert timeline.initial_state == {
                "involved_classes": entry["involved_classes"],
                "initial_config": entry["initial_config"],
                "long_context": False,
            }


@needs_bfcl
def test_miss_param_turn_asks_without_calling(imported):
    (timeline,) = read_timelines(imported["multi_turn_miss_param"])
    entry, ground_truth = _fixture_pairs("multi_turn_miss_param")[0]
    empty = ground_truth.index([])
    answers = [e for e in timeline.events if e.kind == "say" and e.final]
    assert answers[empty].text == bfcl.ASK_FOR_DETAILS
    finals = [e for e in timeline.events if e.kind == "user_chunk" and e.final]
    between = [e for e in timeline.events if finals[empty].t <= e.t <= answers[empty].t]
    assert not any(e.kind == "tool_call" for e in between)


@needs_bfcl
def test_calls_of_a_turn_keep_bfcl_order(imported):
    # The expert issues a turn's calls in BFCL's order, and the backend's sequential executor runs them so: the
    # calls reached the backend (the ground truth) in the order they were issued, and around a state-changing call
    # no result overtakes an earlier call's.
    for path in imported.values():
        for timeline in read_timelines(path):
            records = list(call_records(timeline).values())
            assert [r.name for r in records] == [call.name for call in timeline.ground_truth.calls]
            for index, record in enumerate(records):
                for earlier in records[:index]:
                    if earlier.side_effect or record.side_effect:
                        assert earlier.results and record.results, (timeline.id, index)
                        assert earlier.results[0][0] <= record.results[0][0], (timeline.id, index)


@needs_bfcl
def test_before_the_end_of_speech_only_reads_are_issued(imported):
    checked = 0
    for path in imported.values():
        for timeline in read_timelines(path):
            finals = [e.t for e in timeline.events if e.kind == "user_chunk" and e.final]
            answers = [e.t for e in timeline.events if e.kind == "say" and e.final]
            records = list(call_records(timeline).values())
            for turn, end in enumerate(finals):
                start = answers[turn - 1] if turn else -1.0  # a turn's calls come after the previous answer
                of_turn = [r for r in records if start < r.issued_t <= answers[turn]]
                early = [r for r in of_turn if r.issued_t < end]
                assert not any(r.side_effect for r in early), (timeline.id, turn)
                checked += len(early)
    assert checked > 0  # some calls do go out while the user speaks


@needs_bfcl
def test_final_state_equals_bfcl_replaying_the_possible_answer(imported):
    # BFCL's own multi-turn executor is the oracle: it runs the possible-answer strings (trusted fixture data)
    # on fresh instances, and its checker's instance comparison must find no difference.
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import _compare_instances
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call

    for category, path in imported.items():
        for timeline, (entry, ground_truth) in zip(read_timelines(path), _fixture_pairs(category), strict=True):
            instances, model_name = {}, f"clocktune_{uuid.uuid4().hex}"  # BFCL caches instances per name
            for turn in ground_truth:
                results, instances = execute_multi_turn_func_call(
                    turn, entry["initial_config"], entry["involved_classes"], model_name, entry["id"]
                )
                assert not any(result.startswith("Error during execution") for result in results), results
            expected = {
                name: {key: to_json(value) for key, value in vars(instance).items() if not key.startswith("_")}
                for name, instance in instances.items()
            }
            assert timeline.ground_truth.final_state == expected, timeline.id
            backend = bfcl.backend_for_timeline(timeline)
            for call in timeline.ground_truth.calls:
                backend.execute(call.name, call.arguments)
            for name, instance in instances.items():
                valid, differences = _compare_instances(backend._instances[name], instance)
                assert valid, (timeline.id, name, differences)


@needs_bfcl
def test_replay_check_catches_tampering(imported):
    timeline = read_timelines(imported["multi_turn_base"])[0]
    timeline.ground_truth.final_state["TwitterAPI"]["tweet_counter"] = 99
    (issue,) = check_ground_truth_state(timeline, "f.jsonl", 3)
    assert (issue.line, issue.field) == (3, "ground_truth.final_state.TwitterAPI.tweet_counter")
    timeline = read_timelines(imported["multi_turn_base"])[0]
    timeline.ground_truth.calls[0].name = "launch_rocket"
    (issue,) = check_ground_truth_state(timeline, "f.jsonl", 3)
    assert issue.field == "ground_truth.calls.0" and "launch_rocket" in issue.message
    timeline.initial_state.pop("involved_classes")
    (issue,) = check_ground_truth_state(timeline, "f.jsonl", 3)
    assert issue.field == "initial_state"


@needs_bfcl
def test_make_backend_serves_imported_timelines(imported):
    from data_gen.backends import make_backend

    timeline = read_timelines(imported["multi_turn_base"])[0]
    backend = make_backend(timeline)
    assert isinstance(backend, BfclBackend)
    assert backend.state() == bfcl.backend_for_timeline(timeline).state()
    assert backend.state() != timeline.ground_truth.final_state  # fresh: nothing has run yet


@needs_bfcl
def test_import_is_deterministic(tmp_path):
    first = import_bfcl("multi_turn_base", tmp_path / "a", seed=5, data_dir=FIXTURE)["path"].read_bytes()
    second = import_bfcl("multi_turn_base", tmp_path / "b", seed=5, data_dir=FIXTURE)["path"].read_bytes()
    other = import_bfcl("multi_turn_base", tmp_path / "c", seed=6, data_dir=FIXTURE)["path"].read_bytes()
    assert first == second
    assert first != other
    sync = import_bfcl(
        "multi_turn_base", tmp_path / "d", seed=5, config=GeneratorConfig(teacher="sync"), data_dir=FIXTURE
    )
    assert {t.teacher for t in read_timelines(sync["path"])} == {"sync"}
    with pytest.raises(BfclError, match="other settings"):
        import_bfcl("multi_turn_base", tmp_path / "a", seed=6, data_dir=FIXTURE)


@needs_bfcl
def test_bad_entries_are_skipped_and_reported(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(FIXTURE, data)
    answers = data / "possible_answer" / "BFCL_v4_multi_turn_base.json"
    records = [json.loads(line) for line in answers.read_text().splitlines()]
    records[1]["ground_truth"][0][0] = "__import__('os').system('echo hacked')"
    answers.write_text("".join(json.dumps(record) + "\n" for record in records))
    result = import_bfcl("multi_turn_base", tmp_path / "out", seed=0, data_dir=data)
    assert result["written"] == 2 and list(result["skipped"]) == ["multi_turn_base_55"]
    assert "__import__" in result["skipped"]["multi_turn_base_55"]
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["skipped"] == 1 and "multi_turn_base_55" in stats["skipped_entries"]


@needs_bfcl
def test_cli_import_bfcl_end_to_end(tmp_path, capsys):
    out = tmp_path / "bfcl"
    argv = ["import-bfcl", "--category", "multi_turn_base", "--out", str(out), "--limit", "2"]
    assert datagen_main(argv + ["--data-dir", str(FIXTURE), "--seed", "3"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1].startswith("imported 2 of 2 multi_turn_base entries to ")
    shard = out / "data" / "train-00000-of-00001.jsonl"
    assert [t.id for t in read_timelines(shard)] == ["multi_turn_base_0", "multi_turn_base_55"]
    manifest = json.loads((out / "generation.json").read_text())
    assert manifest["limit"] == 2 and manifest["seed"] == 3 and manifest["category"] == "multi_turn_base"
    assert json.loads((out / "stats.json").read_text())["dialogues"] == 2
    assert datagen_main(["validate", str(out / "data")]) == 0
    assert capsys.readouterr().out.strip().endswith("2 timeline(s) valid")
    assert datagen_main(["import-bfcl", "--category", "multi_turn_base", "--out", str(tmp_path / "x"),
                         "--data-dir", str(tmp_path / "nothing")]) == 2  # fmt: skip
    assert "no such file" in capsys.readouterr().err


def test_runtime_oracle_replays_bfcl_ground_truth_to_the_same_state(imported):
    from clocktune.runtime.play import run_policy
    from clocktune.runtime.scripted import ScriptedPolicy
    from clocktune.runtime.session import SessionConfig
    from data_gen.backends import make_backend

    timelines = [t for path in imported.values() for t in read_timelines(path)]
    for name in ("oracle", "sync", "speculative"):
        run = run_policy(name, timelines, lambda t, n=name: ScriptedPolicy(t, n), make_backend, SessionConfig())
        assert all(r.state_ok and r.calls_ok and r.end_reason == "done" for r in run.results), name
        assert sum(r.side_effect_violations for r in run.results) == 0


def test_doc_fix_lets_bfcl_string_ticket_ids_validate():
    schema = doc_to_schema(
        {"name": "close_ticket", "parameters": {"type": "dict", "properties": {"ticket_id": {"type": "integer"}}}},
        "TicketAPI",
    )
    assert schema.parameters["properties"]["ticket_id"]["type"] == ["integer", "string"]
