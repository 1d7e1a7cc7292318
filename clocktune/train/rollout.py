"""On-policy data (DAgger): a checkpoint plays training tasks live, and an expert labels every decision it reached.

A model trained on the teacher's timelines only ever saw states the teacher reaches; once it misses a call live it is
in a state no training example shows, and its mistakes compound. The remedy (DAgger, Ross et al. 2011) is to let the
student act and to label the states *it* reaches with the expert's action there. Here:

1. The student plays each task in the runtime (:func:`~clocktune.runtime.play.run_policy`, journaled: a killed
   rollout resumes where it stopped and gives the same data).
2. Each session log is labelled afterwards (:func:`label_session`): an expert, a policy that decides from what a
   session has shown it plus the task's privileged ground truth (``data_gen.expert``), is fed the log's events in
   order, and at every decision point of the student (each of its actions, each action the session refused) a copy
   of the expert is asked what it would do from that state. Where the student did just that, the expert takes the
   action as its own (a call it issued is one it may modify later); elsewhere it only saw the student act.
   Labelling after the fact gives the labels that labelling live would: the expert sees the same events either
   way, and the student is not slowed by it. An expert labelling its own session agrees at every point.
3. The session becomes training timelines. Where the student agreed with the expert, its action is a target as it
   stands. At each point where it did not, an example ends: the log up to that point, then the expert's action as
   the last event. In every example the only actions that carry loss are that label and the agreeing actions since
   the previous example (``Timeline.context_only`` lists the rest): each target trains once, and the student's
   own divergent actions carry no loss: they are the state it reached, context for the label, never a target.
   What follows the last divergence is one more example: the whole log, loss on the agreeing actions after it.

The examples are rendered by the same renderer as generated data and join the next round's training data
(``clocktune train`` with both folders in ``dataset_name``).
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from clocktune.atomic import atomic_write_text
from clocktune.runtime.journal import RunJournal
from clocktune.runtime.play import run_policy
from clocktune.runtime.policy import Policy, PolicyFactory, PolicySpec
from clocktune.runtime.session import SessionConfig
from clocktune.settings_stamp import stamp_settings
from clocktune.timeline.events import AGENT_KINDS, ON_POLICY_TEACHER, Event, Timeline
from clocktune.timeline.io import write_timelines
from clocktune.tools import BackendFactory

__all__ = ["RolloutSummary", "label_session", "rollout"]

INVALID_ACTION = "invalid action: "  # the start of the notice a session logs for an action it refused


@dataclass
class SessionLabels:
    """What labelling one session found.

    Args:
        examples: The training timelines it became.
        decisions: The student's decision points (actions taken and actions refused).
        agreed: Of those, where the student's action was the expert's.
        labels: The expert's label kind at each point of disagreement, by kind.
    """

    examples: list[Timeline]
    decisions: int
    agreed: int
    labels: Counter = field(default_factory=Counter)


def _same_action(student: Event, label: Event) -> bool:
    # An acknowledgement is any one of them: which words the expert drew is not worth a correction.
    if student.kind == "say" and label.kind == "say" and not student.final and not label.final:
        return True
    keys = ("kind", "call_id", "name", "arguments", "text", "final")
    return all(getattr(student, key) == getattr(label, key) for key in keys)


def _decision_points(events: list[Event]) -> list[int]:
    # Indices of the events the student's decisions produced: its accepted actions, the notices of refused ones.
    return [
        index
        for index, event in enumerate(events)
        if event.kind in AGENT_KINDS or (event.kind == "notice" and (event.text or "").startswith(INVALID_ACTION))
    ]


def _example(log: Timeline, events: list[Event], context_only: list[str], suffix: str) -> Timeline:
    return Timeline(
        id=f"{log.id}-{suffix}",
        domain=log.domain,
        task=log.task,
        seed=log.seed,
        teacher=ON_POLICY_TEACHER,
        tools=log.tools,
        initial_state=log.initial_state,
        ground_truth=log.ground_truth,
        events=events,
        context_only=context_only,
    )


def label_session(log: Timeline, expert: Policy) -> SessionLabels:
    """Labels a student's session log with an expert's actions and cuts it into training timelines.

    Args:
        log: The session log (``SessionLog.timeline``) of the student's live session.
        expert: A fresh expert for the session's task; it is fed the log's events in order.

    Returns:
        The examples (see the module docstring for which actions carry loss) and the agreement counts.
    """
    events = log.events
    points = set(_decision_points(events))
    examples: list[Timeline] = []
    trained: set[str] = set()  # agent events that were targets in an earlier example
    diverged: set[str] = set()  # the student's actions that were not the expert's
    labels: Counter = Counter()
    agreed = 0
    for index, event in enumerate(events):
        if index in points:
            # The decision saw events[:index]. A copy of the expert answers; where the student did the same, the
            # copy (which now holds that action as its own: its call, its acknowledgement) carries on, elsewhere the
            # expert never took the action and only observes what the student did.
            candidate = copy.deepcopy(expert)
            label = candidate.act(event.t).action
            label_event = None if label is None else label.to_event(f"e{index}", event.t)
            if event.kind in AGENT_KINDS and label_event is not None and _same_action(event, label_event):
                agreed += 1
                expert = candidate
            else:
                if event.kind in AGENT_KINDS:
                    diverged.add(event.id)
                if label_event is not None:
                    prefix = events[:index]
                    context = [e.id for e in prefix if e.kind in AGENT_KINDS and (e.id in trained or e.id in diverged)]
                    examples.append(_example(log, [*prefix, label_event], context, f"r{len(examples)}"))
                    labels[label_event.kind] += 1
                    trained.update(e.id for e in prefix if e.kind in AGENT_KINDS)
        expert.observe([event])
    rest = [e.id for e in events if e.kind in AGENT_KINDS and e.id not in trained and e.id not in diverged]
    if rest:
        context = [e.id for e in events if e.kind in AGENT_KINDS and e.id not in rest]
        examples.append(_example(log, list(events), context, f"r{len(examples)}"))
    return SessionLabels(examples, len(points), agreed, labels)


@dataclass
class RolloutSummary:
    """What a rollout played and wrote.

    Args:
        sessions: Sessions played.
        completed: Of those, tasks the student completed live (its live accuracy on training tasks).
        decisions: The student's decision points.
        agreed: Of those, where it took the expert's action.
        examples: Training timelines written.
        labels: The expert's labels where the student diverged, by action kind.
    """

    sessions: int
    completed: int
    decisions: int
    agreed: int
    examples: int
    labels: dict[str, int]

    @property
    def live_accuracy(self) -> float:
        """Share of the sessions whose task the student completed."""
        return self.completed / self.sessions if self.sessions else 0.0


def rollout(
    timelines: list[Timeline],
    student: PolicySpec,
    experts: PolicyFactory,
    backends: BackendFactory,
    config: SessionConfig,
    out_dir: str | Path,
    settings: dict,
    progress: bool = True,
) -> RolloutSummary:
    """Plays the student on each timeline's task, labels its sessions with the expert, writes the examples.

    Writes ``out_dir/data/rollouts.jsonl`` (the examples, atomically) and ``out_dir/summary.json``; the finished
    sessions are journaled in ``out_dir/journal/<student>.jsonl`` as they end, so that a run killed mid-way and
    started again plays only the sessions it had not finished and writes the same data.

    Args:
        timelines: Training timelines whose user side (and task) the sessions replay.
        student: The policy that acts (a checkpoint's model policy).
        experts: Builds the expert of one timeline (``data_gen.expert.expert_factory``).
        backends: Builds the tool backend of one session.
        config: Session config (virtual clock and device profile for reproducible data).
        out_dir: Output folder.
        settings: What determines the output (model stamp, data, limit, profile, expert); a resume with other
            settings is refused.
        progress: Show a progress bar of finished sessions.

    Returns:
        The summary.

    Raises:
        SettingsMismatchError: When ``out_dir`` holds a rollout started with other settings.
    """
    out = Path(out_dir)
    stamp_settings(out / "settings.json", settings)
    (out / "journal").mkdir(parents=True, exist_ok=True)
    (out / "data").mkdir(exist_ok=True)
    journal = RunJournal(out / "journal" / f"{student.name}.jsonl")
    run = run_policy(student.name, timelines, student.factory, backends, config, 1, progress, journal)
    examples: list[Timeline] = []
    decisions = agreed = 0
    labels: Counter = Counter()
    for timeline, log in zip(timelines, run.logs, strict=True):
        labelled = label_session(log.timeline, experts(timeline))
        examples += labelled.examples
        decisions += labelled.decisions
        agreed += labelled.agreed
        labels.update(labelled.labels)
    write_timelines(out / "data" / "rollouts.jsonl", examples)
    summary = RolloutSummary(
        sessions=len(timelines),
        completed=sum(result.accurate for result in run.results),
        decisions=decisions,
        agreed=agreed,
        examples=len(examples),
        labels=dict(labels.most_common()),
    )
    record = {**asdict(summary), "live_accuracy": summary.live_accuracy, "failures": run.failures()}
    atomic_write_text(out / "summary.json", json.dumps(record, indent=2) + "\n")
    return summary
