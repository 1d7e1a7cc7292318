"""scripts/bench_operating_point.py: its default cell is the issue's default operating point, slower tools slow the
turn-based loop, and the heatmap is written whole."""

from clocktune.runtime.play import run_policy
from clocktune.runtime.report import summarize_runs
from clocktune.runtime.scripted import ScriptedPolicy
from clocktune.runtime.session import SessionConfig
from data_gen.backends import make_backend
from data_gen.config import GeneratorConfig
from data_gen.dialogues import select_domains
from data_gen.generate import generate_dialogue
from tests.script_module import load_script


def test_default_cell_measures_the_default_operating_point():
    bench = load_script("bench_operating_point.py")
    config = GeneratorConfig()
    assert bench.cell_config(3.0, 1.0, "h200-3b") == config
    assert bench.cell_config(2.0, 1.0, "h200-3b") != config
    cell = bench.measure_cell(3.0, 1.0, "h200-3b", 30, 0)
    timelines = [generate_dialogue(index, 0, config, select_domains(config)) for index in range(30)]
    runs = {
        name: run_policy(name, timelines, lambda t, n=name: ScriptedPolicy(t, n), make_backend, SessionConfig())
        for name in ("sync", "speculative", "oracle")
    }
    assert cell["summary"]["baseline_latency_p50_s"] == round(runs["sync"].latency(50), 4)
    assert cell["summary"]["latency_p50_s"] == round(runs["speculative"].latency(50), 4)
    assert cell["bound"] == runs["oracle"].speedup_over(runs["sync"])
    assert cell["summary"]["speedup_geomean"] == summarize_runs(runs["speculative"], runs["sync"])["speedup_geomean"]


def test_slower_tools_slow_the_turn_based_loop_and_the_plot_is_written(tmp_path):
    bench = load_script("bench_operating_point.py")
    fast, slow = (bench.measure_cell(3.0, scale, "phone-135m", 30, 0) for scale in (0.5, 2.0))
    assert slow["summary"]["baseline_latency_p50_s"] > fast["summary"]["baseline_latency_p50_s"] + 0.3
    assert fast["summary"]["side_effect_violations"] == slow["summary"]["side_effect_violations"] == 0
    assert "x (" in bench.format_row(fast)
    path = tmp_path / "plots" / "operating_point.png"
    bench.plot_cells([fast, slow], path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in path.parent.iterdir()] == ["operating_point.png"]
