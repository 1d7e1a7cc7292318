"""Screening GRPO's training tasks: the start plays each greedily and as a group, the run trains on the tasks whose
outcome can move, and the outcomes are kept in the run's folder so that a run started again does not play them."""

import json
import random

import pytest

from clocktune.runtime import play
from clocktune.timeline.io import write_timelines
from clocktune.train import task_screen
from clocktune.train.grpo import build_trainer, make_parser
from clocktune.train.grpo_config import ClockGRPOConfig
from clocktune.train.task_screen import SCREEN_FILE, ScreenedTask, kept_tasks, screen_settings, screen_tasks
from data_gen.backends import make_backend

SHORT = ["--rollout_turn_limit_s", "2.0", "--rollout_max_notices", "4"]


def _argv(tmp_path, checkpoint, data, *extra):
    return [
        "--model_name_or_path", str(checkpoint), "--train_data", str(data), "--output_dir", str(tmp_path / "out"),
        "--use_cpu", "--bf16", "false", "--report_to", "none", "--seed", "0", "--num_generations", "2",
        "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1", "--max_steps", "1",
        "--save_strategy", "no", "--use_peft", "--lora_r", "4", "--lora_alpha", "8",
        "--lora_target_modules", "q_proj", "v_proj", *SHORT, *extra,
    ]  # fmt: skip


@pytest.fixture
def run_inputs(tmp_path, generated, tiny_chatml_model):
    model, tokenizer = tiny_chatml_model
    checkpoint = tmp_path / "checkpoint"
    model.save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    tasks = [t for t in generated[0] if len(t.events) < 40][:6]
    data = tmp_path / "train.jsonl"
    write_timelines(data, tasks)
    return checkpoint, data, tasks


def test_greedy_failed_keeps_tasks_greedy_play_fails_and_a_sample_completes_and_mixed_keeps_groups_of_both():
    cases = {
        "fails, a sample completes": ScreenedTask("a", False, (False, True)),
        "fails, no sample completes": ScreenedTask("b", False, (False, False)),
        "completes, a sample fails": ScreenedTask("c", True, (True, False)),
        "completes, every sample completes": ScreenedTask("d", True, (True, True)),
    }
    kept = {rule: [name for name, task in cases.items() if task.kept(rule)] for rule in ("greedy_failed", "mixed")}
    assert kept["greedy_failed"] == ["fails, a sample completes"]
    assert kept["mixed"] == ["fails, a sample completes", "completes, a sample fails"]
    with pytest.raises(ValueError, match="screen_keep is 'best'"):
        cases["fails, a sample completes"].kept("best")


def test_a_screen_that_keeps_no_task_says_how_many_greedy_play_failed_and_how_many_a_sample_completed(generated):
    tasks = generated[0][:3]
    screened = [ScreenedTask(task.id, False, (False, False)) for task in tasks]
    with pytest.raises(ValueError, match=r"keeps none of the 3 screened tasks \(greedy play failed 3, a sample comp"):
        kept_tasks(tasks, screened, "greedy_failed")
    assert kept_tasks(tasks, [ScreenedTask(tasks[1].id, False, (True, False)), *screened[:1]], "greedy_failed") == [
        tasks[1]
    ]


def test_the_screen_plays_each_drawn_task_greedily_and_as_a_group_writes_it_and_a_second_call_plays_nothing(
    run_inputs, tmp_path, tiny_chatml_model, monkeypatch
):
    checkpoint, data, tasks = run_inputs
    model, tokenizer = tiny_chatml_model
    _, args, _ = make_parser().parse_args_and_config(args=_argv(tmp_path, checkpoint, data, "--screen_tasks", "4"))
    settings = screen_settings(args, str(checkpoint), [str(data)])
    played = []
    run_policy = play.run_policy

    def counting(name, timelines, *rest, **kwargs):
        played.append((name, len(timelines)))
        return run_policy(name, timelines, *rest, **kwargs)

    monkeypatch.setattr(play, "run_policy", counting)
    screened = screen_tasks(model, tokenizer, tasks, args, make_backend, settings, progress=lambda line: None)
    # 4 tasks drawn by the seed, each played once greedily and twice sampled (num_generations).
    assert played == [("screen", 4), ("grpo", 8)]
    assert len({task.id for task in screened}) == 4 and {task.id for task in screened} <= {t.id for t in tasks}
    assert all(len(task.samples) == 2 for task in screened)
    assert model.training is False  # the fixture's model was in eval mode and is left so
    written = json.loads((tmp_path / "out" / SCREEN_FILE).read_text())
    assert written["settings"] == json.loads(json.dumps(settings))
    assert [row["id"] for row in written["tasks"]] == [task.id for task in screened]

    played.clear()
    assert screen_tasks(model, tokenizer, tasks, args, make_backend, settings, progress=lambda line: None) == screened
    assert played == []

    other = screen_settings(args, str(checkpoint), [str(data)]) | {"temperature": 0.5}
    with pytest.raises(ValueError, match=rf"{SCREEN_FILE}: screened with other settings \(temperature\)"):
        screen_tasks(model, tokenizer, tasks, args, make_backend, other, progress=lambda line: None)


