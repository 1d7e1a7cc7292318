"""Your own tools and data: a YAML domain outside the package generates, validates, renders, trains and evaluates;
a plugin package is found through its entry point; a malformed domain file is one error line naming file:line:key;
``validate`` says when it cannot replay ground truth, and ``--strict`` makes that an issue."""

import json
import math
import re
import sys
from pathlib import Path

import pytest
import yaml

from clocktune.cli import main as clocktune_main
from clocktune.timeline import read_timelines, validate_timeline
from clocktune.timeline.io import write_timelines
from data_gen.backends import make_backend, serves, session_backends
from data_gen.cli import main as datagen_main
from data_gen.config import GeneratorConfig
from data_gen.dialogues import select_domains
from data_gen.plugins import clear_registry, find_plugin, registered_plugins

REPO = Path(__file__).resolve().parents[1]

THERMOSTAT = {
    "name": "thermostat",
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "get_temperature",
                "description": "The temperature in a room.",
                "parameters": {
                    "type": "object",
                    "properties": {"room": {"type": "string", "enum": ["kitchen", "study"]}},
                    "required": ["room"],
                },
            },
            "latency_s": 0.4,
        },
        {
            "name": "get_preference",
            "description": "The temperature the user usually wants in a room.",
            "parameters": {"type": "object", "properties": {"room": {"type": "string"}}, "required": ["room"]},
        },
        {
            "name": "set_temperature",
            "description": "Sets a room's thermostat.",
            "parameters": {
                "type": "object",
                "properties": {"room": {"type": "string"}, "celsius": {"type": "number"}},
                "required": ["room", "celsius"],
            },
            "side_effect": True,
        },
    ],
    "state": {"rooms": ["kitchen", "study"]},
    "backend": {
        "responses": [
            {"tool": "get_temperature", "arguments": {"room": "kitchen"}, "result": {"celsius": 19.5}},
            {"tool": "get_temperature", "arguments": {"room": "study"}, "result": {"celsius": 22}},
            {"tool": "get_preference", "arguments": {"room": "kitchen"}, "result": {"celsius": 21}},
            {"tool": "get_preference", "arguments": {"room": "study"}, "result": {"celsius": 20}},
            {"tool": "set_temperature", "arguments": {"room": "kitchen", "celsius": 21}, "result": {"ok": True}},
            {"tool": "set_temperature", "arguments": {"room": "study", "celsius": 20}, "result": {"ok": True}},
        ]
    },
    "tasks": [
        {
            "name": "read",
            "slots": {"room": ["kitchen", "study"]},
            "turns": [
                {
                    "utterance": [
                        {"say": ["how warm is it in the", "what's the temperature in the"]},
                        {"say": "{room}", "reading": {"calls": ["t"], "confidence": "confident"}},
                    ],
                    "calls": {"t": {"tool": "get_temperature", "arguments": {"room": "{room}"}}},
                    "answer": {"text": "It's {t.celsius} degrees in the {room}.", "facts": ["{t.celsius}"]},
                }
            ],
        },
        {
            "name": "usual",
            "weight": 2,
            "slots": {"room": ["kitchen", "study"]},
            "turns": [
                {
                    "utterance": [
                        {"say": "set the {room}", "reading": {"calls": ["pref"], "confidence": "unsure"}},
                        {"say": ["to my usual", "the way I like it"], "reading": {"calls": ["set"]}},
                    ],
                    "calls": {
                        "pref": {"tool": "get_preference", "arguments": {"room": "{room}"}},
                        "set": {
                            "tool": "set_temperature",
                            "arguments": {"room": "{room}", "celsius": {"$ref": "pref.celsius"}},
                        },
                    },
                    "answer": {"text": "The {room} is set to {pref.celsius} degrees.", "facts": ["{pref.celsius}"]},
                }
            ],
        },
    ],
}


