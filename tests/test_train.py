"""Training: configs parse, tiny Qwen2/Llama SFT steps, LoRA touches only adapters and new rows, resume, accelerate."""

import glob
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from clocktune.train.grpo import make_parser as grpo_parser
from clocktune.train.sft import make_parser, run
from data_gen.config import GeneratorConfig, load_config
from data_gen.writer import GenerationJob, run_generation
from tests.tiny_models import TINY
from tests.tiny_tokenizer import tiny_tokenizer

REPO = Path(__file__).resolve().parents[1]
ARCHITECTURES = {
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, "qwen2.5"),
    "llama": (LlamaConfig, LlamaForCausalLM, "llama3.2"),
}


@pytest.fixture(scope="module")
def timelines(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("timelines")
    run_generation(GenerationJob(GeneratorConfig(), 16, 5, out, shard_size=16), progress=False)
    return out / "data"


def tiny_model_dir(root: Path, architecture: str) -> Path:
    config_class, model_class, model_format = ARCHITECTURES[architecture]
    tokenizer = tiny_tokenizer(model_format)
    torch.manual_seed(0)
    config = config_class(vocab_size=len(tokenizer), max_position_embeddings=4096, tie_word_embeddings=True, **TINY)
    path = root / architecture
    model_class(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def sft_args(model_dir: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--model_name_or_path", str(model_dir), "--train_data", str(data), "--output_dir", str(out),
        "--attn_implementation", "sdpa", "--dtype", "float32", "--use_cpu", "--bf16", "false",
        "--gradient_checkpointing", "false", "--max_steps", "3", "--per_device_train_batch_size", "2",
        "--max_length", "6144", "--learning_rate", "1e-2", "--logging_steps", "1", "--report_to", "none",
        "--save_strategy", "no", "--seed", "0", "--lr_scheduler_type", "constant", *extra,
    ]  # fmt: skip


def test_every_yaml_under_configs_parses():
    from accelerate.commands.config.config_args import load_config_from_file

    files = sorted(glob.glob(str(REPO / "configs" / "**" / "*.yaml"), recursive=True))
    assert len(files) >= 13
    for path in files:
        first_line = Path(path).read_text().splitlines()[0]
        assert first_line.startswith("# "), f"{path} must start with its launch line"
        if "/accelerate/" in path:
            assert load_config_from_file(path).num_processes >= 1
        elif "/datagen/" in path:
            load_config(path)
        else:
            assert "recipes/sft.py" in first_line or "recipes/grpo.py" in first_line
            # bf16 needs a GPU; everything else in the file goes through the recipe's own parser.
            parser = make_parser() if "recipes/sft.py" in first_line else grpo_parser()
            data_args, training_args, model_args = parser.parse_args_and_config(
                args=["--config", path, "--bf16", "false"]
            )
            assert data_args.train_data and model_args.model_name_or_path
            if training_args.report_to and "/smollm2" not in path:
                assert training_args.report_to == ["wandb"]


@pytest.mark.parametrize("architecture", ["qwen2", "llama"])
def test_full_sft_changes_weights_and_logs_finite_loss(tmp_path, timelines, architecture):
    model_dir = tiny_model_dir(tmp_path, architecture)
    trainer, _ = run(sft_args(model_dir, timelines, tmp_path / "out"))
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    assert any(key.startswith("accuracy/") for entry in trainer.state.log_history for key in entry)
    before = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    after = AutoModelForCausalLM.from_pretrained(tmp_path / "out").state_dict()
    changed = [
        name
        for name, value in before.items()
        if name in after and after[name].shape == value.shape and not torch.equal(after[name], value)
    ]
    assert any("layers.0" in name for name in changed)


@pytest.mark.parametrize("architecture", ["qwen2", "llama"])
def test_lora_trains_only_adapters_and_new_token_rows(tmp_path, timelines, architecture):
    model_dir = tiny_model_dir(tmp_path, architecture)
    lora = ["--use_peft", "--lora_r", "4", "--lora_alpha", "8", "--lora_target_modules", "q_proj", "v_proj"]
    trainer, _ = run(sft_args(model_dir, timelines, tmp_path / "out", *lora))
    trainable = [name for name, parameter in trainer.model.named_parameters() if parameter.requires_grad]
    assert trainable and all("lora_" in name or "trainable_tokens" in name for name in trainable), trainable

    from clocktune.train.sft import load_model_and_tokenizer

    base = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    merged = trainer.model.merge_and_unload().state_dict()
    old_vocab = base["model.embed_tokens.weight"].shape[0]
    embed = merged["model.embed_tokens.weight"]
    # Old rows are untouched; the clock-token and marker rows moved away from their (seeded) initialisation.
    assert torch.equal(embed[:old_vocab], base["model.embed_tokens.weight"])
    _, training_args, model_args = make_parser().parse_args_and_config(args=sft_args(model_dir, timelines, tmp_path))
    initial = load_model_and_tokenizer(training_args, model_args)[0].get_input_embeddings().weight
    assert embed.shape == initial.shape and torch.equal(initial[:old_vocab], embed[:old_vocab])
    markers = trainer.processing_class.convert_tokens_to_ids(["<|wait|>", "<|answer|>"])
    assert all(marker >= old_vocab for marker in markers)
    assert all(not torch.equal(embed[marker], initial[marker]) for marker in markers)
    # The recipe starts each marker from its name's embedding (clocktune.encoding.init_marker_embeddings).
    wait_name = trainer.processing_class(" wait", add_special_tokens=False)["input_ids"]
    torch.testing.assert_close(initial[markers[0]], initial[wait_name].mean(dim=0))
    for name in ("mlp.up_proj.weight", "post_attention_layernorm.weight", "self_attn.k_proj.weight"):
        key = f"model.layers.0.{name}"
        assert torch.equal(merged[key], base[key]), key
    assert not torch.equal(
        merged["model.layers.0.self_attn.q_proj.weight"], base["model.layers.0.self_attn.q_proj.weight"]
    )


def test_resume_continues_at_the_checkpoint_with_the_same_data(tmp_path, timelines):
    from transformers import TrainerCallback

    from clocktune.train.sft import main

    model_dir = tiny_model_dir(tmp_path, "llama")
    extra = ["--max_steps", "4", "--save_strategy", "steps", "--save_steps", "2"]

    class Steps(TrainerCallback):
        """Records the steps a run trains; with ``stop_at``, stops there like a kill right after a checkpoint."""

        def __init__(self, stop_at=None):
            self.trained, self.stop_at = [], stop_at

        def on_step_end(self, args, state, control, **kwargs):
            self.trained.append(state.global_step)
            if state.global_step == self.stop_at:
                control.should_training_stop = True

    def train(out, callback):
        parsed = make_parser().parse_args_and_config(args=sft_args(model_dir, timelines, out, *extra))
        trainer = main(*parsed, callbacks=[callback])
        return {entry["step"]: entry["loss"] for entry in trainer.state.log_history if "loss" in entry}

    uninterrupted = Steps()
    reference = train(tmp_path / "reference", uninterrupted)
    assert uninterrupted.trained == [1, 2, 3, 4]
    killed = Steps(stop_at=2)
    train(tmp_path / "resumed", killed)
    assert killed.trained == [1, 2] and (tmp_path / "resumed" / "checkpoint-2").is_dir()
    again = Steps()
    resumed = train(tmp_path / "resumed", again)  # the same command, started again
    assert again.trained == [3, 4]
    # Same weights and same batches at steps 3 and 4 as the uninterrupted run: the same losses (up to float noise
    # far below the gap between two different batches).
    assert abs(reference[3] - reference[4]) > 1e-3 * reference[3]
    for step in (3, 4):
        assert resumed[step] == pytest.approx(reference[step], rel=1e-4)


def test_recipe_runs_under_accelerate_launch_on_cpu(tmp_path, timelines):
    model_dir = tiny_model_dir(tmp_path, "qwen2")
    recipe = {
        "model_name_or_path": str(model_dir), "dtype": "float32", "attn_implementation": "sdpa",
        "use_peft": True, "lora_r": 4, "lora_alpha": 8, "lora_target_modules": "all-linear",
        "train_data": [str(timelines)], "max_length": 6144, "output_dir": str(tmp_path / "out"),
        "use_cpu": True, "bf16": False, "gradient_checkpointing": False, "max_steps": 2,
        "per_device_train_batch_size": 2, "report_to": "none", "save_strategy": "no",
    }  # fmt: skip
    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump(recipe))
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "offline"}
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file"]
    command += [str(REPO / "configs/accelerate/cpu.yaml"), str(REPO / "recipes/sft.py"), "--config", str(config)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "out" / "adapter_model.safetensors").exists()
    assert (tmp_path / "out" / "tokenizer.json").exists()


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("time_codec", "morse", "time_codec"),
        ("model_format", "gpt", "model_format"),
        ("mask_policy", "random", "mask_policy"),
        ("attention_window_s", -1.0, "attention_window_s"),
        ("packing", True, "packing"),
        ("remove_unused_columns", True, "remove_unused_columns"),
        ("max_length", None, "max_length"),
        ("live_eval_steps", 3, "live_eval_data"),
    ],
)
def test_clock_config_rejects_bad_values(tmp_path, field, value, words):
    from clocktune.train.config import ClockSFTConfig

    with pytest.raises(ValueError, match=words):
        ClockSFTConfig(output_dir=str(tmp_path), **{field: value})
    config = ClockSFTConfig(output_dir=str(tmp_path))
    assert config.dataset_kwargs["skip_prepare_dataset"] and not config.packing


