"""The main job (`make demo`) on the embedded SmolLM2, cut down to a few dialogues and one training step; its
headline is live accuracy, and its training is bounded by steps, not by the machine's load."""

import contextlib
import io
import json
from pathlib import Path

import pytest

# What issue 4 asks `runs/demo/summary.json` to hold, at least.
SUMMARY_KEYS = (
    "live_accuracy",
    "next_action_accuracy_before",
    "next_action_accuracy_after",
    "decision_accuracy_before",
    "decision_accuracy_after",
    "eval_loss_before",
    "eval_loss_after",
    "train_seconds",
    "checkpoint",
)


def test_demo_writes_the_summary_issue_4_asks_for_and_says_when_training_was_cut_short(played):
    out, summary, printed = played
    written = json.loads((out / "summary.json").read_text())
    assert written == json.loads(json.dumps(summary))
    for key in SUMMARY_KEYS:
        assert key in written, key
    for key in ("next_action_accuracy", "decision_accuracy"):
        assert 0.0 <= written[f"{key}_before"] <= 1.0 and 0.0 <= written[f"{key}_after"] <= 1.0
    assert written["eval_loss_after"] > 0 and written["decision_points"] > 0
    assert (Path(written["checkpoint"]) / "adapter_model.safetensors").exists()
    assert list(written).index("live_accuracy") < list(written).index("next_action_accuracy_after")
    # A budget of 0 minutes stops training after its first step: the path a run on a busy machine takes.
    assert written["train_steps"] == 1 and written["planned_steps"] == 2 and written["train_seconds_per_step"] > 0
    assert any("stopped training at step 1 of 2" in line for line in printed)


def test_demo_without_runtime_dialogues_says_live_accuracy_was_not_measured(played):
    from clocktune.cli.demo import _final_lines, make_parser

    out, summary, _ = played
    args = make_parser().parse_args(["--runtime-dialogues", "0"])
    final = _final_lines({**summary, "live_accuracy": None}, args, None, out / "summary.json")
    assert final[0] == "live accuracy: not measured (--runtime-dialogues 0)" and len(final) <= 5


def test_demo_trains_every_step_unless_a_time_cap_is_asked_for():
    from clocktune.cli.demo import make_parser

    assert make_parser().parse_args([]).max_train_minutes is None
    assert make_parser().parse_args([]).max_steps == 125
    assert make_parser().parse_args(["--max-train-minutes", "11"]).max_train_minutes == 11.0


def test_demo_calls_a_machine_busy_only_when_steps_run_slower_than_on_a_quiet_one():
    from clocktune.cli.demo import QUIET_SECONDS_PER_STEP, pace_note

    assert pace_note(None) is None and pace_note(QUIET_SECONDS_PER_STEP) is None
    assert pace_note(1.1 * QUIET_SECONDS_PER_STEP) is None  # within a quiet machine's noise
    # The closed-loop run of 2026-12-02: steps of four timelines took twice the quiet pace while tests shared the cores.
    note = pace_note(2 * QUIET_SECONDS_PER_STEP)
    assert note.startswith("the machine was busy") and f"{2 * QUIET_SECONDS_PER_STEP:.1f} s/step" in note
    assert "not its scores" in note


@pytest.fixture(scope="module")
def played(tmp_path_factory) -> tuple[Path, dict, list[str]]:
    """One small demo through its runtime step and the sync-teacher model: its folder, summary and printed lines."""
    import transformers.integrations.integration_utils  # noqa: F401  (prints a line at import under WANDB_MODE=offline)

    from clocktune.cli.demo import main

    out = tmp_path_factory.mktemp("played") / "demo"
    argv = ["--out", str(out), "--train-dialogues", "2", "--eval-dialogues", "2", "--max-steps", "2"]
    argv += ["--max-train-minutes", "0"]  # stops each training after its first step
    # The plain argmax: a model of one step writes invalid actions and gives up in seconds, while under the grammar
    # every action is valid and it calls tools until the turn's 60 s limit, minutes of decoding on a CPU.
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        summary = main([*argv, "--runtime-dialogues", "2", "--num-proc", "1", "--no-constrained"])
    return out, summary, [line for line in buffer.getvalue().splitlines() if line.strip()]