def write_domain(folder: Path, domain: dict, name: str = "thermostat.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump(domain, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[Path, Path]:
    """A thermostat domain file outside the package and 24 dialogues generated from it."""
    root = tmp_path_factory.mktemp("declarative")
    domain_file = write_domain(root / "domains", THERMOSTAT)
    out = root / "out"
    argv = ["generate", "--domain", str(domain_file), "--num", "24", "--seed", "0", "--out", str(out), "--quiet"]
    assert datagen_main(argv) == 0
    return domain_file, out


def test_a_yaml_domain_outside_the_package_generates_valid_timelines(generated):
    domain_file, out = generated
    timelines = read_timelines(next((out / "data").glob("*.jsonl")))
    assert len(timelines) == 24 and {t.domain for t in timelines} == {"thermostat"}
    assert {t.task for t in timelines} >= {"read", "usual"}
    for timeline in timelines:
        assert validate_timeline(timeline) == [], timeline.id
    usual = next(t for t in timelines if t.task == "usual")
    # The $ref reached the backend resolved, and the recorded response table answered it.
    assert usual.ground_truth.calls[-1].arguments["celsius"] in (21, 20)
    assert usual.initial_state["domain_file"]["path"] == str(domain_file.resolve())
    stamp = json.loads((out / "generation.json").read_text())
    assert len(stamp["domain_files_sha256"]) == 1 and stamp["config"]["domain_files"] == [str(domain_file)]


def test_validate_replays_the_ground_truth_of_a_yaml_domain(generated, capsys):
    _, out = generated
    assert datagen_main(["validate", "--strict", "--trust-domain-code", str(out / "data")]) == 0
    printed = capsys.readouterr().out
    assert "24 timeline(s) valid" in printed and "not replayed" not in printed
    timeline = read_timelines(next((out / "data").glob("*.jsonl")))[0]
    assert serves(timeline) and make_backend(timeline).state()["state"] == THERMOSTAT["state"]


def test_a_changed_domain_file_refuses_a_rerun_and_its_timelines_backend(generated, tmp_path, capsys):
    domain_file, out = generated
    copy = write_domain(tmp_path, THERMOSTAT)
    argv = ["generate", "--domain", str(copy), "--num", "4", "--out", str(tmp_path / "out"), "--quiet"]
    assert datagen_main(argv) == 0
    changed = json.loads(json.dumps(THERMOSTAT))
    changed["tasks"][0]["turns"][0]["answer"]["text"] = "{t.celsius} degrees."
    write_domain(tmp_path, changed)
    assert datagen_main(argv) == 2
    assert "other settings (domain_files_sha256)" in capsys.readouterr().err
    timeline = read_timelines(next((tmp_path / "out" / "data").glob("*.jsonl")))[0]
    with pytest.raises(ValueError, match="has changed since the timeline was generated"):
        make_backend(timeline)
    assert datagen_main(["validate", str(tmp_path / "out" / "data")]) == 0
    assert "warning: ground truth of 4 timeline(s) not replayed" in capsys.readouterr().out


def test_a_yaml_domains_timelines_render(generated, tmp_path):
    from tests.tiny_tokenizer import tiny_tokenizer

    _, out = generated
    tiny_tokenizer("chatml").save_pretrained(tmp_path / "tokenizer")
    argv = ["render", "--input", str(out / "data"), "--tokenizer", str(tmp_path / "tokenizer")]
    argv += ["--model-format", "chatml", "--max-length", "2048", "--out", str(tmp_path / "rendered"), "--quiet"]
    assert clocktune_main(argv) == 0
    summary = json.loads((tmp_path / "rendered" / "render_summary.json").read_text())
    assert summary["timelines"] == 24


def test_a_tiny_model_trains_on_a_yaml_domain(generated, tmp_path):
    from clocktune.train.sft import run
    from tests.test_train import sft_args, tiny_model_dir

    _, out = generated
    trainer, _ = run(
        sft_args(tiny_model_dir(tmp_path, "llama"), out / "data", tmp_path / "run"), backends=session_backends
    )
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    assert (tmp_path / "run" / "config.json").exists()


def test_eval_finds_the_yaml_domains_backend_from_another_folder(generated, tmp_path, monkeypatch):
    _, out = generated
    monkeypatch.chdir(tmp_path)  # the timelines name the domain file by its resolved path
    assert clocktune_main(["eval", "--data", str(out / "data"), "--out", str(tmp_path / "eval")]) == 0
    lines = [json.loads(line) for line in (tmp_path / "eval" / "results.jsonl").read_text().splitlines()]
    assert len(lines) >= 48 and all(line["accurate"] for line in lines), [line["failure"] for line in lines]


def test_the_example_domain_with_a_python_backend_generates_and_validates(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["generate", "--domain", str(REPO / "examples" / "pharmacy.yaml"), "--num", "30", "--out", str(out)]
    assert datagen_main([*argv, "--quiet"]) == 0
    timelines = read_timelines(next((out / "data").glob("*.jsonl")))
    refills = [t for t in timelines if t.task == "refill"]
    assert refills and all(t.ground_truth.final_state != t.initial_state for t in refills)  # the write changed state
    assert datagen_main(["validate", "--strict", "--trust-domain-code", str(out / "data")]) == 0
    assert "30 timeline(s) valid" in capsys.readouterr().out


def test_a_json_domain_file_generates_like_a_yaml_one(tmp_path):
    (tmp_path / "thermostat.json").write_text(json.dumps(THERMOSTAT), encoding="utf-8")
    out = tmp_path / "out"
    argv = ["generate", "--domain", str(tmp_path / "thermostat.json"), "--num", "5", "--out", str(out), "--quiet"]
    assert datagen_main(argv) == 0
    assert {t.domain for t in read_timelines(next((out / "data").glob("*.jsonl")))} == {"thermostat"}


PLUGIN_MODULE = """
from data_gen.domains.base import Domain, tool
from data_gen.plugins import DomainBackend, DomainPlugin
from data_gen.task import Answer, Task, call

TOOLS = [
    tool("lemonade_price", "Price of a cup.", {"size": {"type": "string", "enum": ["small", "large"]}}),
    tool("buy_lemonade", "Buys a cup.", {"size": {"type": "string", "enum": ["small", "large"]}}, side_effect=True),
]


def execute(state, name, arguments):
    if name == "lemonade_price":
        return {"price": state["prices"][arguments["size"]]}
    state["sold"] += 1
    return {"ok": True}


def buy(ctx):
    size = ctx.pick(["small", "large"])
    u = ctx.utterance()
    u.say("a", size, "lemonade").reading([call("p", "lemonade_price", size=size)], ctx.confident())
    u.say("please buy one").reading(
        [call("p", "lemonade_price", size=size), call("b", "buy_lemonade", size=size)], ctx.confident()
    )
    return Task("buy", [u.done(answer=lambda r: Answer(f"{r['p']['price']} dollars, bought.", [str(r['p']['price'])]))])


DOMAIN = Domain("lemonade", TOOLS, lambda rng: {"prices": {"small": 2, "large": 3}, "sold": 0}, execute, [(buy, 1.0)])
PLUGIN = DomainPlugin("lemonade", lambda t: DomainBackend(DOMAIN, dict(t.initial_state)), DOMAIN)
IMPORTED = DomainPlugin("stand", lambda t: DomainBackend(DOMAIN, dict(t.initial_state)), prefix=True)
"""


@pytest.fixture
def plugin_package(tmp_path, monkeypatch):
    """A tiny installed package: a minimal dist-info whose entry points importlib.metadata reads from sys.path."""
    site = tmp_path / "site"
    info = site / "lemonade_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lemonade-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[clocktune.domains]\nlemonade = lemonade_plugin:PLUGIN\nstand = lemonade_plugin:IMPORTED\n"
        "missing = no_such_module_anywhere:PLUGIN\n"
    )
    (site / "lemonade_plugin.py").write_text(PLUGIN_MODULE)
    monkeypatch.syspath_prepend(str(site))  # also invalidates importlib's caches
    clear_registry()
    yield site
    clear_registry()
    sys.modules.pop("lemonade_plugin", None)


def test_an_installed_plugin_package_is_found_through_its_entry_point(plugin_package, tmp_path):
    assert {"lemonade", "stand", "banking", "bfcl"} <= set(registered_plugins())
    assert "lemonade" in [domain.name for domain in select_domains(GeneratorConfig())]  # in the default mix
    out = tmp_path / "out"
    assert datagen_main(["generate", "--domain", "lemonade", "--num", "6", "--out", str(out), "--quiet"]) == 0
    timelines = read_timelines(next((out / "data").glob("*.jsonl")))
    assert {t.domain for t in timelines} == {"lemonade"}
    bought = next(t for t in timelines if t.task == "buy")
    backend = make_backend(bought)
    backend.execute("buy_lemonade", {"size": "small"})
    assert backend.state()["sold"] == 1
    # An import-only prefix plugin serves "stand", "stand-..." and "stand:...", not "standard".
    assert find_plugin("stand:june").name == "stand" and find_plugin("stand-2") is not None
    assert find_plugin("standard") is None and registered_plugins()["stand"].domain is None


def test_a_broken_entry_point_is_named_only_where_its_domain_is_needed(plugin_package, tmp_path, capsys):
    assert "missing" not in registered_plugins() and find_plugin("banking") is not None
    with pytest.raises(ValueError, match="entry point missing = 'no_such_module_anywhere:PLUGIN'"):
        find_plugin("missing")
    out = str(tmp_path / "out")
    assert datagen_main(["generate", "--domain", "missing", "--num", "2", "--out", out, "--quiet"]) == 2
    assert "no_such_module_anywhere" in capsys.readouterr().err


def _malformed(change) -> dict:
    domain = json.loads(json.dumps(THERMOSTAT))
    change(domain)
    return domain


MALFORMED = {
    "unknown key": (lambda d: d.update(colour="red"), r":\d+:colour: Unexpected keyword argument"),
    "unknown tool": (
        lambda d: d["tasks"][0]["turns"][0]["calls"]["t"].update(tool="get_humidity"),
        r":\d+:tasks\.0\.turns\.0\.calls\.t\.tool: unknown tool 'get_humidity'",
    ),
    "unknown $ref": (
        lambda d: d["tasks"][1]["turns"][0]["calls"]["set"]["arguments"].update(celsius={"$ref": "nope.celsius"}),
        r":\d+:tasks\.1\.turns\.0\.calls\.set\.arguments: \$ref 'nope\.celsius' names no call",
    ),
    "bad JSON Schema": (
        lambda d: d["tools"][1]["parameters"]["properties"]["room"].update(type="strnig"),
        r":\d+:tools\.1\.parameters: not a valid JSON Schema",
    ),
    "missing field": (lambda d: d.pop("backend"), r":backend: Field required"),
    "slot value the schema refuses": (
        lambda d: d["tasks"][0]["slots"]["room"].append("attic"),
        r":\d+:tasks\.0\.turns\.0\.calls\.t\.arguments\.room: slot 'room' takes values .* \['attic'\]",
    ),
    "placeholder naming nothing": (
        lambda d: d["tasks"][0]["turns"][0]["answer"].update(text="It's {t.celsius} in the {place}."),
        r":\d+:tasks\.0\.turns\.0\.answer: placeholder \{place\} names no slot or call",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_domain_file_is_one_error_line_naming_file_line_and_key(case, tmp_path, capsys):
    change, pattern = MALFORMED[case]
    path = write_domain(tmp_path, _malformed(change))
    argv = ["generate", "--domain", str(path), "--num", "2", "--out", str(tmp_path / "out"), "--quiet"]
    assert datagen_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    assert re.search(re.escape(str(path)) + pattern, err), err
    assert not (tmp_path / "out" / "generation.json").exists()


def test_validate_warns_about_timelines_no_backend_serves_and_strict_fails(generated, tmp_path, capsys):
    from dataclasses import replace

    _, out = generated
    timelines = read_timelines(next((out / "data").glob("*.jsonl")))[:3]
    unserved = [replace(timeline, domain="nowhere", initial_state={}) for timeline in timelines]
    write_timelines(tmp_path / "mixed.jsonl", timelines + unserved)
    assert datagen_main(["validate", str(tmp_path / "mixed.jsonl")]) == 0
    printed = capsys.readouterr().out.splitlines()
    warnings = [line for line in printed if line.startswith("warning:")]
    assert len(warnings) == 1 and "3 timeline(s) not replayed" in warnings[0] and "nowhere" in warnings[0]
    assert printed[-1] == "6 timeline(s) valid"
    assert datagen_main(["validate", "--strict", str(tmp_path / "mixed.jsonl")]) == 1
    printed = capsys.readouterr().out.splitlines()
    assert any(line.startswith("error: ground truth of 3 timeline(s) not replayed") for line in printed)
    assert printed[-1] == "1 issue(s) on 0 of 6 timeline(s)"
