"""Bad input to either command line: one line ``error: ...`` (or argparse's usage error), exit 2, no traceback, and
nothing written that the corrected command then refuses.

One row per input. Each runs in this process through ``clocktune.cli.main`` or ``data_gen.cli.main``; a row that
writes (or could write) into an ``--out`` folder also names the corrected command, which must then succeed in the
same folder. Timeline-level bad input (bad event times, deep JSON) is tested with the timeline format.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from clocktune.cli import main as clocktune_main
from clocktune.clock import PROFILES, DeviceProfile, SpeechConfig, ToolLatencyConfig
from data_gen.cli import main as datagen_main
from data_gen.config import GeneratorConfig, PlannerConfig, load_config

pytestmark = pytest.mark.usefixtures("bounded")  # every hostile input is refused in bounded time and memory

ROOT = Path(__file__).resolve().parents[1]
GOOD_CONFIG = "no_tool_rate: 0.2\nspeech:\n  words_per_s: 2.5\n"
DEVICE = "device:\n  name: d\n  prefill_tokens_per_s: 1000.0\n  action_overhead_s: 0.01\n  decode_tokens_per_s: "
PROFILE = "name: p\nprefill_tokens_per_s: 1000.0\ndecode_tokens_per_s: 50.0\naction_overhead_s: 0.02\n"
GEN = ("generate", "--num", "3", "--out", "{tmp}/out", "--quiet")
GEN_BAD = ("generate", "--config", "{tmp}/bad.yaml", "--num", "3", "--out", "{tmp}/out", "--quiet")
GEN_FIXED = ("generate", "--config", "{tmp}/good.yaml", "--num", "3", "--out", "{tmp}/out", "--quiet")
SHARDS = ("generate", "--num", "4", "--shard-size", "2", "--out", "{tmp}/out", "--quiet")
EVAL = ("eval", "--data", "{data}", "--profile", "{tmp}/profile.yaml", "--out", "{tmp}/eval")
RENDER = ("render", "--input", "{data}", "--tokenizer", "embedded", "--model-format", "chatml")


def _generate(*argv: str) -> Callable[[Path], None]:
    def prepare(tmp: Path) -> None:
        assert datagen_main([arg.format(tmp=tmp) for arg in argv]) == 0

    return prepare


def _damage(name: str, content: bytes | None) -> Callable[[Path], None]:
    """Overwrites a shard with ``content``, or (``None``) cuts it in the middle of its last line."""

    def damage(tmp: Path) -> None:
        path = tmp / "out" / "data" / name
        data = path.read_bytes()
        path.write_bytes(data[: len(data) - len(data.splitlines()[-1]) // 2 - 1] if content is None else content)

    return damage


def _delete(name: str) -> Callable[[Path], None]:
    return lambda tmp: (tmp / "out" / "data" / name).unlink()


@dataclass(frozen=True)
class Row:
    """One bad input.

    Args:
        id: The test id.
        cli: ``clocktune`` or ``datagen``.
        argv: The command line; ``{tmp}`` is the test's folder, ``{data}`` a small timeline file.
        code: The exit status expected.
        message: A substring of the error line.
        files: Files to create under ``{tmp}`` first (path -> text).
        prepare: Runs before the command (after ``files``), e.g. a first successful run.
        fix: Runs before the corrected command (rewrites a file, deletes a damaged shard).
        fixed: The corrected command, which must exit 0 afterwards in the same folders (``None``: not applicable).
    """

    id: str
    cli: str
    argv: tuple[str, ...]
    code: int
    message: str
    files: dict[str, str] = field(default_factory=dict)
    prepare: Callable[[Path], None] | None = None
    fix: Callable[[Path], None] | None = None
    fixed: tuple[str, ...] | None = None


def _config_row(id: str, yaml_text: str, message: str) -> Row:
    # A bad generator config, then the good one into the same --out: the failed run must have stamped nothing.
    files = {"bad.yaml": yaml_text, "good.yaml": GOOD_CONFIG}
    return Row(id, "datagen", GEN_BAD, 2, message, files=files, fixed=GEN_FIXED)


def _profile_row(id: str, yaml_text: str, message: str) -> Row:
    fix = lambda tmp: (tmp / "profile.yaml").write_text(PROFILE)  # noqa: E731
    return Row(id, "clocktune", EVAL, 2, message, files={"profile.yaml": yaml_text}, fix=fix, fixed=EVAL)


def _flag_row(id: str, cli: str, argv: tuple[str, ...], message: str, fixed: tuple[str, ...] | None = None) -> Row:
    return Row(id, cli, argv, 2, message, fixed=fixed)


def _cut_lines(name: str) -> Callable[[Path], None]:
    """Keeps the first line of a shard only: it parses, but holds too few timelines."""

    def cut(tmp: Path) -> None:
        path = tmp / "out" / "data" / name
        path.write_text(path.read_text().splitlines(keepends=True)[0])

    return cut


def _shard_row(id: str, fmt: str, name: str, damage: Callable[[Path], None], message: str) -> Row:
    # A first run completes; one shard is then damaged. The rerun refuses it, naming it (data_gen.writer._read_shard
    # says why it does not regenerate it); once it is deleted, the same command regenerates it.
    argv = (*SHARDS, "--format", fmt)

    def prepare(tmp: Path) -> None:
        _generate(*argv)(tmp)
        damage(tmp)

    return Row(id, "datagen", argv, 2, f"{name}: {message}", prepare=prepare, fix=_delete(name), fixed=argv)


OUT_IS_A_FILE = [
    ("generate", "datagen", GEN[:3]),
    ("import-bfcl", "datagen", ("import-bfcl", "--category", "multi_turn_base")),
    ("eval", "clocktune", ("eval", "--data", "{data}")),
    ("render", "clocktune", RENDER),
]
JSONL_0, JSONL_1 = "train-00000-of-00002.jsonl", "train-00001-of-00002.jsonl"
PARQUET_0, PARQUET_1 = "train-00000-of-00002.parquet", "train-00001-of-00002.parquet"

ROWS = [
    # Generator configs: the rules declared on the config dataclasses' fields.
    _config_row("words_per_s-nan", "speech:\n  words_per_s: .nan\n", "bad.yaml:speech.words_per_s: Input should be a finite"),
    _config_row("failure_rate-2", "tools:\n  failure_rate: 2\n", "bad.yaml:tools.failure_rate: Input should be less than"),
    _config_row("no_tool_rate-1.5", "no_tool_rate: 1.5\n", "bad.yaml:no_tool_rate: Input should be less than or equal to 1"),
    _config_row("median_scale--1", "tools:\n  median_scale: -1\n", "bad.yaml:tools.median_scale: Input should be greater"),
    _config_row("device-decode-0", DEVICE + "0\n", "bad.yaml:device.decode_tokens_per_s: Input should be greater than or"),
    _config_row("device-decode--5", DEVICE + "-5\n", "bad.yaml:device.decode_tokens_per_s: Input should be greater"),
    _config_row("device-partial", "device:\n  name: d\n", "bad.yaml:device.prefill_tokens_per_s: Field required"),
    _config_row("pause-min-over-max", "speech:\n  pause_min_s: 0.9\n", "bad.yaml:speech: pause_min_s (0.9) must not"),
    _config_row("threshold-1", "planner:\n  threshold: 1\n", "bad.yaml:planner.threshold: Input should be less than 1"),
    # Past the credible ranges: each would stall the virtual clock or overflow mid-generation, after the stamp.
    _config_row("pause_min_s-1e9", "speech:\n  pause_min_s: 1e9\n  pause_max_s: 2e9\n",
                "bad.yaml:speech.pause_min_s: Input should be less than or equal to 60"),
    _config_row("words_per_s-1e-9", "speech:\n  words_per_s: 1e-9\n",
                "bad.yaml:speech.words_per_s: Input should be greater than or equal to 0.5"),
    _config_row("tools-sigma-1e6", "tools:\n  sigma: 1e6\n", "bad.yaml:tools.sigma: Input should be less than or equal to 3"),
    _config_row("device-decode-1e-300", DEVICE + "1e-300\n",
                "bad.yaml:device.decode_tokens_per_s: Input should be greater than or equal to 1"),
    _config_row("device-overhead-1e9", DEVICE.replace("action_overhead_s: 0.01", "action_overhead_s: 1e9") + "50\n",
                "bad.yaml:device.action_overhead_s: Input should be less than or equal to 10"),
    # Unique keys, bounded aliases, a regular file.
    _config_row("duplicate-key", "speech:\n  words_per_s: 2.0\n  words_per_s: 3.0\n", "bad.yaml:3:words_per_s: duplicate key"),
    _config_row("alias-bomb", "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(7)),
        "bad.yaml: not valid YAML (anchors and aliases expand to more than 1,000,000 nodes"),
    Row("config-is-a-fifo", "datagen", GEN_BAD, 2, "{tmp}/bad.yaml: not a regular file",
        prepare=lambda tmp: os.mkfifo(tmp / "bad.yaml"), files={"good.yaml": GOOD_CONFIG}, fixed=GEN_FIXED),
    _config_row("malformed-yaml", "speech: [words_per_s: 3\n", "bad.yaml: not valid YAML (line "),
    _config_row("yaml-list", "- speech\n- tools\n", "bad.yaml: a generator config is a mapping of keys to values, got"),
    # Passes validation, fails when the domains are selected: still before the settings stamp is written.
    _config_row("unknown-domain", "domains: [no_such_domain]\n", "unknown domain(s) ['no_such_domain']"),
    # Device profiles for eval: every field required, the same rules as in a generator config.
    _profile_row("profile-missing-field", PROFILE.replace("decode_tokens_per_s: 50.0\n", ""),
                 "profile.yaml:decode_tokens_per_s: Field required"),
    _profile_row("profile-rate-0", PROFILE.replace("1000.0", "0"),
                 "profile.yaml:prefill_tokens_per_s: Input should be greater than or equal to 10"),
    _profile_row("profile-decode-1e-300", PROFILE.replace("50.0", "1e-300"),
                 "profile.yaml:decode_tokens_per_s: Input should be greater than or equal to 1"),
    _profile_row("profile-overhead-1e9", PROFILE.replace("0.02", "1e9"),
                 "profile.yaml:action_overhead_s: Input should be less than or equal to 10"),
    _profile_row("profile-not-a-mapping", "[1, 2]\n", "a device profile is a mapping of keys to values, got a list"),
    # Numeric flags, refused by argparse (clocktune.cli.arguments) before anything runs.
    _flag_row("num--1", "datagen", (*GEN[:2], "-1", *GEN[3:]), "argument --num: must be ≥ 1, got -1", fixed=GEN),
    _flag_row("num-text", "datagen", (*GEN[:2], "ten", *GEN[3:]), "argument --num: must be an integer, got 'ten'"),
    _flag_row("shard-size-0", "datagen", (*GEN, "--shard-size", "0"), "argument --shard-size: must be ≥ 1, got 0",
              fixed=GEN),
    _flag_row("num-proc-0", "datagen", (*GEN, "--num-proc", "0"), "argument --num-proc: must be ≥ 1, got 0"),
    _flag_row("show-index--1", "datagen", ("show", "{data}", "--index", "-1"), "argument --index: must be ≥ 0, got -1"),
    _flag_row("bfcl-limit-0", "datagen", (*OUT_IS_A_FILE[1][2], "--out", "{tmp}/b", "--limit", "0"),
              "argument --limit: must be ≥ 1, got 0"),
    _flag_row("eval-limit-0", "clocktune", (*EVAL[:-4], "--limit", "0", *EVAL[-2:]),
              "argument --limit: must be ≥ 1, got 0", fixed=(*EVAL[:-4], "--limit", "2", *EVAL[-2:])),
    _flag_row("eval-limit--1", "clocktune", (*EVAL, "--limit", "-1"), "argument --limit: must be ≥ 1, got -1"),
    _flag_row("eval-failure-rate-5", "clocktune", (*EVAL, "--failure-rate", "5"),
              "argument --failure-rate: must be in [0, 1], got 5"),
    _flag_row("eval-failure-rate-nan", "clocktune", (*EVAL, "--failure-rate", "nan"),
              "argument --failure-rate: must be in [0, 1], got nan"),
    _flag_row("eval-concurrency-0", "clocktune", (*EVAL, "--concurrency", "0"),
              "argument --concurrency: must be ≥ 1, got 0"),
    _flag_row("eval-request-timeout-0", "clocktune", (*EVAL, "--request-timeout", "0"),
              "argument --request-timeout: must be a finite number > 0, got 0"),
    _flag_row("eval-endpoint-budget-inf", "clocktune", (*EVAL, "--endpoint-budget", "inf"),
              "argument --endpoint-budget: must be a finite number > 0, got inf"),
    # A key over plain http to a host that is not loopback is refused before any connection is made.
    Row("eval-key-over-plain-http", "clocktune", (*EVAL, "--model", "openai:m@http://example.invalid/v1"), 2,
        "http", files={"profile.yaml": PROFILE}),
    _flag_row("render-max-length-0", "clocktune", (*RENDER, "--out", "{tmp}/r", "--max-length", "0"),
              "argument --max-length: must be ≥ 1, got 0"),
    _flag_row("inspect-index--1", "clocktune", ("inspect", "{data}", "--tokenizer", "embedded", "--index", "-1"),
              "argument --index: must be ≥ 0, got -1"),
    _flag_row("profile-context-tokens-0", "clocktune", ("profile", "--context-tokens", "0"),
              "argument --context-tokens: must be ≥ 1, got 0"),
    # --out that cannot be a folder, refused by argparse before any work.
    *[
        Row(f"out-is-a-file-{name}", cli, (*argv, "--out", "{tmp}/taken"), 2, "argument --out: {tmp}/taken is a file",
            files={"taken": "a file\n"})
        for name, cli, argv in OUT_IS_A_FILE
    ],
    Row("profile-out-is-a-folder", "clocktune", ("profile", "--out", "{tmp}"), 2, "argument --out: {tmp} is a folder"),
    # Root writes into read-only folders, so a folder that cannot be made stands in for one: a folder under a file
    # (NotADirectoryError), which argparse finds. A file-system error met later (PermissionError for other users)
    # takes the path of the next two rows.
    Row("out-under-a-file", "datagen", (*GEN[:3], "--out", "{tmp}/taken/out"), 2,
        "{tmp}/taken/out would go under {tmp}/taken, which is a file", files={"taken": "a file\n"}),
    # OSErrors met while writing, reported by the command's main as `path: reason`.
    Row("stamp-is-a-folder", "datagen", GEN, 2, "{tmp}/out/generation.json: Is a directory",
        files={"out/generation.json/x": ""}),
    Row("eval-journal-is-a-file", "clocktune", EVAL, 2, "{tmp}/eval/journal: File exists",
        files={"profile.yaml": PROFILE, "eval/journal": "a file\n"}),
    # Resuming into a damaged shard.
    _shard_row("truncated-jsonl-shard", "jsonl", JSONL_1, _damage(JSONL_1, None), "a damaged shard"),
    _shard_row("jsonl-shard-cut-at-a-line", "jsonl", JSONL_0, _cut_lines(JSONL_0), "a damaged shard"),
    _shard_row("garbage-parquet-shard", "parquet", PARQUET_0, _damage(PARQUET_0, b"not parquet"), "a damaged shard"),
    _shard_row("empty-parquet-shard", "parquet", PARQUET_1, _damage(PARQUET_1, b""), "a damaged shard"),
]  # fmt: skip


@pytest.fixture(scope="module")
def data_file(tmp_path_factory) -> Path:
    from clocktune.timeline.io import write_timelines
    from data_gen.generate import generate_dialogue

    path = tmp_path_factory.mktemp("data") / "few.jsonl"
    write_timelines(path, [generate_dialogue(i, 0, GeneratorConfig()) for i in range(4)])
    return path


def _run(cli: str, argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = (clocktune_main if cli == "clocktune" else datagen_main)(argv)
    except SystemExit as exit:  # argparse
        code = exit.code
    return code, capsys.readouterr().err


def _assert_one_error(err: str, message: str) -> None:
    assert "Traceback" not in err, err
    lines = err.splitlines()
    if lines and lines[0].startswith("usage:"):
        # argparse's form: the usage (wrapped over a few lines), then "prog command: error: argument ...".
        assert ": error: argument " in lines[-1], err
        assert not any(": error: " in line for line in lines[:-1]), err
    else:
        assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert message in lines[-1], err


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_bad_input_is_one_error_line_and_poisons_nothing(row: Row, tmp_path, data_file, capsys):
    def expand(argv: tuple[str, ...]) -> list[str]:
        return [arg.format(tmp=tmp_path, data=data_file) for arg in argv]

    for name, text in row.files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    if row.prepare is not None:
        row.prepare(tmp_path)

    code, err = _run(row.cli, expand(row.argv), capsys)
    assert code == row.code, err
    _assert_one_error(err, row.message.format(tmp=tmp_path))

    if row.fix is not None:
        row.fix(tmp_path)
    if row.fixed is not None:
        code, err = _run(row.cli, expand(row.fixed), capsys)
        assert code == 0, err
    if row.fix is not None and row.cli == "datagen":
        # The resumed dataset is the one a fresh run writes, byte for byte.
        fresh = expand(row.fixed)
        fresh[fresh.index(f"{tmp_path}/out")] = f"{tmp_path}/fresh"
        assert datagen_main(fresh) == 0
        files = sorted(p.relative_to(tmp_path / "fresh") for p in (tmp_path / "fresh").rglob("*") if p.is_file())
        assert files == sorted(p.relative_to(tmp_path / "out") for p in (tmp_path / "out").rglob("*") if p.is_file())
        for name in files:
            assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "fresh" / name).read_bytes(), name


def test_python_construction_checks_the_same_rules():
    with pytest.raises(ValueError, match=r"SpeechConfig\.words_per_s: Input should be a finite number, got nan"):
        SpeechConfig(words_per_s=math.nan)
    with pytest.raises(ValueError, match=r"ToolLatencyConfig\.failure_rate: .* less than or equal to 1, got 2"):
        replace(ToolLatencyConfig(), failure_rate=2)
    with pytest.raises(ValueError, match=r"DeviceProfile\.decode_tokens_per_s: Input should be greater than or eq"):
        DeviceProfile("d", 1000.0, 0.0, 0.0)
    with pytest.raises(ValueError, match=r"PlannerConfig\.threshold"):
        PlannerConfig(threshold=1.0)
    with pytest.raises(ValueError, match=r"GeneratorConfig\.no_tool_rate"):
        GeneratorConfig(no_tool_rate=-0.1)
    with pytest.raises(ValueError, match="chunk_words_min .* must not exceed chunk_words_max"):
        SpeechConfig(chunk_words_min=4)
    # Built in Python a profile's fields default to h200-3b's (only a file must give them all: the rows above).
    assert DeviceProfile() == PROFILES["h200-3b"] == DeviceProfile("h200-3b", 20000.0, 150.0, 0.01)


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "datagen").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_generator_config_keeps_the_rules(path):
    assert isinstance(load_config(path), GeneratorConfig)


@pytest.fixture(autouse=True)
def _api_key(monkeypatch):
    # The endpoint rows need a key to refuse sending; no row ever reaches a server.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")


def _timeline_line(change: Callable[[dict], None]) -> str:
    import json

    from clocktune.timeline.io import timeline_to_record
    from data_gen.generate import generate_dialogue

    record = json.loads(json.dumps(timeline_to_record(generate_dialogue(0, 0, GeneratorConfig()))))
    change(record)
    return json.dumps(record) + "\n"


def _deep_arguments(record: dict) -> None:
    call = next(event for event in record["events"] if event.get("arguments"))
    call["arguments"] = "[" * 10_000 + "]" * 10_000


def _nan_final_chunk(record: dict) -> None:
    next(event for event in record["events"] if event.get("final") and event["kind"] == "user_chunk")["t"] = "NaN"


def _set_first(kind: str, name: str, value) -> Callable[[dict], None]:
    def change(record: dict) -> None:
        next(event for event in record["events"] if event["kind"] == kind)[name] = value

    return change


TIMELINE_INPUTS = {
    "deep-arguments": (_deep_arguments, "arguments: Value error, JSON nested deeper than 100 levels"),
    "deep-line": (None, "JSON nested deeper than 100 levels"),
    "nan-final-chunk": (_nan_final_chunk, ".t: "),
    # Strict types: nothing coerced into what the file did not say.
    "t-true": (_set_first("user_chunk", "t", True), "events.0.t: Input should be a valid number"),
    "t-string": (_set_first("user_chunk", "t", "1.2"), "events.0.t: Input should be a valid number"),
    "final-yes": (_set_first("user_chunk", "final", "yes"), "events.0.final: Input should be a valid boolean"),
    "seed-float": (lambda record: record.update(seed=1.5), ":1:seed: Input should be a valid integer"),
    "duplicate-key": ("duplicate", ":1:seed: duplicate key"),
}
TIMELINE_COMMANDS = {
    "validate": ("datagen", ("validate", "{file}"), 1),
    "show": ("datagen", ("show", "{file}"), 1),
    "eval": ("clocktune", ("eval", "--data", "{file}", "--out", "{tmp}/eval"), 2),
    "render": ("clocktune", ("render", "--input", "{file}", "--tokenizer", "embedded", "--model-format", "chatml",
                             "--out", "{tmp}/rendered"), 2),
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(TIMELINE_COMMANDS))
@pytest.mark.parametrize("bad", sorted(TIMELINE_INPUTS))
def test_a_hostile_timeline_is_named_by_file_line_and_field_by_every_command(bad, command, tmp_path, capsys):
    change, message = TIMELINE_INPUTS[bad]
    path = tmp_path / "bad.jsonl"
    if change is None:
        path.write_text("[" * 10_000 + "]" * 10_000 + "\n")
    elif change == "duplicate":
        path.write_text(_timeline_line(lambda record: None).replace("{", '{"seed": 7, ', 1))
    else:
        path.write_text(_timeline_line(change).replace('"NaN"', "NaN"))
    cli, argv, expected = TIMELINE_COMMANDS[command]
    capsys.readouterr()
    code = (clocktune_main if cli == "clocktune" else datagen_main)([a.format(file=path, tmp=tmp_path) for a in argv])
    printed = capsys.readouterr()
    report = printed.out + printed.err  # validate lists its issues on stdout, the other commands on stderr
    assert code == expected, report
    assert "Traceback" not in report and "RecursionError" not in report, report
    assert f"{path}:1:" in report and message in report, report
    assert not (tmp_path / "eval" / "journal").exists()  # nothing stamped that the corrected run would refuse


def _late_last_event(record: dict) -> None:
    record["events"][-1]["t"] = 1e9  # a silence of 1e9 s before the agent's last answer


@pytest.mark.parametrize("command", ["validate", "eval", "render"])
def test_a_timeline_past_the_longest_session_is_refused_by_every_command_that_plays_or_trains_on_it(
    command, tmp_path, capsys
):
    path = tmp_path / "bad.jsonl"
    path.write_text(_timeline_line(_late_last_event))
    cli, argv, expected = TIMELINE_COMMANDS[command]
    capsys.readouterr()
    code = (clocktune_main if cli == "clocktune" else datagen_main)([a.format(file=path, tmp=tmp_path) for a in argv])
    printed = capsys.readouterr()
    report = printed.out + printed.err
    assert code == expected, report
    assert "Traceback" not in report and "past the longest timeline, 3600 s" in report, report
    assert f"{path}:1:events." in report, report


def test_a_session_refuses_a_timeline_past_the_longest_one_even_when_validation_was_skipped():
    from clocktune.runtime.scripted import SCRIPTED_POLICIES, ScriptedPolicy
    from clocktune.runtime.session import Session, SessionConfig
    from data_gen.backends import make_backend
    from data_gen.generate import generate_dialogue

    timeline = generate_dialogue(0, 0, GeneratorConfig())
    policy = ScriptedPolicy(timeline, SCRIPTED_POLICIES[0])
    timeline.events[-1].t = 1e9
    with pytest.raises(ValueError, match=r"events\.\d+\.t: 1000000000.0 s is past the longest timeline"):
        Session(timeline, policy, SessionConfig(), make_backend(timeline))


@pytest.mark.parametrize("command", sorted(TIMELINE_COMMANDS))
def test_a_timeline_file_that_is_a_fifo_is_refused_without_waiting_for_a_writer(command, tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    os.mkfifo(path)
    cli, argv, expected = TIMELINE_COMMANDS[command]
    capsys.readouterr()
    code = (clocktune_main if cli == "clocktune" else datagen_main)([a.format(file=path, tmp=tmp_path) for a in argv])
    printed = capsys.readouterr()
    report = printed.out + printed.err
    assert code in (1, 2), report
    assert "Traceback" not in report and f"{path}: not a regular file" in report, report