def test_demo_says_its_plan_up_front_and_each_phases_time_as_it_ends(played):
    _, summary, printed = played
    assert printed[0].startswith("make demo: 8 phases, about ") and printed[0].endswith("on a quiet 2-core CPU:")
    done = [line.split("]")[0][1:] for line in printed if line.startswith("[") and "] done in " in line]
    assert done == list(summary["phase_seconds"]) and len(done) == 8
    phases = sum(summary["phase_seconds"].values())
    assert summary["demo_seconds"] >= phases - 0.05 * len(done) and phases > 0  # each figure rounded to 0.1 s


def test_demo_ends_with_the_runtime_table_and_shows_a_dialogue(played):
    # Issue 5: `make demo` ends with the runtime's table for the model it trained, and its summary goes under `eval`.
    out, _, printed = played
    table = next(i for i, line in enumerate(printed) if line.split()[:3] == ["policy", "accuracy", "p50"])
    assert [line.split()[0] for line in printed[table + 1 : table + 4]] == ["sync", "smollm2", "oracle"]
    # The runtime's table, then the headline: live accuracy first among the lines the demo ends with.
    final = next(i for i, line in enumerate(printed) if line.startswith("live accuracy "))
    assert final > table and len(printed) - final <= 6
    assert "completed" in printed[final] and printed[final + 2].startswith("next-action accuracy")
    assert any(line.startswith("timeline 1-") for line in printed[:table])
    written = json.loads((out / "summary.json").read_text())
    assert written["eval"]["dialogues"] == 2 and written["eval"]["policy"] == "smollm2"
    assert written["live_accuracy"] == written["eval"]["accuracy"] and written["live_dialogues"] == 2
    assert (out / "timeline.png").read_bytes()[:4] == b"\x89PNG"


def test_demo_plays_the_sync_teacher_model_beside_the_speculative_one_and_checks_the_goal(played):
    from clocktune.cli.demo import SYNC_MODEL

    out, summary, printed = played
    sync = summary["sync_model"]
    assert sync["policy"] == SYNC_MODEL and sync["dialogues"] == 2 and sync["baseline"] == "sync"
    assert (Path(sync["checkpoint"]) / "adapter_model.safetensors").exists()
    shard = next((out / "data" / "train-sync" / "data").glob("*.jsonl"))
    assert {json.loads(line)["teacher"] for line in shard.read_text().splitlines()} == {"sync"}
    goal = summary["goal"]
    assert goal["accuracy_gap"] == round(sync["accuracy"] - summary["eval"]["accuracy"], 4)
    assert goal["met"] == (goal["accuracy_gap"] <= 0.02 and (goal["bound_share"] or 0) >= 0.8)
    low, high = goal["accuracy_gap_ci95"]  # paired over the same two held-out dialogues
    assert -1.0 <= low <= goal["accuracy_gap"] <= high <= 1.0
    written = json.loads((out / "summary.json").read_text())
    assert written["sync_model"]["accuracy"] == sync["accuracy"] and written["goal"] == goal
    headline = next(i for i, line in enumerate(printed) if line.startswith("live accuracy "))
    assert printed[headline + 1].startswith("the sync-teacher model (the recipe on turn-based dialogues) completed")
    assert ("goal: within 2 points at >= 80%: " + ("met" if goal["met"] else "not met")) in printed[headline + 1]
    assert f"(95% CI {100 * low:+.1f} to {100 * high:+.1f})" in printed[headline + 1]


def test_a_demo_whose_recipe_asks_for_a_push_uploads_its_model_with_its_live_results_and_not_the_sync_model(
    played, hub
):
    from clocktune.cli.demo import _recipe, make_parser, push_demo_model

    out, summary, _ = played
    args = make_parser().parse_args(["--out", str(out)])
    # The recipe as main() parses it for the speculative model, with the push asked for.
    _, training_args, _ = _recipe(args, out / "data" / "train", out / "checkpoint", ["--push_to_hub", "true"])
    assert push_demo_model(training_args, out) is not None
    files = hub.files(f"mock-user/{out.name}")  # no hub_model_id: the demo folder's name, in the token's namespace
    assert "adapter_model.safetensors" in files and "README.md" in files
    assert files["adapter_model.safetensors"] == (out / "checkpoint" / "adapter_model.safetensors").read_bytes()
    assert f"value: {summary['live_accuracy']}" in files["README.md"].decode()  # the live result, on the card
    assert hub.calls["commit"] == 1  # one model went up: the sync-teacher reference stays local
    # Not asked for: nothing is pushed.
    _, quiet_args, _ = _recipe(args, out / "data" / "train", out / "checkpoint")
    assert push_demo_model(quiet_args, out) is None
