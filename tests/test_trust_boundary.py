"""Untrusted data stays data: a domain file named by timelines runs no code without ``--trust-domain-code``, a backend
names only code beside its file or in an installed plugin, and the jobs that read data stay bounded.

The planted backend writes a marker file when it is imported: a refusal must leave no marker behind.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from clocktune.cli import main as clocktune_main
from clocktune.timeline.io import read_timelines, write_timelines
from data_gen.cli import main as datagen_main
from data_gen.config import GeneratorConfig
from data_gen.writer import GenerationJob, run_generation

pytestmark = pytest.mark.usefixtures("bounded")  # every hostile input is refused in bounded time and memory

REPO = Path(__file__).resolve().parents[1]
MARKER_CODE = "import pathlib\npathlib.Path(__file__).with_name('imported.marker').write_text('ran')\n"


def _run(cli: str, argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = (clocktune_main if cli == "clocktune" else datagen_main)([str(arg) for arg in argv])
    except SystemExit as exit:  # argparse
        code = exit.code
    printed = capsys.readouterr()
    return code, printed.err + printed.out


def _one_error_line(report: str, *fragments: str) -> str:
    assert "Traceback" not in report, report
    errors = [line for line in report.splitlines() if line.startswith("error: ") or ": error: " in line]
    assert len(errors) == 1, report
    for fragment in fragments:
        assert fragment in errors[0], report
    return errors[0]


@pytest.fixture(scope="module")
def pharmacy(tmp_path_factory) -> tuple[Path, Path]:
    """A copy of the example pharmacy domain whose backend module leaves a marker when imported, and 6 timelines
    generated from it (the user passed the file on the command line: trusted), the marker then removed."""
    root = tmp_path_factory.mktemp("trust")
    folder = root / "domain"
    folder.mkdir()
    shutil.copy(REPO / "examples" / "pharmacy.yaml", folder / "pharmacy.yaml")
    source = (REPO / "examples" / "pharmacy_backend.py").read_text()
    (folder / "pharmacy_backend.py").write_text(
        source.replace("from typing import Any\n", "from typing import Any\n" + MARKER_CODE, 1)
    )
    out = root / "data"
    argv = ["generate", "--domain", folder / "pharmacy.yaml", "--num", "6", "--out", out, "--quiet"]
    assert datagen_main([str(arg) for arg in argv]) == 0
    assert (folder / "imported.marker").exists()  # generate ran the file the user named
    return folder, out


@pytest.fixture
def no_marker(pharmacy):
    folder, _ = pharmacy
    (folder / "imported.marker").unlink(missing_ok=True)
    # The module stays cached in this process once imported: drop it so that a trusted run imports it again.
    import sys

    for name in [name for name in sys.modules if name.startswith("_clocktune_domain_")]:
        del sys.modules[name]
    from data_gen.declarative import domain

    domain._cached.cache_clear()
    return folder / "imported.marker"


def test_validate_refuses_a_datasets_domain_code_without_the_flag_and_never_imports_it(pharmacy, no_marker, capsys):
    _, out = pharmacy
    code, report = _run("datagen", ["validate", out / "data"], capsys)
    assert code == 2
    _one_error_line(report, "pharmacy_backend:execute", "--trust-domain-code", "pharmacy_backend.py")
    assert not no_marker.exists()

    code, report = _run("datagen", ["validate", "--strict", "--trust-domain-code", out / "data"], capsys)
    assert code == 0, report
    assert "6 timeline(s) valid" in report and no_marker.exists()


def test_eval_refuses_a_datasets_domain_code_without_the_flag_before_anything_is_written(
    pharmacy, no_marker, tmp_path, capsys
):
    _, out = pharmacy
    code, report = _run("clocktune", ["eval", "--data", out / "data", "--out", tmp_path / "eval"], capsys)
    assert code == 2
    _one_error_line(report, "pharmacy_backend:execute", "--trust-domain-code")
    assert not no_marker.exists() and not (tmp_path / "eval").exists()

    argv = ["eval", "--data", out / "data", "--out", tmp_path / "eval", "--trust-domain-code"]
    code, report = _run("clocktune", argv, capsys)
    assert code == 0, report
    assert no_marker.exists()
    results = [json.loads(line) for line in (tmp_path / "eval" / "results.jsonl").read_text().splitlines()]
    assert results and sum(row["accurate"] for row in results) > 0  # the backend served the sessions


def test_training_with_live_evaluation_refuses_untrusted_domain_code_before_the_model_loads(
    pharmacy, no_marker, tmp_path, capsys
):
    from tests.test_train import sft_args

    _, out = pharmacy
    argv = sft_args(tmp_path / "no-model-here", out / "data", tmp_path / "run")
    argv += ["--live_eval_steps", "1", "--live_eval_data", str(out / "data")]
    code, report = _run("clocktune", ["train", *argv], capsys)
    assert code == 2  # the model path does not exist: the refusal came first
    _one_error_line(report, "pharmacy_backend", "--trust-domain-code")
    assert not no_marker.exists()


def _domain_with_backend(folder: Path, execute: str) -> Path:
    text = (REPO / "examples" / "pharmacy.yaml").read_text()
    path = folder / "pharmacy.yaml"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace("execute: pharmacy_backend:execute", f"execute: {execute}"))
    return path


@pytest.mark.parametrize(
    ("execute", "message"),
    [
        ("os:system", "'os' is neither a module in the domain file's folder"),
        ("json:loads", "'json' is neither a module in the domain file's folder"),
        ("..evil:execute", "backend.execute: String should match pattern"),
    ],
)
def test_a_backend_may_not_name_the_standard_library_or_a_relative_module(execute, message, tmp_path, capsys):
    path = _domain_with_backend(tmp_path / "domain", execute)
    argv = ["generate", "--domain", path, "--num", "2", "--out", tmp_path / "out", "--quiet"]
    code, report = _run("datagen", argv, capsys)
    assert code == 2
    _one_error_line(report, str(path), message)
    assert not (tmp_path / "out" / "generation.json").exists()


def test_a_backend_module_symlinked_from_outside_the_domain_folder_is_not_beside_it(tmp_path, capsys):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "evil.py").write_text(MARKER_CODE + "def execute(state, name, arguments):\n    return {}\n")
    path = _domain_with_backend(tmp_path / "domain", "evil:execute")
    os.symlink(outside / "evil.py", tmp_path / "domain" / "evil.py")
    argv = ["generate", "--domain", path, "--num", "2", "--out", tmp_path / "out", "--quiet"]
    code, report = _run("datagen", argv, capsys)
    assert code == 2
    _one_error_line(report, "'evil' is neither a module in the domain file's folder")
    assert not (outside / "imported.marker").exists()


def test_the_settings_stamp_covers_the_backend_modules_source(tmp_path, capsys):
    folder = tmp_path / "domain"
    path = _domain_with_backend(folder, "pharmacy_backend:execute")
    shutil.copy(REPO / "examples" / "pharmacy_backend.py", folder / "pharmacy_backend.py")
    argv = ["generate", "--domain", path, "--num", "3", "--out", tmp_path / "out", "--quiet"]
    assert _run("datagen", argv, capsys)[0] == 0
    with (folder / "pharmacy_backend.py").open("a") as handle:
        handle.write("\n# edited after the first run\n")
    code, report = _run("datagen", argv, capsys)
    assert code == 2
    _one_error_line(report, "domain_backends_sha256")


def test_a_domain_file_may_not_take_a_name_a_plugin_serves(tmp_path, capsys):
    text = (REPO / "examples" / "pharmacy.yaml").read_text().replace("name: pharmacy", "name: bfcl-x", 1)
    assert "name: bfcl-x" in text
    (tmp_path / "pharmacy.yaml").write_text(text)
    shutil.copy(REPO / "examples" / "pharmacy_backend.py", tmp_path / "pharmacy_backend.py")
    argv = ["generate", "--domain", tmp_path / "pharmacy.yaml", "--num", "2", "--out", tmp_path / "out", "--quiet"]
    code, report = _run("datagen", argv, capsys)
    assert code == 2
    _one_error_line(report, "domain 'bfcl-x' would be served by the registered plugin 'bfcl'")


def test_a_timeline_naming_dev_zero_as_its_domain_file_is_refused_at_once(pharmacy, tmp_path, capsys):
    _, out = pharmacy
    timeline = read_timelines(next((out / "data").glob("*.jsonl")))[0]
    timeline.initial_state["domain_file"]["path"] = "/dev/zero"
    write_timelines(tmp_path / "bad.jsonl", [timeline])
    code, report = _run("datagen", ["validate", "--strict", tmp_path / "bad.jsonl"], capsys)
    assert code == 1
    assert "/dev/zero" in report and "not a regular file" in report and "Traceback" not in report


@pytest.mark.parametrize("cli", ["eval", "render"])
def test_out_may_not_be_or_lie_inside_an_input_folder(cli, pharmacy, capsys):
    _, out = pharmacy
    data = out / "data"
    for target in (data, data / "results"):
        if cli == "eval":
            argv = ["eval", "--data", data, "--out", target]
        else:
            argv = ["render", "--input", data, "--tokenizer", "embedded", "--model-format", "chatml", "--out", target]
        code, report = _run("clocktune", argv, capsys)
        assert code == 2
        _one_error_line(report, f"argument --out: {target}", f"the input folder {data}")
    assert sorted(p.name for p in data.iterdir()) == sorted(p.name for p in data.glob("train-*"))


@pytest.mark.parametrize(("num", "message"), [("1e20", "must be an integer"), ("10000001", "must be ≤ 10,000,000")])
def test_num_is_bounded_before_anything_is_built(num, message, tmp_path, capsys):
    code, report = _run("datagen", ["generate", "--num", num, "--out", tmp_path / "out"], capsys)
    assert code == 2
    _one_error_line(report, f"argument --num: {message}")
    assert not (tmp_path / "out").exists()


def test_a_run_that_failed_before_its_first_shard_does_not_refuse_the_corrected_command(tmp_path, monkeypatch):
    import data_gen.writer as writer

    def fail(*args, **kwargs):
        raise OverflowError("a draw out of range")

    monkeypatch.setattr(writer, "generate_dialogue", fail)
    with pytest.raises(OverflowError):
        run_generation(GenerationJob(GeneratorConfig(no_tool_rate=0.5), 4, 0, tmp_path / "out"), progress=False)
    assert (tmp_path / "out" / "generation.json").exists() and not list((tmp_path / "out" / "data").iterdir())
    monkeypatch.undo()
    stats = run_generation(GenerationJob(GeneratorConfig(), 4, 0, tmp_path / "out"), progress=False)  # other settings
    assert stats["dialogues"] == 4


def test_shards_are_generated_a_window_at_a_time_and_merged_in_order(tmp_path):
    one = run_generation(GenerationJob(GeneratorConfig(), 9, 0, tmp_path / "one", shard_size=1), progress=False)
    two = run_generation(
        GenerationJob(GeneratorConfig(), 9, 0, tmp_path / "two", shard_size=1), num_proc=2, progress=False
    )
    assert one == two
    for name in sorted(p.name for p in (tmp_path / "one" / "data").iterdir()):
        assert (tmp_path / "one" / "data" / name).read_bytes() == (tmp_path / "two" / "data" / name).read_bytes()


def test_an_alias_bomb_in_a_domains_state_is_refused_before_it_expands(tmp_path, capsys):
    levels = "".join(f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 9))
    bomb = "state:\n  l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + levels + "  prescriptions:"
    text = (REPO / "examples" / "pharmacy.yaml").read_text().replace("state:\n  prescriptions:", bomb, 1)
    assert "&l8" in text
    (tmp_path / "pharmacy.yaml").write_text(text)
    argv = ["generate", "--domain", tmp_path / "pharmacy.yaml", "--num", "2", "--out", tmp_path / "out", "--quiet"]
    code, report = _run("datagen", argv, capsys)  # 10^9 nodes expanded: gigabytes, had it been walked
    assert code == 2
    _one_error_line(report, "anchors and aliases expand to more than 1,000,000 nodes")


def test_a_key_given_twice_in_a_domain_file_is_named_by_file_line_and_key(tmp_path, capsys):
    text = (
        (REPO / "examples" / "pharmacy.yaml").read_text().replace("name: pharmacy\n", "name: pharmacy\nname: x\n", 1)
    )
    (tmp_path / "pharmacy.yaml").write_text(text)
    argv = ["generate", "--domain", tmp_path / "pharmacy.yaml", "--num", "2", "--out", tmp_path / "out", "--quiet"]
    code, report = _run("datagen", argv, capsys)
    assert code == 2
    _one_error_line(report, f"{tmp_path / 'pharmacy.yaml'}:4:name: duplicate key")