def test_next_action_report_counts_every_agent_decision(tmp_path, timelines):
    from clocktune.encoding import extend_tokenizer, get_codec
    from clocktune.rendered_dataset import load_timeline_files
    from clocktune.train.next_action import action_type, evaluate_next_action

    held_out = load_timeline_files([timelines])[:3]
    tokenizer = tiny_tokenizer("chatml")
    extend_tokenizer(tokenizer, get_codec("abs_bins"), "chatml")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=8192, **TINY)).eval()
    report = evaluate_next_action(model, tokenizer, held_out)
    gold = [action_type(e) for timeline in held_out for e in timeline.events if e.source == "agent"]
    assert report.points == len(gold) == sum(report.confusion.values())
    assert report.decision_points == sum(kind != "wait" for kind in gold)
    assert sorted(g for (g, _), n in report.confusion.items() for _ in range(n)) == sorted(gold)
    summary = report.summary()
    assert summary["next_action_accuracy_always_wait"] == pytest.approx(gold.count("wait") / len(gold))
    assert 0 <= summary["next_action_accuracy"] <= 1 and math.isfinite(summary["eval_loss"])


def _tiny_trainer_batch(timelines: Path, wanted):
    """Renders the first two generated timelines for which ``wanted(timeline)`` holds into one packed row, with a
    tiny untied Llama and its tokenizer, and returns ``(make_trainer(out, **config), model, batch)``."""
    from clocktune.collate import StreamingCollator
    from clocktune.encoding import extend_tokenizer, get_codec
    from clocktune.rendered_dataset import load_timeline_files, render_timelines
    from clocktune.train.config import ClockSFTConfig
    from clocktune.train.trainer import ClockSFTTrainer

    tokenizer = tiny_tokenizer("chatml")
    extend_tokenizer(tokenizer, get_codec("abs_bins"), "chatml")
    chosen = [t for t in load_timeline_files([timelines]) if wanted(t)][:2]
    assert len(chosen) == 2
    dataset = render_timelines(chosen, tokenizer, "chatml")
    torch.manual_seed(0)
    # Untied embeddings: an input row gets a gradient only from the positions where its token is read.
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=8192, tie_word_embeddings=False, **TINY)
    model = LlamaForCausalLM(config)
    batch = StreamingCollator(8192, pad_token_id=0)([dataset[i] for i in range(len(dataset))])
    assert batch["input_ids"].shape[0] == 1

    def make_trainer(out: Path, **options):
        args = ClockSFTConfig(
            output_dir=str(out), use_cpu=True, bf16=False, max_length=8192, report_to="none",
            gradient_checkpointing=False, **options,
        )  # fmt: skip
        return ClockSFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)

    return make_trainer, model, batch


