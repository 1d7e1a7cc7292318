"""scripts/gpu_check.py without a GPU: its synthetic batches have the advertised make-up, and with ``--tiny`` it runs
end to end on CPU and prints every row of the table with a finite, positive tokens/s; a spent budget skips rows."""

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import torch

from tests.script_module import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"
STREAMING = "flex streaming" if torch.cuda.is_available() else "sdpa streaming"
# The table's rows in the script's order: mode-major, then model, then streaming before causal.
EXPECTED_ROWS = [
    (model, mode, attention)
    for mode in ("lora", "full")
    for model in ("qwen2.5-tiny", "llama3.2-tiny")
    for attention in (STREAMING, "sdpa causal")
]
ROW = re.compile(r"^(\S+)\s+(lora|full)\s+((?:flex|sdpa) streaming|sdpa causal)\s+(.*)$")


def run_check(*args: str) -> str:
    # One OpenMP thread: the tiny model gains nothing from more, and on a busy 2-core machine spinning OpenMP workers
    # made each step about 40 times slower.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout


def table(stdout: str) -> list[tuple[str, str, str, list[str]]]:
    """(model, mode, attention, remaining columns) of each table row."""
    return [
        (match[1], match[2], match[3], match[4].split())
        for match in map(ROW.match, stdout.splitlines())
        if match is not None
    ]


def test_batches_have_the_advertised_make_up():
    batches, stats = load_script("gpu_check.py").make_batches(
        count=3, rows=4, max_length=8192, vocab_size=1000, scale=1.0
    )
    assert [tuple(batch["input_ids"].shape) for batch in batches] == [(4, 8192)] * 3
    assert stats.shape == (4, 8192)
    assert stats.real_share > 0.9  # rows are nearly full
    assert 0.02 <= stats.hidden_share <= 0.05
    assert 0.12 <= stats.label_share <= 0.18
    lengths = torch.cat([torch.bincount(batch["segment_ids"][torch.isfinite(batch["time"])]) for batch in batches])
    lengths = lengths[lengths > 0]
    assert lengths.min() >= 800 and lengths.max() <= 3000


def test_tiny_run_prints_every_row():
    stdout = run_check("--steps", "4", "--max-length", "512", "--rows", "2")  # half the rows of --tiny: 22 s -> 13 s
    assert f"torch {torch.__version__}" in stdout
    assert "transformers " in stdout and "6*N*T" in stdout and "4*N*T" in stdout
    rows = table(stdout)
    assert [row[:3] for row in rows] == EXPECTED_ROWS
    for *_, columns in rows:
        steps, tokens_per_s, _mfu, _peak, _warmup, loss = columns[:6]
        assert steps == "1"
        assert math.isfinite(float(tokens_per_s)) and float(tokens_per_s) > 0
        assert math.isfinite(float(loss))
    ratios = [line.split()[-1] for line in stdout.split("streaming/causal tokens/s:")[1].splitlines()[1:5]]
    assert all(float(ratio) > 0 for ratio in ratios)
    decoding = stdout.split("batch-1 decoding")[1].splitlines()[2:4]
    assert [line.split()[0] for line in decoding] == ["qwen2.5-tiny", "llama3.2-tiny"]
    for line in decoding:
        prefill, decode, overhead, action = (float(value.replace(",", "")) for value in line.split()[1:5])
        assert prefill > decode > 0 and overhead >= 0 and action > 0
    speculation = [line for line in stdout.split("speculative decoding's costs")[1].splitlines() if "-tiny" in line]
    assert [line.split()[0] for line in speculation] == ["qwen2.5-tiny", "llama3.2-tiny"]
    for line in speculation:
        step_ms, verify_5, layer_skip_c = (float(value) for value in line.split()[1:4])
        assert step_ms > 0 and verify_5 > 0 and math.isfinite(layer_skip_c) and layer_skip_c > 0


def test_spent_budget_skips_rows():
    stdout = run_check("--steps", "4", "--budget-s", "0")
    rows = table(stdout)
    assert [row[:3] for row in rows] == EXPECTED_ROWS
    assert all(columns[0] == "skipped:" for *_, columns in rows)
    decoding = stdout.split("batch-1 decoding")[1].splitlines()[2:4]
    assert all(line.split()[1] == "skipped:" for line in decoding)
    speculation = [line for line in stdout.split("speculative decoding's costs")[1].splitlines() if "-tiny" in line]
    assert len(speculation) == 2 and all(line.split()[1] == "skipped:" for line in speculation)