def test_a_run_with_screen_tasks_trains_only_on_the_kept_tasks_of_the_screen_its_folder_holds(run_inputs, tmp_path):
    checkpoint, data, tasks = run_inputs
    data_args, args, model_args = make_parser().parse_args_and_config(
        args=_argv(tmp_path, checkpoint, data, "--screen_tasks", "4")
    )
    # The screen as a run cut short after it would have left it: read back, not played (the tiny model completes
    # nothing, so only a screen written here can keep a task).
    settings = screen_settings(args, model_args.model_name_or_path, data_args.train_data)
    drawn = random.Random(0).sample(tasks, 4)
    rows = [
        {"id": drawn[0].id, "greedy": False, "samples": [True, False]},
        {"id": drawn[1].id, "greedy": True, "samples": [True, False]},
        {"id": drawn[2].id, "greedy": False, "samples": [False, False]},
        {"id": drawn[3].id, "greedy": False, "samples": [False, True]},
    ]
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / SCREEN_FILE).write_text(json.dumps({"settings": settings, "tasks": rows}))
    trainer = build_trainer(data_args, args, model_args, make_backend)
    assert trainer.train_dataset["prompt"] == [drawn[0].id, drawn[3].id]
    assert set(trainer.rollout_func.tasks) == {drawn[0].id, drawn[3].id}


def test_a_run_whose_screen_keeps_nothing_stops_before_training_with_the_screens_counts(run_inputs, tmp_path):
    checkpoint, data, _ = run_inputs
    data_args, args, model_args = make_parser().parse_args_and_config(
        args=_argv(tmp_path, checkpoint, data, "--screen_tasks", "2", "--screen_keep", "mixed")
    )
    with pytest.raises(ValueError, match=r"screen_keep 'mixed' keeps none of the 2 screened tasks"):
        build_trainer(data_args, args, model_args, make_backend)
    assert len(json.loads((tmp_path / "out" / SCREEN_FILE).read_text())["tasks"]) == 2


def test_a_negative_screen_or_an_unknown_rule_is_refused(tmp_path, run_inputs):
    checkpoint, data, _ = run_inputs
    with pytest.raises(ValueError, match="screen_tasks is -1"):
        make_parser().parse_args_and_config(args=_argv(tmp_path, checkpoint, data, "--screen_tasks", "-1"))
    with pytest.raises(ValueError, match="screen_keep is 'best': give one of greedy_failed, mixed"):
        ClockGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", screen_keep="best")


def test_a_negative_sampling_seed_is_refused_where_it_is_made_not_taken_for_a_session_notice(
    generated, tiny_chatml_model, tmp_path
):
    # The screen once keyed its samples as steps -1, -17, ...: every sampled action raised inside the session,
    # which counted each as a notice until it gave up, and the screen read "no sample ever succeeds".
    from clocktune.runtime.model_policy import ModelPolicy
    from clocktune.train.grpo_rollouts import RuntimeRollouts, StreamingRows

    model, tokenizer = tiny_chatml_model
    task = generated[0][0]
    args = ClockGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", seed=0)
    rollouts = RuntimeRollouts([task], tokenizer, args, make_backend, StreamingRows())
    assert rollouts.seeds(0, 2) == [0, 1]
    with pytest.raises(ValueError, match="non-negative"):
        rollouts.seeds(-1, 2)
    with pytest.raises(ValueError, match="seed is -10007: sampling seeds are non-negative"):
        ModelPolicy(model, tokenizer, task, temperature=1.0, seed=-10007)
    assert min(rollouts.seeds(task_screen.SCREEN_STEPS, 4)) > max(rollouts.seeds(10**6, 4))
