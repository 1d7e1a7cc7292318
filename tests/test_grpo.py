"""GRPO in the runtime: rollouts are sessions whose completion ids are the renderer's ids of their logs, the trainer's
log-probs see each rollout through its own streaming mask, rewards are logged by component, and a run resumes."""

import math
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from clocktune.render import Rendering, render
from clocktune.runtime.scoring import task_progress
from clocktune.timeline.events import AGENT_KINDS
from clocktune.timeline.io import write_timelines
from clocktune.train.grpo import ClockGRPOTrainer, make_parser
from clocktune.train.grpo_config import ClockGRPOConfig
from clocktune.train.grpo_rollouts import RuntimeRollouts, StreamingRows, session_logprobs
from data_gen.backends import make_backend

# Random weights play each turn to its limit: short turns and few notices end a rollout in a few hundred tokens.
SHORT = ["--rollout_turn_limit_s", "2.0", "--rollout_max_notices", "4"]


def _tasks(generated, count=4):
    # Short dialogues with a revision or a modify, so that tokens get hidden while the session runs.
    chosen = [t for t in generated[0] if len(t.events) < 40 and any(e.kind == "tool_modify" for e in t.events)]
    return chosen[:count]


def _argv(tmp_path, checkpoint, data, *extra):
    return [
        "--model_name_or_path", str(checkpoint), "--train_data", str(data), "--output_dir", str(tmp_path / "out"),
        "--use_cpu", "--bf16", "false", "--report_to", "none", "--logging_steps", "1", "--seed", "0",
        "--num_generations", "2", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1",
        "--learning_rate", "1e-3", "--lr_scheduler_type", "constant", "--max_steps", "2", "--save_strategy", "no",
        "--use_peft", "--lora_r", "4", "--lora_alpha", "8", "--lora_target_modules", "q_proj", "v_proj",
        "--rollout_profile", "phone-135m", *SHORT, *extra,
    ]  # fmt: skip


def _args(tmp_path, checkpoint, data, *extra):
    return make_parser().parse_args_and_config(args=_argv(tmp_path, checkpoint, data, *extra))


def _rollout_trainer(model):
    # What the rollout function reads of TRL's trainer: the model, the accelerator's unwrap, the step, the metrics.
    return SimpleNamespace(
        model=model,
        accelerator=SimpleNamespace(unwrap_model=lambda m: m),
        state=SimpleNamespace(global_step=0),
        _metrics={"train": defaultdict(list)},
    )


@pytest.fixture
def checkpoint(tmp_path, tiny_four_layer_model):
    # Peaky next-token distributions: hiding a token moves the log-probs after it measurably.
    model, tokenizer = tiny_four_layer_model
    folder = tmp_path / "checkpoint"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def adapter_checkpoint(tmp_path, checkpoint):
    # A start that is itself a LoRA adapter, as the demo's SFT checkpoint is, whose weights move the model.
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    adapter = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    folder = tmp_path / "adapter-checkpoint"
    adapter.save_pretrained(folder)
    AutoTokenizer.from_pretrained(checkpoint).save_pretrained(folder)
    return folder


def test_each_rollouts_completion_is_the_renderers_ids_of_its_session_log_and_only_actions_carry_loss(
    generated, tiny_chatml_model, tmp_path, monkeypatch
):
    from clocktune.runtime.model_policy import ModelPolicy

    model, tokenizer = tiny_chatml_model
    tasks = _tasks(generated, 2)
    args = ClockGRPOConfig(output_dir=str(tmp_path), use_cpu=True, rollout_turn_limit_s=2.0, rollout_max_notices=4)
    fed = {}
    close = ModelPolicy.close

    def keep_fed(policy):
        fed[id(policy)] = list(policy.fed_ids)
        close(policy)

    monkeypatch.setattr(ModelPolicy, "close", keep_fed)
    rows = StreamingRows()
    rollouts = RuntimeRollouts(tasks, tokenizer, args, make_backend, rows)
    trainer = _rollout_trainer(model)
    prompts = [task.id for task in tasks for _ in range(2)]
    output = rollouts(prompts, trainer)
    logs, run, _ = rollouts.play(model, prompts, 0)  # the same step: the same seeds, so the same sessions
    assert len(output["completion_ids"]) == 4
    for index, log in enumerate(logs):
        rendering = render(log, tokenizer)
        system = sum(rendering.sink)
        assert output["prompt_ids"][index] + output["completion_ids"][index] == rendering.input_ids
        assert output["env_mask"][index] == [int(label != -100) for label in rendering.labels[system:]]
        assert 0 < sum(output["env_mask"][index]) < len(output["completion_ids"][index])
        rows.get(rendering.input_ids)  # the trainer will find its streaming mask
    # What each session fed the model is the start of its rendering, token for token (never re-tokenized).
    renderings = [render(log, tokenizer).input_ids for log in logs]
    assert len(fed) >= 4 and all(any(ids[: len(f)] == f for ids in renderings) for f in fed.values())
    # Rewards' inputs, one per rollout, and the metrics of the rollout.
    assert len(output["success"]) == len(output["latency_s"]) == len(output["violations"]) == 4
    assert output["progress"] == [task_progress(log) for log in run.logs]
    assert all(0 <= latency <= args.latency_cap_s for latency in output["latency_s"])
    assert trainer._metrics["train"]["rollout/seconds"][0] > 0