def test_cache_prompt_keeps_the_loss_and_drops_only_the_prompts_gradient(tmp_path, timelines):
    # Hidden tokens in both rows, so the explicit streaming mask is sliced as well as the prompt.
    make_trainer, model, batch = _tiny_trainer_batch(timelines, lambda t: any(e.revises for e in t.events))
    assert not torch.isinf(batch["visible_until"]).all()

    def loss_and_embedding_grad(cache_prompt: bool):
        trainer = make_trainer(tmp_path / str(cache_prompt), cache_prompt=cache_prompt)
        model.zero_grad()
        loss = trainer.compute_loss(model, {key: value.clone() for key, value in batch.items()})
        loss.backward()
        return loss.item(), model.get_input_embeddings().weight.grad.abs().sum(dim=-1)

    full_loss, full_grad = loss_and_embedding_grad(False)
    cached_loss, cached_grad = loss_and_embedding_grad(True)
    assert cached_loss == pytest.approx(full_loss, rel=1e-5)
    # Tokens read only inside the first timeline's system prompt get no gradient; tokens after it still do.
    ids, sink = batch["input_ids"][0], batch["sink"][0]
    prompt_length = int(sink.int().cumprod(0).sum())
    prompt_only = set(ids[:prompt_length].tolist()) - set(ids[prompt_length:].tolist())
    after = set(ids[prompt_length:].tolist())
    assert prompt_only and all(full_grad[i] > 0 for i in prompt_only)
    assert all(cached_grad[i] == 0 for i in prompt_only)
    assert all(cached_grad[i] > 0 for i in after)


