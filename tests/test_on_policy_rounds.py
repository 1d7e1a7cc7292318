"""On-policy rounds inside `clocktune train`: rollout, labels, training on the mixture, and a run that resumes."""

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file
from transformers import TrainerCallback

from clocktune.train.record import read_training_record
from clocktune.train.sft import main, make_parser
from data_gen.backends import make_backend
from data_gen.expert import experts_of_data
from tests.test_live_eval import LORA, keep_live_actions_short
from tests.test_train import sft_args, tiny_model_dir

SESSIONS = 4
ROUND = [
    "--on_policy_rounds", "1", "--on_policy_sessions", str(SESSIONS), "--on_policy_steps", "2",
    "--on_policy_weight", "0.5", "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "2",
]  # fmt: skip


class Stop(Exception):
    """Stands for a kill."""


class Backends:
    """``make_backend`` that counts the sessions it serves and, with ``stop_after``, stops the run at the next one."""

    def __init__(self, stop_after: int | None = None):
        self.sessions, self.stop_after = 0, stop_after

    def __call__(self, timeline):
        if self.sessions == self.stop_after:
            raise Stop
        self.sessions += 1
        return make_backend(timeline)


class Probe(TrainerCallback):
    """Counts the optimizer steps of every trainer it joins, and makes the model's live actions short once."""

    def __init__(self):
        self.steps, self.hooked = 0, set()

    def on_init_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if id(model) not in self.hooked:  # every round's trainer holds the same model
            self.hooked.add(id(model))
            keep_live_actions_short(model, processing_class, "<|eot_id|>")

    def on_step_end(self, args, state, control, **kwargs):
        self.steps += 1


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> tuple[Path, Path, Path]:
    from data_gen.cli import main as datagen

    root = tmp_path_factory.mktemp("on_policy")
    assert datagen(["generate", "--num", "8", "--seed", "5", "--out", str(root / "data"), "--quiet"]) == 0
    return root, tiny_model_dir(root, "llama"), root / "data"


def train(model_dir: Path, data: Path, out: Path, backends, probe: Probe, *extra: str):
    argv = sft_args(model_dir, data, out, *LORA, *ROUND, *extra)
    return main(
        *make_parser().parse_args_and_config(args=argv), callbacks=[probe], backends=backends, experts=experts_of_data
    )


@pytest.fixture(scope="module")
def whole(setup):
    """One round run through without a stop: its output folder, trainer, backends and probe."""
    root, model_dir, data = setup
    backends, probe = Backends(), Probe()
    trainer = train(model_dir, data, root / "whole", backends, probe)
    return root / "whole", trainer, backends, probe


def test_a_round_writes_its_rollout_trains_its_steps_on_the_mixture_and_is_recorded(whole):
    out, trainer, backends, probe = whole
    rollouts = (out / "round-1" / "rollout" / "data" / "rollouts.jsonl").read_text().splitlines()
    examples = {json.loads(line)["id"] for line in rollouts}
    assert backends.sessions == SESSIONS and examples
    # The first training's 2 steps, then the round's 2 on teacher timelines and rollout examples both.
    assert probe.steps == 4 and trainer.state.global_step == 2
    assert trainer.args.output_dir == str(out / "round-1")
    # Its sampler draws in another order than the first training's, which would re-read that training's timelines.
    assert trainer.args.data_seed == trainer.args.seed + 1
    mixed = set(trainer.train_dataset["timeline_id"])
    assert mixed & examples and mixed - examples
    logged = next(entry for entry in trainer.state.log_history if "on_policy/live_accuracy" in entry)
    assert logged["on_policy/sessions"] == SESSIONS and logged["on_policy/examples"] == len(rollouts)
    record = read_training_record(out)
    (round_record,) = record["on_policy_rounds"]
    assert record["max_steps"] == 4 and round_record["round"] == 1 and round_record["steps"] == 2
    assert round_record["sessions"] == SESSIONS and round_record["examples"] == len(rollouts)
    assert 0 <= round_record["agreed"] <= round_record["decisions"]
    assert (out / "adapter_model.safetensors").is_file() and (out / "round-1" / "adapter_model.safetensors").is_file()
    # The round learned: its model is not the one the first training left.
    before, after = (
        load_file(out / "checkpoint-2" / "adapter_model.safetensors"),
        load_file(out / "adapter_model.safetensors"),
    )
    assert any(not before[key].equal(after[key]) for key in before if "lora_B" in key)
    # The round trained on with the first training's optimizer state: AdamW's step counts run on from 2 to 4.
    steps = {int(state["step"]) for state in trainer.optimizer.optimizer.state.values()}
    assert steps == {4} and (out / "round-1" / "optimizer.pt").is_file()


def test_a_round_that_restarts_its_optimizer_counts_its_steps_from_zero(setup):
    root, model_dir, data = setup
    trainer = train(model_dir, data, root / "restart", Backends(), Probe(), "--on_policy_optimizer", "restart")
    steps = {int(state["step"]) for state in trainer.optimizer.optimizer.state.values()}
    assert steps == {2} and not (root / "restart" / "round-1" / "optimizer.pt").exists()


def test_a_round_with_takeover_hands_every_session_the_untrained_model_gets_wrong_to_the_expert(setup):
    root, model_dir, data = setup
    backends, probe = Backends(), Probe()
    out = root / "takeover"
    train(model_dir, data, out, backends, probe, "--on_policy_takeover", "true")
    (round_record,) = read_training_record(out)["on_policy_rounds"]
    assert json.loads((out / "round-1" / "rollout" / "settings.json").read_text())["takeover"] is True
    # The untrained model's first action is never the expert's: the expert plays every session on, and the data
    # holds each session's label at that action and the expert's recovery after it.
    assert round_record["taken_over"] == SESSIONS and round_record["completed"] == 0
    assert round_record["examples"] == 2 * SESSIONS and backends.sessions == SESSIONS


def test_a_run_stopped_in_its_rollout_and_started_again_resumes_it_and_writes_the_same_data(setup, whole):
    root, model_dir, data = setup
    out = root / "stopped"
    # One session at a time, so that the stop falls after exactly two sessions ended; the run started again plays
    # the rest at the default batch size, and its data is still the run's that went through.
    with pytest.raises(Stop):
        train(model_dir, data, out, Backends(stop_after=2), Probe(), "--runtime_batch_size", "1")
    assert len((out / "round-1" / "rollout" / "journal" / "student.jsonl").read_text().splitlines()) == 2

    backends, probe = Backends(), Probe()
    train(model_dir, data, out, backends, probe)
    # The first training resumed at its last checkpoint; only the two unfinished sessions were played.
    assert backends.sessions == SESSIONS - 2 and probe.steps == 2
    name = Path("round-1", "rollout", "data", "rollouts.jsonl")
    assert (out / name).read_bytes() == (whole[0] / name).read_bytes()
    final = load_file(out / "adapter_model.safetensors")
    # The first training's optimizer state came from its checkpoint: the same model as the run that went through.
    through = load_file(whole[0] / "adapter_model.safetensors")
    assert final.keys() == through.keys() and all(final[key].equal(through[key]) for key in through)

    # Started once more, the finished round is loaded, not played or trained again.
    backends, probe = Backends(), Probe()
    train(model_dir, data, out, backends, probe)
    assert backends.sessions == 0 and probe.steps == 0
    again = load_file(out / "adapter_model.safetensors")
    assert again.keys() == final.keys() and all(again[key].equal(final[key]) for key in final)
    (resumed,) = read_training_record(out)["on_policy_rounds"]
    (ran_through,) = read_training_record(whole[0])["on_policy_rounds"]
    assert resumed.pop("data") == str(out / name.parent) and ran_through.pop("data") == str(whole[0] / name.parent)
    assert resumed == ran_through


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--on_policy_weight", "1.5"], r"on_policy_weight .*\[0, 1\], got 1.5"),
        (["--on_policy_sessions", "0"], "on_policy_sessions must be at least 1"),
        (["--on_policy_steps", "0"], "on_policy_steps must be at least 1"),
        (["--on_policy_rounds", "-1"], "on_policy_rounds must be at least 0"),
        (["--on_policy_profile", "no-such-device"], "on_policy_profile"),
    ],
)
def test_bad_on_policy_settings_are_refused_when_the_config_is_parsed(tmp_path, extra, words):
    with pytest.raises(ValueError, match=words):
        make_parser().parse_args_and_config(args=sft_args(tmp_path, tmp_path, tmp_path, *ROUND, *extra))


def test_rounds_without_experts_or_of_data_without_its_generator_config_fail_before_the_model_loads(setup, capsys):
    from clocktune.cli import main as clocktune

    root, _, data = setup
    missing = root / "no-such-model"  # loading it would fail otherwise
    parsed = make_parser().parse_args_and_config(args=sft_args(missing, data, root / "refused", *ROUND))
    with pytest.raises(ValueError, match="no experts or no tool backends"):
        main(*parsed, backends=make_backend)
    with pytest.raises(ValueError, match="no experts or no tool backends"):
        main(*parsed, experts=experts_of_data)
    # The shards' folder, not the generated one: no generation.json beside them.
    assert clocktune(["train", *sft_args(missing, data / "data", root / "refused", *ROUND)]) == 2
    error = capsys.readouterr().err
    assert f"{data / 'data' / 'generation.json'}: not found" in error
    assert f"name the generated folder above it, {data}" in error
    assert not (root / "refused").exists()