def test_with_expert_generations_the_last_rollout_of_each_group_is_the_experts_replay_of_its_task_and_carries_loss(
    generated, tiny_chatml_model, tmp_path
):
    from data_gen.expert import expert_factory

    model, tokenizer = tiny_chatml_model
    tasks = _tasks(generated, 2)
    args = ClockGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, rollout_turn_limit_s=2.0, rollout_max_notices=4, num_generations=2,
        per_device_train_batch_size=4, expert_generations=1,
    )  # fmt: skip
    rows = StreamingRows()
    rollouts = RuntimeRollouts(tasks, tokenizer, args, make_backend, rows, expert_factory("speculative"))
    trainer = _rollout_trainer(model)
    prompts = [task.id for task in tasks for _ in range(2)]
    output = rollouts(prompts, trainer)
    logs, _, _ = rollouts.play(model, prompts, 0)  # the same step: the same sessions
    for index, task in ((1, tasks[0]), (3, tasks[1])):
        # The expert takes the training timeline's actions, in its order (their times are the rollouts' device's),
        # its session is rendered as every rollout is, and its own actions carry loss.
        actions = [(e.kind, e.name, e.arguments, e.text) for e in logs[index].events if e.kind in AGENT_KINDS]
        assert actions == [(e.kind, e.name, e.arguments, e.text) for e in task.events if e.kind in AGENT_KINDS]
        rendering = render(logs[index], tokenizer)
        system = sum(rendering.sink)
        assert output["prompt_ids"][index] + output["completion_ids"][index] == rendering.input_ids
        assert output["env_mask"][index] == [int(label != -100) for label in rendering.labels[system:]]
        assert sum(output["env_mask"][index]) > 0
        assert output["success"][index] == 1.0
        rows.get(rendering.input_ids)
    # The policy's rollouts are its own: random weights complete nothing, and the rollout curves read theirs alone.
    assert output["success"][0] == output["success"][2] == 0.0
    assert trainer._metrics["train"]["rollout/success"] == [0.0]
    assert trainer._metrics["train"]["rollout/expert_success"] == [1.0]
    with pytest.raises(ValueError, match="no experts were given"):
        RuntimeRollouts(tasks, tokenizer, args, make_backend, StreamingRows())
    with pytest.raises(ValueError, match="one after another"):
        rollouts.play(model, [tasks[0].id, tasks[1].id, tasks[0].id, tasks[1].id], 0)
    with pytest.raises(ValueError, match="expert_generations is 2"):
        ClockGRPOConfig(output_dir=str(tmp_path), use_cpu=True, num_generations=2, expert_generations=2)


def test_rollouts_hand_their_continuation_temperature_to_every_sessions_policy(
    generated, tiny_chatml_model, tmp_path, monkeypatch
):
    from clocktune.runtime.model_policy import ModelPolicy

    model, tokenizer = tiny_chatml_model
    tasks = _tasks(generated, 1)
    args = ClockGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, rollout_turn_limit_s=1.0, rollout_max_notices=2,
        rollout_continuation_temperature=0.0,
    )  # fmt: skip
    seen = []
    close = ModelPolicy.close

    def keep_temperatures(policy):
        seen.append((policy.temperature, policy.continuation_temperature))
        close(policy)

    monkeypatch.setattr(ModelPolicy, "close", keep_temperatures)
    RuntimeRollouts(tasks, tokenizer, args, make_backend, StreamingRows()).play(model, [tasks[0].id] * 2, 0)
    assert seen == [(1.0, 0.0), (1.0, 0.0)]
    with pytest.raises(ValueError, match="rollout_continuation_temperature"):
        ClockGRPOConfig(output_dir=str(tmp_path), use_cpu=True, rollout_continuation_temperature=-1.0)