def test_share_prompt_runs_a_common_prompt_once_with_the_same_loss_and_gradients(tmp_path):
    from clocktune.collate import StreamingCollator
    from clocktune.encoding import extend_tokenizer, get_codec
    from clocktune.rendered_dataset import render_timelines
    from clocktune.train.config import ClockSFTConfig
    from clocktune.train.trainer import ClockSFTTrainer
    from data_gen.generate import generate_dialogue

    tokenizer = tiny_tokenizer("chatml")
    extend_tokenizer(tokenizer, get_codec("abs_bins"), "chatml")
    one_domain = [generate_dialogue(i, 0, GeneratorConfig(domains=["smart_home"])) for i in range(3)]
    other = generate_dialogue(0, 0, GeneratorConfig(domains=["banking"]))
    dataset = render_timelines([*one_domain, other], tokenizer, "chatml")
    collate = StreamingCollator(8192, pad_token_id=0, pack=False)
    shared_batch, mixed_batch = collate([dataset[i] for i in range(3)]), collate([dataset[i] for i in (0, 3)])
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=8192, tie_word_embeddings=False, **TINY)
    model = LlamaForCausalLM(config)
    rows_run = []
    model.get_input_embeddings().register_forward_hook(lambda module, args, output: rows_run.append(len(args[0])))

    def loss_and_grads(batch, share_prompt: bool):
        args = ClockSFTConfig(
            output_dir=str(tmp_path), use_cpu=True, bf16=False, max_length=8192, report_to="none",
            gradient_checkpointing=False, share_prompt=share_prompt,
        )  # fmt: skip
        trainer = ClockSFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
        model.zero_grad()
        rows_run.clear()
        loss = trainer.compute_loss(model, {key: value.clone() for key, value in batch.items()})
        loss.backward()
        grads = {name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None}
        return loss.item(), grads, list(rows_run), trainer._metrics["train"]["shared_prompt"]

    # Its default collator puts one timeline in each row, so that every row starts with the prompt.
    args = ClockSFTConfig(
        output_dir=str(tmp_path), use_cpu=True, max_length=8192, report_to="none", gradient_checkpointing=False,
        share_prompt=True,
    )  # fmt: skip
    trainer = ClockSFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    assert not trainer.data_collator.pack
    full_loss, full_grads, full_rows, _ = loss_and_grads(shared_batch, False)
    loss, grads, rows, shared = loss_and_grads(shared_batch, True)
    assert full_rows == [3] and rows == [1, 3] and shared == [1.0]  # the prompt once, then every row's rest
    assert loss == pytest.approx(full_loss, rel=1e-5)
    assert grads.keys() == full_grads.keys() and len(grads) > 10
    for name, grad in grads.items():
        torch.testing.assert_close(grad, full_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    # Rows of two domains start with other prompts: each runs its own, still with its gradient.
    full_loss, full_grads, _, _ = loss_and_grads(mixed_batch, False)
    loss, grads, rows, shared = loss_and_grads(mixed_batch, True)
    assert rows == [2, 2] and shared == [0.0]
    assert loss == pytest.approx(full_loss, rel=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, full_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_one_timeline_micro_batches_run_a_cached_prompt_once_a_step_with_the_gradient_of_one_batch(tmp_path):
    from clocktune.collate import StreamingCollator
    from clocktune.encoding import extend_tokenizer, get_codec
    from clocktune.rendered_dataset import render_timelines
    from clocktune.train.config import ClockSFTConfig
    from clocktune.train.trainer import ClockSFTTrainer
    from data_gen.generate import generate_dialogue

    tokenizer = tiny_tokenizer("chatml")
    extend_tokenizer(tokenizer, get_codec("abs_bins"), "chatml")
    one_domain = [generate_dialogue(i, 0, GeneratorConfig(domains=["smart_home"])) for i in range(3)]
    dataset = render_timelines(one_domain, tokenizer, "chatml")
    collate = StreamingCollator(8192, pad_token_id=0, pack=False)
    batch = collate([dataset[i] for i in range(3)])
    micro_batches = [collate([dataset[i]]) for i in range(3)]
    assert len({len(micro["input_ids"][0]) for micro in micro_batches}) > 1  # the batch pads rows to the longest
    labelled = int((batch["labels"][:, 1:] != -100).sum())
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=8192, tie_word_embeddings=False, **TINY)
    model = LlamaForCausalLM(config)
    rows_run = []
    model.get_input_embeddings().register_forward_hook(lambda module, args, output: rows_run.append(len(args[0])))
    args = ClockSFTConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, max_length=8192, report_to="none",
        gradient_checkpointing=False, share_prompt=True, cache_prompt=True,
    )  # fmt: skip

    def loss_and_grads(batches, step: int = 0):
        trainer = ClockSFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
        trainer.state.global_step = step
        model.zero_grad()
        rows_run.clear()
        total = 0.0
        for each in batches:
            # The Trainer passes the step's labelled-token count to every micro-batch of gradient accumulation.
            loss = trainer.compute_loss(model, {k: v.clone() for k, v in each.items()}, num_items_in_batch=labelled)
            loss.backward()
            total += loss.item()
        grads = {name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None}
        return total, grads, list(rows_run), trainer

    loss, grads, rows, _ = loss_and_grads([batch])
    micro_loss, micro_grads, micro_rows, trainer = loss_and_grads(micro_batches)
    assert rows == [1, 3] and micro_rows == [1, 1, 1, 1]  # one prompt for the step, then each timeline's rest
    assert trainer._metrics["train"]["shared_prompt"] == [1.0, 1.0, 1.0]
    assert micro_loss == pytest.approx(loss, rel=1e-5)
    assert micro_grads.keys() == grads.keys() and len(grads) > 10
    for name, grad in micro_grads.items():
        torch.testing.assert_close(grad, grads[name], rtol=1e-4, atol=1e-6, msg=name)
    # The next optimizer step runs its prompt again: the weights it was computed with have changed.
    rows_run.clear()
    trainer.state.global_step = 1
    trainer.compute_loss(model, {k: v.clone() for k, v in micro_batches[0].items()}, num_items_in_batch=labelled)
    assert rows_run == [1, 1]


