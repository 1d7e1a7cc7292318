"""On-policy rollouts: the expert's labels, which actions carry loss, and a rollout that survives a kill."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tiny_models import TINY
from tiny_tokenizer import tiny_tokenizer
from transformers import LlamaConfig, LlamaForCausalLM

from clocktune.encoding import extend_tokenizer
from clocktune.render import IGNORE_INDEX, render
from clocktune.runtime.play import run_policy
from clocktune.runtime.policy import PolicySpec
from clocktune.runtime.policy_factories import policy_factory
from clocktune.runtime.session import SessionConfig
from clocktune.timeline.events import AGENT_KINDS
from clocktune.timeline.validate import validate_timeline
from clocktune.train.rollout import TakeoverPolicy, label_session, rollout, takeover_factory
from data_gen.backends import make_backend
from data_gen.config import GeneratorConfig
from data_gen.dialogues import select_domains
from data_gen.expert import expert_factory
from data_gen.expert.perturb import RECOVERABLE_PERTURBATIONS, PerturbedExpert

ROOT = Path(__file__).resolve().parents[1]


def _extended_tokenizer():
    tokenizer = tiny_tokenizer("chatml")
    extend_tokenizer(tokenizer, "abs_bins", "chatml")
    return tokenizer


@pytest.fixture(scope="module")
def experts():
    return expert_factory("speculative", GeneratorConfig(), select_domains(GeneratorConfig()))


def _trained_ids(example, tokenizer) -> set[str]:
    # The agent events of an example whose tokens carry loss once rendered.
    rendering = render(example, tokenizer)
    labelled = zip(rendering.event_index, rendering.labels, strict=True)
    indices = {index for index, label in labelled if label != IGNORE_INDEX}
    return {example.events[index].id for index in indices}


def test_a_student_that_plays_as_the_expert_agrees_everywhere_and_its_session_is_one_ordinary_example(
    generated, experts
):
    timelines = generated[0][:40]
    run = run_policy("student", timelines, experts, make_backend, SessionConfig())
    for timeline, log in zip(timelines, run.logs, strict=True):
        labelled = label_session(log.timeline, experts(timeline))
        assert labelled.decisions > 0 and labelled.agreed == labelled.decisions
        (example,) = labelled.examples
        assert example.events == log.timeline.events and example.context_only == []


def test_a_diverging_student_is_labelled_with_the_experts_action_and_its_own_actions_carry_no_loss(generated, experts):
    tokenizer = _extended_tokenizer()
    timelines = generated[0][:60]
    # The turn-based loop as the student: it waits through speech where the speculative expert acts.
    run = run_policy("student", timelines, policy_factory("sync"), make_backend, SessionConfig())
    diverged_sessions = 0
    for timeline, log in zip(timelines, run.logs, strict=True):
        labelled = label_session(log.timeline, experts(timeline))
        diverged_sessions += labelled.agreed < labelled.decisions
        log_agent = [event for event in log.timeline.events if event.kind in AGENT_KINDS]
        trained_log_events: list[str] = []
        for example in labelled.examples:
            assert validate_timeline(example) == []
            trained = _trained_ids(example, tokenizer)
            is_cut = example.events != log.timeline.events
            if is_cut:
                label = example.events[-1]
                assert label.kind in AGENT_KINDS and label.id in trained
                # The label replaces what the student did at that point, which is not in the example.
                assert example.events[:-1] == log.timeline.events[: len(example.events) - 1]
                trained.discard(label.id)
            trained_log_events += sorted(trained)
        # Each of the student's actions is a target at most once, and those it did not share with the expert never.
        assert len(trained_log_events) == len(set(trained_log_events))
        assert set(trained_log_events) <= {event.id for event in log_agent}
        assert len(trained_log_events) <= labelled.agreed
    # Where the words settle nothing early (a late intent) the two agree throughout; elsewhere they part.
    assert diverged_sessions >= len(timelines) // 2


def test_a_student_taken_over_at_its_first_mistake_leaves_the_expert_to_finish_and_its_recovery_carries_loss(
    generated, experts, tmp_path
):
    tokenizer = _extended_tokenizer()
    timelines = generated[0][:80]
    fuzzers: dict[str, PerturbedExpert] = {}

    def student(timeline):
        # The expert with one wrong action a session at most (a wrong tool or arguments, a missed or a spurious
        # call): the mistakes after which the expert can always still finish.
        rng = random.Random(f"student:{timeline.id}")
        fuzzers[timeline.id] = PerturbedExpert(experts(timeline), timeline, RECOVERABLE_PERTURBATIONS, rng, budget=1)
        return fuzzers[timeline.id]

    policies: list[TakeoverPolicy] = []

    def played(timeline):
        policies.append(takeover_factory(student, experts)(timeline))
        return policies[-1]

    run = run_policy("student", timelines, played, make_backend, SessionConfig())
    taken_over = 0
    for timeline, log, result, policy in zip(timelines, run.logs, run.results, policies, strict=True):
        fuzzer = fuzzers[timeline.id]
        assert policy.taken_over == bool(fuzzer.own_event_ids or fuzzer.applied), timeline.id
        # The expert finishes the task from the state the student's mistake made, and releases nothing wrong.
        assert log.end_reason == "done" and result.accurate and result.side_effect_violations == 0, timeline.id
        labelled = label_session(log.timeline, experts(timeline))
        if not policy.taken_over:
            assert labelled.agreed == labelled.decisions and len(labelled.examples) == 1
            continue
        taken_over += 1
        # One divergence, the student's mistake; the expert that labels agrees with every action after it.
        assert labelled.agreed == labelled.decisions - 1, timeline.id
        cut, whole = labelled.examples
        assert whole.events == log.timeline.events
        mistake = set(fuzzer.own_event_ids)
        after = [event.id for event in log.timeline.events[len(cut.events) :] if event.kind in AGENT_KINDS]
        assert after, timeline.id  # the recovery: the expert's actions after the mistake
        trained = _trained_ids(whole, tokenizer)
        assert set(after) - mistake <= trained and not mistake & trained
        assert cut.events[-1].id in _trained_ids(cut, tokenizer)  # the label at the mistake
    assert taken_over >= len(timelines) // 4

    spec = PolicySpec("student", student, "fuzzed")
    summary = rollout(
        timelines, spec, experts, make_backend, SessionConfig(), tmp_path, {}, progress=False, takeover=True
    )
    assert summary.taken_over == taken_over
    assert summary.completed == len(timelines) - taken_over  # what the student completed without the expert
    assert summary.examples == len(timelines) + taken_over


def _tiny_checkpoint(path: Path) -> None:
    tokenizer = _extended_tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=4096, **TINY))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


def _rollout_command(checkpoint: Path, data: Path, out: Path) -> list[str]:
    # --no-constrained: an untrained student under the grammar plays each turn to its 60 s limit (2.3x the time);
    # what is tested here, the journal, is the same either way.
    return [
        sys.executable, "-m", "clocktune.cli", "rollout", "--model", str(checkpoint), "--data", str(data),
        "--out", str(out), "--limit", "4", "--no-constrained",
    ]  # fmt: skip


def test_a_rollout_killed_mid_way_and_started_again_writes_the_same_data_as_one_that_ran_through(tmp_path):
    from data_gen.cli import main as datagen

    data, checkpoint = tmp_path / "data", tmp_path / "checkpoint"
    assert datagen(["generate", "--num", "4", "--seed", "3", "--out", str(data), "--quiet"]) == 0
    _tiny_checkpoint(checkpoint)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    whole = tmp_path / "whole"
    subprocess.run(_rollout_command(checkpoint, data, whole), check=True, env=env, capture_output=True)

    killed = tmp_path / "killed"
    journal = killed / "journal" / "speculative.jsonl"
    process = subprocess.Popen(_rollout_command(checkpoint, data, killed), env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (journal.exists() and journal.read_bytes().count(b"\n") >= 1) and process.poll() is None:
        assert time.monotonic() < deadline, "the rollout journaled no session in 5 minutes"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the rollout finished before it could be killed"
    assert not (killed / "data" / "rollouts.jsonl").exists()
    finished = journal.read_bytes().count(b"\n")
    assert 1 <= finished < 4
    subprocess.run(_rollout_command(checkpoint, data, killed), check=True, env=env, capture_output=True)

    assert (killed / "data" / "rollouts.jsonl").read_bytes() == (whole / "data" / "rollouts.jsonl").read_bytes()
    assert json.loads((killed / "summary.json").read_text()) == json.loads((whole / "summary.json").read_text())


def test_a_timeline_that_names_a_missing_or_non_agent_event_as_context_only_fails_validation(generated):
    from dataclasses import replace

    timeline = generated[0][0]
    user_chunk = next(event.id for event in timeline.events if event.kind == "user_chunk")
    agent = next(event.id for event in timeline.events if event.kind == "tool_call")
    assert validate_timeline(replace(timeline, context_only=[agent])) == []
    issues = validate_timeline(replace(timeline, context_only=[agent, user_chunk, "e999"]))
    assert [issue.field for issue in issues] == ["context_only.1", "context_only.2"]


def test_a_rollout_of_data_without_its_generator_config_is_refused_naming_the_file(tmp_path, capsys):
    from clocktune.cli import main

    (tmp_path / "data").mkdir()
    argv = ["rollout", "--model", str(tmp_path / "no-checkpoint"), "--data", str(tmp_path / "data")]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert f"{tmp_path / 'data' / 'generation.json'}: not found" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_students_off_schema_call_validates_as_context_but_not_as_a_target(generated):
    from dataclasses import replace

    timeline = generated[0][0]
    index, call = next((i, e) for i, e in enumerate(timeline.events) if e.kind == "tool_call" and e.arguments)
    key = next(iter(call.arguments))
    off_schema = replace(call, arguments={**call.arguments, key: {"not": "a value of its schema"}})
    events = [*timeline.events[:index], off_schema, *timeline.events[index + 1 :]]
    as_target = replace(timeline, events=events)
    assert any(issue.field.startswith(f"events.{index}.arguments") for issue in validate_timeline(as_target))
    assert validate_timeline(replace(as_target, context_only=[call.id])) == []


def test_a_rollout_whose_student_drafts_speculatively_writes_the_same_data_and_summary_and_reports_its_acceptance(
    tmp_path,
):
    from clocktune.cli import main
    from data_gen.cli import main as datagen

    data, checkpoint = tmp_path / "data", tmp_path / "checkpoint"
    assert datagen(["generate", "--num", "3", "--seed", "5", "--out", str(data), "--quiet"]) == 0
    _tiny_checkpoint(checkpoint)
    # The plain argmax: under the grammar (the default) the untrained student writes only valid actions and calls
    # tools until each turn's 60 s limit. Drafting under the grammar is checked in test_speculative_decoding.py.
    argv = ["rollout", "--model", str(checkpoint), "--data", str(data), "--limit", "3", "--no-constrained"]
    assert main([*argv, "--out", str(tmp_path / "plain")]) == 0
    assert main([*argv, "--out", str(tmp_path / "drafted"), "--draft", "prompt_lookup"]) == 0

    plain = (tmp_path / "plain" / "data" / "rollouts.jsonl").read_bytes()
    assert plain and (tmp_path / "drafted" / "data" / "rollouts.jsonl").read_bytes() == plain
    summaries = [json.loads((tmp_path / run / "summary.json").read_text()) for run in ("plain", "drafted")]
    assert summaries[0] == summaries[1] and "decoding" not in summaries[0]
    decoding = json.loads((tmp_path / "drafted" / "decoding.json").read_text())["decoding"]["student"]
    assert decoding["drafter"] == "prompt_lookup" and decoding["drafts"] > 0
    plain_decoding = json.loads((tmp_path / "plain" / "decoding.json").read_text())["decoding"]["student"]
    assert plain_decoding["drafter"] == "none" and plain_decoding["drafts"] == 0
