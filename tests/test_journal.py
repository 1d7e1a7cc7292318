"""An interrupted evaluation resumes from its journal: same report, only the unfinished sessions played again."""

import json

import pytest

from clocktune.runtime.evaluate import compare_policies
from clocktune.runtime.journal import JournalError, RunJournal
from clocktune.runtime.policy import PolicySpec
from clocktune.runtime.scripted import ScriptedPolicy
from clocktune.runtime.session import SessionConfig
from data_gen.backends import make_backend


class Killed(Exception):
    """Stands for a kill in the middle of an evaluation."""


class Counting:
    """A scripted policy factory that counts the sessions it starts and can fail at the n-th, as a kill would."""

    def __init__(self, strategy: str, fail_at: int | None = None):
        self.strategy, self.fail_at, self.started = strategy, fail_at, 0

    def __call__(self, timeline):
        self.started += 1
        if self.started == self.fail_at:
            raise Killed
        return ScriptedPolicy(timeline, self.strategy)


def _evaluate(timelines, out, policy, baseline=None, config=None):
    return compare_policies(
        timelines,
        PolicySpec("speculative", policy, "scripted:speculative"),
        PolicySpec("sync", baseline or Counting("sync"), "scripted:sync"),
        make_backend,
        config or SessionConfig(failure_rate=0.2),
        out,
        concurrency=4,
        progress=False,
        session_logs=True,
    )


def test_an_interrupted_evaluation_plays_only_its_unfinished_sessions(generated, tmp_path):
    timelines = generated[0][:40]  # every domain, with injected failures: states of every kind go through the journal
    whole = _evaluate(timelines, tmp_path / "whole", Counting("speculative"))

    out = tmp_path / "resumed"
    with pytest.raises(Killed):
        _evaluate(timelines, out, Counting("speculative", fail_at=25))
    journaled = (out / "journal" / "policy_speculative.jsonl").read_text().splitlines()
    assert 10 <= len(journaled) < 25

    policy, baseline = Counting("speculative"), Counting("sync")
    resumed = _evaluate(timelines, out, policy, baseline)
    assert policy.started == len(timelines) - len(journaled) and baseline.started == len(timelines)
    assert resumed == whole
    for name in ("results.jsonl", "sessions_speculative.jsonl", "sessions_sync.jsonl"):
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    assert not (out / "journal").exists()  # the report is written: nothing left to resume


def test_a_journal_of_other_settings_is_not_resumed(generated, tmp_path):
    timelines = generated[0][:12]
    with pytest.raises(Killed):
        _evaluate(timelines, tmp_path, Counting("speculative", fail_at=8))
    with pytest.raises(JournalError, match=r"settings\.json: .*\(config\)"):
        _evaluate(timelines, tmp_path, Counting("speculative"), config=SessionConfig(failure_rate=0.1))
    with pytest.raises(JournalError, match=r"\(timelines\)"):
        _evaluate(generated[0][12:24], tmp_path, Counting("speculative"))


def test_a_line_cut_off_by_a_kill_is_replayed_and_a_bad_line_is_named(generated, tmp_path):
    from clocktune.runtime.session import Session
    from clocktune.runtime.virtual_clock import run_virtual

    logs = [
        run_virtual(Session(t, ScriptedPolicy(t, "sync"), SessionConfig(), make_backend(t)).run())
        for t in generated[0][:3]
    ]
    journal = RunJournal(tmp_path / "run.jsonl")
    journal.append(0, logs[0])
    journal.append(1, logs[1])
    with journal.path.open("a") as handle:
        handle.write('{"index": 2, "timeline": {"id"')  # killed mid-line
    assert sorted(journal.load()) == [0, 1]
    journal.append(2, logs[2])
    loaded = journal.load()
    assert sorted(loaded) == [0, 1, 2]
    assert loaded[2].timeline == logs[2].timeline and loaded[2].first_words == logs[2].first_words

    with journal.path.open("a") as handle:
        handle.write(json.dumps({"index": 3, "timeline": {}}) + "\n")
    with pytest.raises(JournalError, match=r"run\.jsonl:4"):
        journal.load()


def test_a_checkpoint_trained_again_in_the_same_folder_gets_another_stamp(tmp_path):
    import os

    from clocktune.runtime.journal import checkpoint_stamp

    weights = tmp_path / "adapter_model.safetensors"
    weights.write_bytes(b"first")
    first = checkpoint_stamp(str(tmp_path))
    assert first is not None and checkpoint_stamp(str(tmp_path)) == first
    weights.write_bytes(b"again")  # the same size: only the modification time tells the two apart
    os.utime(weights, ns=(1, 1))
    assert checkpoint_stamp(str(tmp_path)) != first
    assert checkpoint_stamp("scripted") is None
