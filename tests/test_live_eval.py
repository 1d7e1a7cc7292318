"""Live evaluation while training: held-out sessions played in the runtime every K steps, logged like the loss."""

import math
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, TrainerCallback

from clocktune.train.sft import main, make_parser
from data_gen.backends import make_backend
from data_gen.config import GeneratorConfig
from data_gen.writer import GenerationJob, run_generation
from tests.test_train import sft_args, tiny_model_dir
from tests.tiny_models import TINY
from tests.tiny_tokenizer import tiny_tokenizer

LORA = ["--use_peft", "--lora_r", "4", "--lora_alpha", "8", "--lora_target_modules", "q_proj", "v_proj"]


def generated(out: Path, num: int, seed: int) -> Path:
    run_generation(GenerationJob(GeneratorConfig(), num, seed, out, shard_size=num), progress=False)
    return out / "data"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    """Training timelines and three held-out ones (another seed)."""
    root = tmp_path_factory.mktemp("live")
    return generated(root / "train", 16, 5), generated(root / "held_out", 3, 6)


def keep_live_actions_short(model, tokenizer, end_token: str) -> None:
    """Makes ``model``, whenever it runs in eval mode, prefer the end-of-message token, then ``<|wait|>``.

    A random tiny model fills every action with noise up to the token limit (under the action grammar, a call
    whose argument runs on for 150 tokens): some 2,000 forwards a session, minutes on two busy cores. Preferring
    these two tokens makes every action ``<|wait|>`` (the grammar asks for a marker first) or empty (without it):
    the session waits, is told to act, and gives up after its notices, through every path of the live evaluation
    in a few dozen forwards.
    """
    end_id, wait_id = tokenizer.convert_tokens_to_ids([end_token, "<|wait|>"])

    def hook(module, inputs, output):
        if not module.training:
            top = output.logits.max()
            output.logits[..., end_id] = top + 2.0
            output.logits[..., wait_id] = top + 1.0
        return output

    model.register_forward_hook(hook)


class ModeProbe(TrainerCallback):
    """Records, for every forward of the trained model, whether it ran in train mode and with gradients; and makes
    its live actions short (:func:`keep_live_actions_short`)."""

    def __init__(self, end_token: str):
        self.modes: set[tuple[bool, bool]] = set()
        self.end_token = end_token

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        model.register_forward_pre_hook(lambda module, _: self.modes.add((module.training, torch.is_grad_enabled())))
        keep_live_actions_short(model, processing_class, self.end_token)


@pytest.fixture(scope="module")
def live_run(tmp_path_factory, data):
    """A tiny Llama trained 4 LoRA steps with live evaluation every 2 steps, and its mode probe."""
    train_data, held_out = data
    root = tmp_path_factory.mktemp("run")
    model_dir = tiny_model_dir(root, "llama")
    live = ["--live_eval_steps", "2", "--live_eval_data", str(held_out), "--live_eval_sessions", "2"]
    argv = sft_args(model_dir, train_data, root / "out", "--max_steps", "4", *LORA, *live)
    probe = ModeProbe("<|eot_id|>")  # the tiny Llama speaks Llama 3.2's format
    trainer = main(*make_parser().parse_args_and_config(args=argv), callbacks=[probe], backends=make_backend)
    return trainer, probe, model_dir, root


def live_entries(trainer) -> list[dict]:
    return [entry for entry in trainer.state.log_history if "live/accuracy" in entry]


def test_live_accuracy_is_logged_at_steps_2_and_4_with_values_in_0_to_1(live_run):
    trainer, *_ = live_run
    entries = live_entries(trainer)
    assert [entry["step"] for entry in entries] == [2, 4]
    for entry in entries:
        assert entry["live/sessions"] == 2
        assert 0.0 <= entry["live/accuracy"] <= 1.0 and 0.0 <= entry["live/answered"] <= 1.0
        # Every failed session has exactly one reason, and every known reason has a point (0 included).
        failures = {key: value for key, value in entry.items() if key.startswith("live/failures/")}
        assert {"live/failures/no_call", "live/failures/gave_up", "live/failures/wrong_tool"} <= set(failures)
        assert sum(failures.values()) == round(2 * (1 - entry["live/accuracy"]))
        if "live/latency_p50_s" in entry:
            assert entry["live/latency_p50_s"] >= 0
        assert entry["live/eval_seconds"] >= 0 and math.isfinite(entry["live/notices_per_dialogue"])


def test_the_model_plays_in_eval_mode_without_gradients_and_goes_back_to_train_mode(live_run):
    trainer, probe, *_ = live_run
    # Training forwards in train mode with gradients, live forwards in eval mode without: nothing in between.
    assert probe.modes == {(True, True), (False, False)}
    # The last evaluation ran after the last step; the model it hands back is in train mode again.
    assert trainer.model.training