def test_the_loss_and_token_accuracy_count_each_rows_own_labelled_tokens_and_no_others(tmp_path):
    from clocktune.collate import StreamingCollator
    from clocktune.encoding import extend_tokenizer, get_codec
    from clocktune.rendered_dataset import render_timelines
    from clocktune.train.config import ClockSFTConfig
    from clocktune.train.trainer import ClockSFTTrainer
    from data_gen.generate import generate_dialogue

    tokenizer = tiny_tokenizer("chatml")
    extend_tokenizer(tokenizer, get_codec("abs_bins"), "chatml")
    dataset = render_timelines([generate_dialogue(i, 0, GeneratorConfig()) for i in range(3)], tokenizer, "chatml")
    batch = StreamingCollator(8192, pad_token_id=0, pack=False)([dataset[i] for i in range(3)])
    labels = batch["labels"][:, 1:]
    labelled = labels != -100
    # Rows of other lengths and dialogues: each labels positions the others do not.
    assert (labelled.any(dim=0) & ~labelled.all(dim=0)).any()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=8192, tie_word_embeddings=False, **TINY)
    model = LlamaForCausalLM(config)
    args = ClockSFTConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, max_length=8192, report_to="none",
        gradient_checkpointing=False, mask_policy="causal",
    )  # fmt: skip
    trainer = ClockSFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    with torch.no_grad():
        loss = trainer.compute_loss(model, {key: value.clone() for key, value in batch.items()})
        # One causal row per timeline, padded at the end: a plain forward reads the same tokens.
        logits = model(input_ids=batch["input_ids"]).logits[:, :-1]
    reference = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    assert loss.item() == pytest.approx(reference.item(), rel=1e-5)
    right = (logits.argmax(dim=-1) == labels) & labelled
    accuracy = trainer._metrics["train"]["mean_token_accuracy"][-1]
    assert accuracy == pytest.approx((right.sum() / labelled.sum()).item(), rel=1e-6)


