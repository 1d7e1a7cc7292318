"""scripts/bench_closed_loop.py on a tiny model: both arms train the budget, the teacher run keeps the checkpoints
the arms start from, an arm started from one trains nothing more before its rounds, a cosine budget anneals to 0, and
the plot is written."""

import argparse

import pytest
import torch
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM, TrainerCallback

from data_gen.cli import main as datagen
from tests.script_module import load_script
from tests.tiny_models import TINY
from tests.tiny_tokenizer import tiny_tokenizer


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_closed_loop.py")


class RateRecorder(TrainerCallback):
    def __init__(self) -> None:
        self.rates: list[float] = []

    def on_step_end(self, args, state, control, lr_scheduler=None, **kwargs):
        self.rates.append(lr_scheduler.get_last_lr()[0])


@pytest.fixture
def tiny_setup(bench, tmp_path):
    tokenizer = tiny_tokenizer("chatml")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=4096, tie_word_embeddings=True, **TINY)
    LlamaForCausalLM(config).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    assert datagen(["generate", "--num", "4", "--seed", "0", "--out", str(tmp_path / "data"), "--quiet"]) == 0
    return argparse.Namespace(recipe=str(bench.RECIPE), model=str(tmp_path / "tiny"), train_dialogues=4, rows=2)


def test_an_on_policy_arm_leaves_the_teacher_where_both_arms_then_train_the_same_budget(bench):
    assert bench.on_policy_start(150, 0.3, 1) == (105, 45)
    teacher_steps, per_round = bench.on_policy_start(10, 0.5, 2)
    assert (teacher_steps, per_round) == (6, 2) and teacher_steps + 2 * per_round == 10
    with pytest.raises(ValueError, match="budget 2: too small for 2 rounds"):
        bench.on_policy_start(2, 0.9, 2)


def test_the_teacher_run_keeps_each_budgets_checkpoint_and_an_arm_resumed_from_one_trains_no_step_more(
    bench, tiny_setup, tmp_path
):
    args = tiny_setup
    small = ["--lora_r", "2", "--learning_rate", "1e-2", "--warmup_steps", "0"]

    teacher = tmp_path / "teacher"
    bench._train(*bench._recipe_args(args, tmp_path / "data", teacher, 4, small), callbacks=[bench.SaveAt({2, 4})])
    assert sorted(path.name for path in teacher.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    at_two = load_file(teacher / "checkpoint-2" / "adapter_model.safetensors")
    at_four = load_file(teacher / "checkpoint-4" / "adapter_model.safetensors")
    assert any(not torch.equal(at_two[key], at_four[key]) for key in at_two)

    arm = tmp_path / "arm"
    resumed = [*small, "--resume_from_checkpoint", str(teacher / "checkpoint-2")]
    bench._train(*bench._recipe_args(args, tmp_path / "data", arm, 2, resumed))
    saved = load_file(arm / "adapter_model.safetensors")
    assert saved.keys() == at_two.keys() and all(torch.equal(saved[key], at_two[key]) for key in saved)


def test_a_cosine_budget_anneals_its_rate_to_zero_at_its_last_step_where_the_constant_run_holds_it(
    bench, tiny_setup, tmp_path
):
    small = ["--lora_r", "2", "--learning_rate", "1e-2", "--warmup_steps", "0"]
    cosine, constant = RateRecorder(), RateRecorder()
    data_args, training_args, model_args = bench._recipe_args(
        tiny_setup, tmp_path / "data", tmp_path / "cosine", 3, small, scheduler="cosine"
    )
    bench._train(data_args, training_args, model_args, callbacks=[cosine])
    bench._train(*bench._recipe_args(tiny_setup, tmp_path / "data", tmp_path / "constant", 3, small), [constant])
    assert cosine.rates[0] < 1e-2 and cosine.rates[-1] == pytest.approx(0.0, abs=1e-12)
    assert constant.rates == [1e-2] * 3


def test_a_cosine_schedule_refuses_the_on_policy_arms_which_start_from_a_constant_rate_teacher(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--schedule", "cosine", "--on-policy-arms", "takeover", "--out", "unused"])
    assert "--schedule cosine: the on-policy arms start from a constant-rate teacher" in capsys.readouterr().err


def test_the_plot_holds_a_curve_per_arm_and_decoding(bench, tmp_path):
    rows = [
        {"arm": arm, "decoding": decoding, "budget": budget, "live_accuracy": 0.1 * budget, "speedup_p50": 1.2}
        for arm in ("teacher", "on_policy")
        for decoding in ("plain", "constrained")
        for budget in (1, 2, 3)
    ]
    bench._plot(rows, tmp_path / "closed_loop.png")
    assert (tmp_path / "closed_loop.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