def test_at_step_zero_the_trainers_logprobs_equal_the_rollouts_and_differ_from_a_padding_mask(
    generated, checkpoint, tmp_path
):
    tasks = _tasks(generated, 2)
    write_timelines(tmp_path / "tasks.jsonl", tasks)
    data_args, args, model_args = _args(tmp_path, checkpoint, tmp_path / "tasks.jsonl")
    from clocktune.train import grpo

    trainer = grpo.build_trainer(data_args, args, model_args, make_backend)
    inputs = [{"prompt": tasks[0].id}, {"prompt": tasks[0].id}]
    batch = trainer._generate_and_score_completions(inputs)
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    keep = batch["completion_ids"].size(1)
    model = trainer.accelerator.unwrap_model(trainer.model)
    model.eval()
    with torch.no_grad():
        ours, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, mask, keep)
        theirs, _, _ = super(ClockGRPOTrainer, trainer)._get_per_token_logps_and_entropies(
            trainer.model, input_ids, mask, keep
        )
    hidden_rows = 0
    for row in range(input_ids.size(0)):
        ids = input_ids[row][mask[row].bool()].tolist()
        prompt = int(batch["prompt_mask"][row].sum())
        times, until, actions = trainer.streaming_rows.get(ids)
        rendering = Rendering(input_ids=ids, time=times, visible_until=until)
        runtime = torch.tensor(session_logprobs(model, rendering, prompt, args.temperature))
        completion = len(ids) - prompt
        # Only the model's own action tokens carry loss: the trainer scores them alone and leaves the rest at 0.
        scored = torch.tensor(actions[prompt:])
        assert scored.any() and not ours[row, :completion][~scored].any(), row
        assert torch.allclose(ours[row, :completion][scored], runtime[scored], atol=1e-4), row
        if any(not math.isinf(value) for value in until):
            hidden_rows += 1
            assert (ours[row, :completion][scored] - theirs[row, :completion][scored]).abs().max() > 1e-3
    assert hidden_rows > 0


def test_a_grpo_run_logs_every_reward_component_and_killed_mid_step_resumes_with_the_same_data(
    generated, adapter_checkpoint, tmp_path, monkeypatch
):
    from clocktune.train import grpo

    tasks = _tasks(generated, 4)
    write_timelines(tmp_path / "tasks.jsonl", tasks)
    seen = {}
    original = RuntimeRollouts.__call__

    def recording(self, prompts, trainer):
        output = original(self, prompts, trainer)
        seen.setdefault(trainer.state.global_step, (list(prompts), output["completion_ids"]))
        return output

    monkeypatch.setattr(RuntimeRollouts, "__call__", recording)
    save = ["--save_strategy", "steps", "--save_steps", "1", "--max_steps", "2", "--progress_weight", "0.5"]
    # Live evaluation as in SFT (it restores the random state, so the run's steps are those of a run without it).
    live = ["--live_eval_steps", "2", "--live_eval_sessions", "1", "--live_eval_data", str(tmp_path / "tasks.jsonl")]
    whole = grpo.main(
        *_args(tmp_path / "whole", adapter_checkpoint, tmp_path / "tasks.jsonl", *save, *live), make_backend
    )
    logged = {key for entry in whole.state.log_history for key in entry}
    for name in ("task_success", "first_words_latency", "side_effect_violations", "session_notices", "task_progress"):
        assert f"rewards/{name}/mean" in logged
    assert {"rollout/seconds", "rollout/acceptance", "rollout/switched_on_batch", "live/accuracy"} <= logged
    # The reward is the components weighed by the config, the same sum of their means. The tiny model's rollouts make
    # no progress (0 throughout), so the sum cannot see progress's weight: the trainer's weights are checked for it.
    config = whole.args
    weights = {"task_success": 1.0, "first_words_latency": -config.latency_weight}
    weights |= {"side_effect_violations": -config.violation_penalty, "session_notices": -config.notice_penalty}
    weights |= {"task_progress": 0.5}
    assert whole.reward_weights.tolist() == pytest.approx(list(weights.values()))
    for entry in (entry for entry in whole.state.log_history if "reward" in entry):
        expected = sum(weight * entry[f"rewards/{name}/mean"] for name, weight in weights.items())
        assert entry["reward"] == pytest.approx(expected, abs=1e-4)
    # The saved policy loads alone, with the trained weights: an adapter saved on this start would name the base
    # under the starting adapter, and load without it.
    from clocktune.runtime.policy_factories import load_policy_model

    saved, _ = load_policy_model(str(tmp_path / "whole" / "out"))
    trained = whole.accelerator.unwrap_model(whole.model).eval()
    probe = torch.arange(1, 17)[None]
    with torch.no_grad():
        assert torch.allclose(saved(probe).logits, trained(probe).logits, atol=1e-5)
    uninterrupted, seen = dict(seen), {}

    def killed(self, prompts, trainer):
        if trainer.state.global_step == 1:
            raise KeyboardInterrupt  # the process dies inside the second step's rollouts
        return recording(self, prompts, trainer)

    monkeypatch.setattr(RuntimeRollouts, "__call__", killed)
    arguments = _args(tmp_path / "resumed", adapter_checkpoint, tmp_path / "tasks.jsonl", *save)
    with pytest.raises(KeyboardInterrupt):
        grpo.main(*arguments, make_backend)
    assert (tmp_path / "resumed" / "out" / "checkpoint-1").is_dir()
    monkeypatch.setattr(RuntimeRollouts, "__call__", recording)
    seen = {}
    resumed = grpo.main(
        *_args(tmp_path / "resumed", adapter_checkpoint, tmp_path / "tasks.jsonl", *save), make_backend
    )
    assert resumed.state.global_step == 2
    assert set(seen) == {1} and seen[1] == uninterrupted[1]  # only the second step played, the same tasks and sessions