@pytest.mark.parametrize("amx", [True, False])
def test_bf16_left_unset_trains_in_bf16_on_a_cpu_only_where_it_has_amx_tiles(tmp_path, monkeypatch, amx):
    from clocktune.train.config import ClockSFTConfig

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ClockSFTConfig(output_dir=str(tmp_path), use_cpu=True).bf16 is amx
    assert ClockSFTConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False).bf16 is False
    # Without use_cpu on a machine with no GPU, transformers refuses bf16: it stays off.
    assert ClockSFTConfig(output_dir=str(tmp_path)).bf16 is False


def test_a_cached_or_shared_prompt_refuses_gradient_checkpointing(tmp_path):
    from clocktune.train.config import ClockSFTConfig

    for option in ("cache_prompt", "share_prompt"):
        with pytest.raises(ValueError, match="gradient_checkpointing"):
            ClockSFTConfig(output_dir=str(tmp_path), use_cpu=True, gradient_checkpointing=True, **{option: True})


def test_action_loss_weights_scale_each_action_types_share_of_the_loss(tmp_path, timelines):
    from clocktune.train.config import ClockSFTConfig

    kinds = {"tool_modify", "commit", "say"}
    make_trainer, model, batch = _tiny_trainer_batch(timelines, lambda t: kinds <= {e.kind for e in t.events})
    types = ("call", "modify_cancel", "wait", "say", "commit")

    @torch.no_grad()
    def loss(weights):
        trainer = make_trainer(tmp_path, action_loss_weights=weights)
        return trainer.compute_loss(model, {key: value.clone() for key, value in batch.items()}).item()

    plain = loss(None)
    only = {name: loss({other: float(other == name) for other in types}) for name in types}
    assert all(share > 0 for share in only.values())
    # The types partition the labelled tokens, and a weight scales its type's share only.
    assert sum(only.values()) == pytest.approx(plain, rel=1e-5)
    assert loss({"modify_cancel": 3.0}) == pytest.approx(plain + 2 * only["modify_cancel"], rel=1e-5)
    with pytest.raises(ValueError, match="unknown action type 'answer'"):
        ClockSFTConfig(output_dir=str(tmp_path), use_cpu=True, action_loss_weights={"answer": 2.0})
    with pytest.raises(ValueError, match="at least 0"):
        ClockSFTConfig(output_dir=str(tmp_path), use_cpu=True, action_loss_weights={"wait": -1.0})


def test_clocktune_train_hands_the_config_and_every_override_to_the_recipe(monkeypatch):
    import clocktune.train.sft
    from clocktune.cli import main

    seen = []

    def recipe(argv, backends, experts, check_backends):
        seen.append(argv)
        return None, make_parser().parse_args_and_config(args=argv)[1]

    monkeypatch.setattr(clocktune.train.sft, "run", recipe)
    argv = ["--config", "configs/smollm2-135m/sft_lora_cpu.yaml", "--train_data", "a", "b", "--max_steps", "3"]
    assert main(["train", *argv]) == 0
    assert seen == [argv]


def test_sft_from_a_lora_adapter_starts_from_its_weights_and_saves_a_full_model_that_loads_alone(tmp_path, timelines):
    from clocktune.runtime.policy_factories import load_policy_model

    lora = ["--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8", "--lora_target_modules", "all-linear"]
    model_dir = tiny_model_dir(tmp_path, "qwen2")
    run(sft_args(model_dir, timelines, tmp_path / "first", *lora))  # an adapter, as the demo's checkpoint is
    assert (tmp_path / "first" / "adapter_config.json").exists()
    # At learning rate 0 the second training changes nothing: its output must be the first adapter merged, marker
    # rows included (re-initialising them from their names, as for a raw base, would lose what they learned).
    run(
        sft_args(tmp_path / "first", timelines, tmp_path / "second", *lora, "--learning_rate", "0", "--max_steps", "1")
    )
    assert not (tmp_path / "second" / "adapter_config.json").exists()
    start = load_policy_model(tmp_path / "first")[0].state_dict()
    second = load_policy_model(tmp_path / "second")[0].state_dict()
    raw = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    assert start.keys() == second.keys()
    for name, value in start.items():
        torch.testing.assert_close(second[name], value, msg=name)
    assert not torch.equal(
        start["model.layers.0.self_attn.q_proj.weight"], raw["model.layers.0.self_attn.q_proj.weight"]
    )
    # Trained for real, the saved model is the trained one: LoRA and token rows merged as they were in memory.
    trainer, _ = run(sft_args(tmp_path / "first", timelines, tmp_path / "third", *lora, "--max_steps", "2"))
    trained = trainer.model.merge_and_unload().state_dict()
    third = load_policy_model(tmp_path / "third")[0].state_dict()
    for name, value in third.items():
        torch.testing.assert_close(value, trained[name], msg=name)
    assert not torch.equal(third["model.embed_tokens.weight"], start["model.embed_tokens.weight"])


