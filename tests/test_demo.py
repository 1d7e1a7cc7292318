"""The main job (`make demo`) on the embedded SmolLM2, cut down to a few dialogues and one training step."""

import json
from pathlib import Path

# What issue 4 asks `runs/demo/summary.json` to hold, at least.
SUMMARY_KEYS = (
    "next_action_accuracy_before",
    "next_action_accuracy_after",
    "decision_accuracy_before",
    "decision_accuracy_after",
    "eval_loss_before",
    "eval_loss_after",
    "train_seconds",
    "checkpoint",
)


def test_demo_writes_the_summary_issue_4_asks_for_and_says_when_training_was_cut_short(tmp_path, capsys):
    from clocktune.demo import main

    out = tmp_path / "demo"
    # A budget of 0 minutes stops training after its first step: the path a run on a busy machine takes.
    # The runtime step is left out (an untrained model spends a minute on retries); tests/test_runtime.py covers it.
    argv = ["--out", str(out), "--train-dialogues", "4", "--eval-dialogues", "2", "--max-steps", "3"]
    summary = main([*argv, "--max-train-minutes", "0", "--runtime-dialogues", "0", "--num-proc", "1"])

    written = json.loads((out / "summary.json").read_text())
    assert written == json.loads(json.dumps(summary))
    for key in SUMMARY_KEYS:
        assert key in written, key
    for key in ("next_action_accuracy", "decision_accuracy"):
        assert 0.0 <= written[f"{key}_before"] <= 1.0 and 0.0 <= written[f"{key}_after"] <= 1.0
    assert written["eval_loss_after"] > 0 and written["decision_points"] > 0
    assert (Path(written["checkpoint"]) / "adapter_model.safetensors").exists()
    assert "eval" not in written
    assert written["train_steps"] == 1 and written["planned_steps"] == 3
    assert "stopped training at step 1 of 3" in capsys.readouterr().out