def test_live_metrics_leave_the_training_metrics_in_the_training_log(live_run):
    trainer, *_ = live_run
    # TRL merges the token metrics it has gathered into whatever the trainer logs next: not into live entries.
    assert not any("mean_token_accuracy" in entry or "loss" in entry for entry in live_entries(trainer))
    training = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["step"] for entry in training] == [1, 2, 3, 4]
    assert all("mean_token_accuracy" in entry and "accuracy/wait" in entry for entry in training)


def test_live_evaluation_leaves_the_training_losses_unchanged(live_run, data):
    trainer, _, model_dir, root = live_run
    train_data, _ = data
    argv = sft_args(model_dir, train_data, root / "reference", "--max_steps", "4", *LORA)
    reference = main(*make_parser().parse_args_and_config(args=argv))

    def losses(run):
        return [entry["loss"] for entry in run.state.log_history if "loss" in entry]

    assert losses(trainer) == pytest.approx(losses(reference), rel=1e-6)


def test_training_stopped_by_a_later_callback_is_evaluated_at_its_last_step(tmp_path, data):
    from clocktune.encoding import extend_tokenizer, get_codec
    from clocktune.rendered_dataset import load_timeline_files, render_timelines
    from clocktune.train.config import ClockSFTConfig
    from clocktune.train.live_eval import LiveEvalCallback
    from clocktune.train.trainer import ClockSFTTrainer

    train_data, held_out = data
    tokenizer = tiny_tokenizer("chatml")
    extend_tokenizer(tokenizer, get_codec("abs_bins"), "chatml")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=8192, **TINY))
    keep_live_actions_short(model, tokenizer, "<|im_end|>")
    dataset = render_timelines(load_timeline_files([train_data])[:8], tokenizer, "chatml")
    args = ClockSFTConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, max_length=8192, report_to="none", max_steps=4,
        per_device_train_batch_size=1, gradient_checkpointing=False, save_strategy="no", logging_steps=1,
    )  # fmt: skip
    trainer = ClockSFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    trainer.add_callback(LiveEvalCallback(trainer, load_timeline_files([held_out])[:1], make_backend, every_steps=2))

    class StopAt3(TrainerCallback):
        # Added after the live evaluation: its on_step_end runs too late for that step's check.
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                control.should_training_stop = True

    trainer.add_callback(StopAt3())
    trainer.train()
    assert [entry["step"] for entry in live_entries(trainer)] == [2, 3]
    assert trainer.model.training


def test_live_metrics_of_the_scripted_oracle_count_every_task_completed(data):
    from clocktune.rendered_dataset import load_timeline_files
    from clocktune.runtime.play import run_policy
    from clocktune.runtime.policy_factories import policy_factory
    from clocktune.runtime.session import SessionConfig
    from clocktune.train.live_eval import FAILURE_REASONS, live_metrics

    timelines = load_timeline_files([data[1]])
    metrics = live_metrics(run_policy("oracle", timelines, policy_factory("oracle"), make_backend, SessionConfig()))
    assert metrics["live/accuracy"] == 1.0 and metrics["live/answered"] == 1.0 and metrics["live/sessions"] == 3
    assert metrics["live/latency_p90_s"] >= metrics["live/latency_p50_s"] > 0
    assert [metrics[f"live/failures/{reason}"] for reason in FAILURE_REASONS] == [0] * len(FAILURE_REASONS)
    assert "live/eval_seconds" not in metrics


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"live_eval_steps": 2}, "live_eval_data is not set"),
        ({"live_eval_steps": -1}, "live_eval_steps must be at least 0"),
        ({"live_eval_sessions": 0}, "live_eval_sessions must be at least 1"),
        ({"live_eval_steps": 2, "live_eval_data": ["x"], "live_eval_profile": "toaster"}, "live_eval_profile"),
    ],
)
def test_live_eval_settings_that_cannot_work_are_refused_naming_the_field(tmp_path, options, words):
    from clocktune.train.config import ClockSFTConfig

    with pytest.raises(ValueError, match=words):
        ClockSFTConfig(output_dir=str(tmp_path), use_cpu=True, **options)


def test_a_yaml_scalar_for_a_list_of_timeline_paths_becomes_a_list(tmp_path):
    config = tmp_path / "recipe.yaml"
    config.write_text("train_data: t/rain\nmax_length: 512\nlive_eval_steps: 5\nlive_eval_data: held/out\n")
    data_args, training_args, _ = make_parser().parse_args_and_config(
        args=["--config", str(config), "--use_cpu", "true"]
    )
    assert training_args.live_eval_data == ["held/out"] and training_args.live_eval_steps == 5
    assert data_args.train_data == ["t/rain"]


def test_live_evaluation_without_backends_fails_before_the_model_loads(tmp_path, data):
    train_data, held_out = data
    live = ["--live_eval_steps", "2", "--live_eval_data", str(held_out)]
    argv = sft_args(tmp_path / "no-model", train_data, tmp_path / "out", *live)
    with pytest.raises(ValueError, match="backends"):
        main(*make_parser().parse_args_and_config(args=argv))