def test_sft_from_a_lora_adapter_with_on_policy_rounds_fails_before_loading(tmp_path, timelines):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"peft_type": "LORA", "base_model_name_or_path": "x"}')
    with pytest.raises(ValueError, match=f"{adapter} is a LoRA adapter.*on-policy rounds do not support"):
        run(sft_args(adapter, timelines, tmp_path / "out", "--on_policy_rounds", "1"))


def test_sft_from_a_lora_adapter_with_push_to_hub_uploads_the_merged_model_not_an_adapter(hub, tmp_path, timelines):
    # Through `clocktune train`, twice: a LoRA run from a raw base, whose push is its adapter, then a run from that
    # adapter, whose push is the model merged onto it. Each saves a checkpoint at step 1, where a Trainer with
    # push_to_hub would push its adapter (the second's naming a base without the first adapter's weights).
    from clocktune.cli import main as clocktune_main
    from clocktune.runtime.policy_factories import load_policy_model
    from clocktune.train.record import TRAINING_RECORD

    lora = ["--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8", "--lora_target_modules", "q_proj", "v_proj"]
    save = ["--max_steps", "1", "--save_strategy", "steps", "--save_steps", "1", "--push_to_hub", "true"]
    first = sft_args(tiny_model_dir(tmp_path, "llama"), timelines, tmp_path / "first", *lora, *save)
    assert clocktune_main(["train", *first, "--hub_model_id", "me/first"]) == 0
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(hub.files("me/first"))
    # hub_model_id unset: output_dir's name, in the token's user's namespace, as transformers names it.
    assert clocktune_main(["train", *sft_args(tmp_path / "first", timelines, tmp_path / "second", *lora, *save)]) == 0

    assert (tmp_path / "second" / "checkpoint-1" / "adapter_config.json").exists()  # what a Trainer would push
    # One repo created and one commit per run, each the final upload: the Trainers pushed nothing of their own.
    assert (
        hub.calls["create"] == 2
        and [commit["summary"] for commit in hub.commits] == ["Upload model with clocktune"] * 2
    )
    files = hub.files("mock-user/second")
    assert {"config.json", "model.safetensors", "tokenizer.json", TRAINING_RECORD, "README.md"} <= set(files)
    assert not any(name.startswith(("adapter_", "checkpoint-", "last-checkpoint")) for name in files), sorted(files)
    # The download loads alone as the saved model: the first adapter and this run's training, merged.
    pushed = load_policy_model(hub.export("mock-user/second", tmp_path / "dl"))[0].state_dict()
    saved = load_policy_model(tmp_path / "second")[0].state_dict()
    assert pushed.keys() == saved.keys()
    for name, value in saved.items():
        torch.testing.assert_close(pushed[name], value, rtol=0, atol=0, msg=name)


def test_the_recipes_push_happens_on_the_main_process_only(hub, tmp_path, monkeypatch):
    from accelerate import PartialState

    from clocktune.cli.train_push import push_trained

    args = make_parser().parse_args_and_config(
        args=sft_args(tmp_path / "model", tmp_path / "data", tmp_path / "out", "--push_to_hub", "true")
    )[1]
    assert args.push_output_to_hub and not args.push_to_hub  # the request is kept; the Trainer sees it off
    # Another process returns before reading output_dir (empty here: the main process would refuse it).
    monkeypatch.setattr(PartialState, "is_main_process", property(lambda self: False))
    assert push_trained(args) is None
    assert not hub.calls and not hub.commits


def test_a_checkpoint_loads_in_the_dtype_and_attention_the_recipe_names(tmp_path):
    from clocktune.runtime.policy_factories import load_policy_model

    model_dir = tiny_model_dir(tmp_path, "llama")
    model, _ = load_policy_model(model_dir, dtype="bfloat16", attn_implementation="eager")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert model.config._attn_implementation == "eager"
    model, _ = load_policy_model(model_dir, dtype="float32", attn_implementation=None)
    assert next(model.parameters()).dtype == torch.float32