def test_advantages_are_not_divided_by_the_groups_spread_unless_the_config_asks(tmp_path):
    # With group scaling, a task whose rollouts all failed gets advantages of full size from latency alone.
    assert ClockGRPOConfig(output_dir=str(tmp_path), use_cpu=True).scale_rewards == "none"
    assert ClockGRPOConfig(output_dir=str(tmp_path), use_cpu=True, scale_rewards="group").scale_rewards == "group"


def test_grpo_with_push_to_hub_uploads_the_merged_policy_not_an_adapter(
    hub, generated, adapter_checkpoint, tmp_path, monkeypatch
):
    # The recipe script as `accelerate launch recipes/grpo.py` runs it, in this process. A checkpoint is saved at
    # step 1, where a Trainer with push_to_hub would push its adapter; the start is itself an adapter, so an adapter
    # pushed from this run would name a base without the start's weights.
    import runpy

    from transformers import AutoModelForCausalLM

    from clocktune.train.record import TRAINING_RECORD

    write_timelines(tmp_path / "tasks.jsonl", _tasks(generated, 2))
    push = ["--push_to_hub", "true", "--hub_model_id", "me/grpo-policy", "--hub_revision", "trained"]
    save = ["--max_steps", "1", "--save_strategy", "steps", "--save_steps", "1"]
    argv = _argv(tmp_path, adapter_checkpoint, tmp_path / "tasks.jsonl", *save, *push)
    monkeypatch.setattr("sys.argv", ["recipes/grpo.py", *argv])
    runpy.run_path(str(Path(__file__).resolve().parents[1] / "recipes" / "grpo.py"), run_name="__main__")

    out = tmp_path / "out"
    assert (out / "checkpoint-1" / "adapter_config.json").exists()  # what the Trainer would have pushed
    # One repo created and one commit, the final upload: the Trainer pushed nothing of its own.
    assert hub.calls["create"] == 1 and [commit["summary"] for commit in hub.commits] == [
        "Upload model with clocktune"
    ]
    assert hub.files("me/grpo-policy", revision="main") == {}
    files = hub.files("me/grpo-policy", revision="trained")
    assert {"config.json", "model.safetensors", "tokenizer.json", TRAINING_RECORD, "README.md"} <= set(files)
    assert not any(name.startswith(("adapter_", "checkpoint-", "last-checkpoint")) for name in files), sorted(files)
    # The download is the saved policy: a plain model with the trained weights.
    pushed = AutoModelForCausalLM.from_pretrained(hub.export("me/grpo-policy", tmp_path / "dl", revision="trained"))
    saved = AutoModelForCausalLM.from_pretrained(out)
    probe = torch.arange(1, 17)[None]
    with torch.no_grad():
        torch.testing.assert_close(pushed.eval()(probe).logits, saved.eval()(probe).logits, rtol=0, atol=0)


def test_masking_truncated_completions_is_refused_since_no_rollout_ends_at_an_eos_token(tmp_path):
    # TRL would take every session's rendering for a truncated completion and train on nothing.
    with pytest.raises(ValueError, match="mask_truncated_completions: .*would mask them out of the loss"):
        _args(tmp_path, tmp_path / "checkpoint", tmp_path / "tasks.jsonl", "--mask_truncated_completions", "true")
