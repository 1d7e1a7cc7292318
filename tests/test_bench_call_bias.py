"""scripts/bench_call_bias.py's bookkeeping: sessions gained and lost against bias 0, sessions with a speculative
call, and the plot."""

import json
from pathlib import Path

import pytest

from clocktune.timeline.io import write_timelines
from tests.script_module import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_call_bias.py")


def _results(folder: Path, outcomes: dict[str, bool]) -> Path:
    folder.mkdir()
    rows = [{"id": key, "policy": "model", "accurate": ok} for key, ok in outcomes.items()]
    rows += [{"id": key, "policy": "sync", "accurate": True} for key in outcomes]  # the baseline's rows are ignored
    (folder / "results.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def test_an_arm_is_paired_with_bias_zero_session_by_session(bench, tmp_path):
    reference = _results(tmp_path / "bias0", {"a": True, "b": True, "c": False, "d": False})
    arm = _results(tmp_path / "bias1.5", {"a": True, "b": False, "c": True, "d": True})
    assert bench.paired_changes(arm, reference, "model") == (2, 1)
    assert bench.paired_changes(reference, reference, "model") == (0, 0)


def test_speculative_sessions_count_sessions_that_called_before_the_user_finished(bench, generated, tmp_path):
    from clocktune.timeline.analysis import call_records

    speculative, sync = generated
    write_timelines(tmp_path / "spec.jsonl", speculative[:40])
    write_timelines(tmp_path / "sync.jsonl", sync[:40])
    expected = sum(any(r.speculative for r in call_records(t).values()) for t in speculative[:40])
    assert bench.speculative_sessions(tmp_path / "spec.jsonl") == expected > 0
    assert bench.speculative_sessions(tmp_path / "sync.jsonl") == 0  # the turn-based teacher waits for the last word


def test_the_plot_is_written(bench, tmp_path):
    rows = [
        {"model": "m", "call_bias": bias, "live_accuracy": accuracy, "speedup_p50": speedup, "bound_speedup_p50": 1.3}
        for bias, accuracy, speedup in ((0.0, 0.6, 0.74), (1.5, 0.6, 1.36))
    ]
    bench._plot(rows, tmp_path / "call_bias.png")
    assert (tmp_path / "call_bias.png").stat().st_size > 1000
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind
