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
    from clocktune.cli.demo import main

    out = tmp_path / "demo"
    # A budget of 0 minutes stops training after its first step: the path a run on a busy machine takes.
    # The runtime step is left out here (test_demo_ends_with_the_runtime_table runs it).
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


def test_demo_ends_with_the_runtime_table_and_shows_a_dialogue(tmp_path, capsys):
    # Issue 5: `make demo` ends with the runtime's table for the model it trained, and its summary goes under `eval`.
    from clocktune.cli.demo import main

    out = tmp_path / "demo"
    argv = ["--out", str(out), "--train-dialogues", "4", "--eval-dialogues", "2", "--max-steps", "1"]
    main([*argv, "--runtime-dialogues", "1", "--num-proc", "1"])

    printed = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    table = next(i for i, line in enumerate(printed) if line.split()[:3] == ["policy", "accuracy", "p50"])
    assert [line.split()[0] for line in printed[table + 1 : table + 4]] == ["sync", "smollm2", "oracle"]
    assert printed[-1].startswith("bound:") and len(printed) - table <= 8
    assert any(line.startswith("timeline 1-") for line in printed[:table])
    written = json.loads((out / "summary.json").read_text())
    assert written["eval"]["dialogues"] == 1 and written["eval"]["policy"] == "smollm2"
    assert (out / "timeline.png").read_bytes()[:4] == b"\x89PNG"
