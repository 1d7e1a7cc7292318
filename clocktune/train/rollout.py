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

With ``takeover`` the student plays only until its first decision that is not the expert's
(:class:`TakeoverPolicy`): that action stands, and the expert plays the rest of the session from the state the
student's mistake made: cancel or modify a wrong call, make a missed one, commit what is right, answer. Labelled as
above, such a session gives the label at the mistake (the log up to it, then the expert's action) and the whole
session with loss on the expert's actions after it: a **recovery demonstration**, which a session cut at each label
never shows (the student's later mistakes go unlabelled instead). The student stops deciding at the takeover, so
a rollout costs fewer model actions.

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
from clocktune.runtime.policy import Decision, Policy, PolicyFactory, PolicySpec
from clocktune.runtime.session import SessionConfig
from clocktune.settings_stamp import stamp_settings
from clocktune.timeline.events import AGENT_KINDS, ON_POLICY_TEACHER, Event, Timeline
from clocktune.timeline.io import write_timelines
from clocktune.tools import BackendFactory

__all__ = ["RolloutSummary", "TakeoverPolicy", "label_session", "rollout", "takeover_factory"]

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


def _expert_choice(expert: Policy, t: float, event_id: str) -> tuple[Policy, Event | None]:
    # A copy of the expert asked at ``t``, and its action as an event (``None``: no action). Where the student did
    # the same, the copy (which now holds that action as its own: its call, its acknowledgement) carries on;
    # elsewhere the expert never took the action and only observes what the student did. The one definition of
    # agreement for labelling (label_session) and for handing a session over (TakeoverPolicy).
    candidate = copy.deepcopy(expert)
    label = candidate.act(t).action
    return candidate, None if label is None else label.to_event(event_id, t)


class TakeoverPolicy:
    """The student until its first action that is not the expert's, then the expert: a recovery demonstration.

    A copy of the expert shadows the student, fed the session's events one at a time as :func:`label_session` feeds
    them, and is asked at each of the student's decisions what it would do. Where the student does the same, the
    copy carries on as the expert. At the first decision where it does not (another action, or an output that is
    no valid action), the student's action still goes to the session, so that its mistake is in the state; from
    the next decision on the expert decides, and the student, no longer asked, reads nothing more.

    Args:
        student: The policy that acts first (a checkpoint's model policy).
        expert: A fresh expert for the same session's task.
    """

    io_bound = False

    def __init__(self, student: Policy, expert: Policy) -> None:
        self.name = student.name
        self.student = student
        self.expert = expert
        self.taken_over = False

    def observe(self, events: list[Event]) -> int:
        """Feeds the events to the expert, and to the student until the takeover.

        Args:
            events: What the session logged since the last call.

        Returns:
            The context tokens read: the student's count until the takeover, the expert's after it.
        """
        tokens = 0
        for event in events:
            tokens += self.expert.observe([event])
        return tokens if self.taken_over else self.student.observe(events)

    def act(self, t: float) -> Decision:
        """The student's action, compared with the expert's; after the first disagreement, the expert's.

        Args:
            t: Session time of the decision.

        Returns:
            The decision that goes to the session.
        """
        if self.taken_over:
            return self.expert.act(t)
        decision = self.student.act(t)
        candidate, label = _expert_choice(self.expert, t, "expert")
        if decision.action is not None and label is not None and _same_action(decision.action.to_event("", t), label):
            self.expert = candidate
            return decision
        self.taken_over = True
        self.student.close()  # its KV cache is not read again
        return decision

    def close(self) -> None:
        """Releases the student (once) and the expert."""
        if not self.taken_over:
            self.student.close()
        self.expert.close()


def takeover_factory(student: PolicyFactory, experts: PolicyFactory) -> PolicyFactory:
    """A factory of :class:`TakeoverPolicy` sessions.

    Args:
        student: Builds the student of one session.
        experts: Builds the expert of one session.

    Returns:
        ``factory(timeline) -> TakeoverPolicy``.
    """

    def factory(timeline: Timeline) -> TakeoverPolicy:
        return TakeoverPolicy(student(timeline), experts(timeline))

    return factory


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
            # The decision saw events[:index].
            candidate, label_event = _expert_choice(expert, event.t, f"e{index}")
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
        completed: Of those, tasks the student completed live (its live accuracy on training tasks); with
            ``takeover``, those it completed without the expert taking over.
        decisions: The student's decision points.
        agreed: Of those, where it took the expert's action.
        examples: Training timelines written.
        labels: The expert's labels where the student diverged, by action kind.
        taken_over: Sessions the expert took over (0 without ``takeover``).
    """

    sessions: int
    completed: int
    decisions: int
    agreed: int
    examples: int
    labels: dict[str, int]
    taken_over: int = 0

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
    takeover: bool = False,
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
        takeover: The expert plays each session on from the student's first divergence (:class:`TakeoverPolicy`).

    Returns:
        The summary.

    Raises:
        SettingsMismatchError: When ``out_dir`` holds a rollout started with other settings.
    """
    out = Path(out_dir)
    stamp_settings(out / "settings.json", {**settings, "takeover": takeover})
    (out / "journal").mkdir(parents=True, exist_ok=True)
    (out / "data").mkdir(exist_ok=True)
    journal = RunJournal(out / "journal" / f"{student.name}.jsonl")
    factory = takeover_factory(student.factory, experts) if takeover else student.factory
    # As many sessions at once as the student's engine batches (a takeover's expert does not go through it).
    engine = getattr(student.factory, "engine", None)
    width = engine.batch_size if engine is not None and not takeover else 1
    run = run_policy(student.name, timelines, factory, backends, config, width, progress, journal)
    examples: list[Timeline] = []
    decisions = agreed = completed = taken_over = 0
    labels: Counter = Counter()
    for timeline, log, result in zip(timelines, run.logs, run.results, strict=True):
        labelled = label_session(log.timeline, experts(timeline))
        examples += labelled.examples
        decisions += labelled.decisions
        agreed += labelled.agreed
        labels.update(labelled.labels)
        # Under takeover the first divergence hands the session to the expert: what the student completes alone
        # is a session without one.
        handed_over = takeover and labelled.agreed < labelled.decisions
        if handed_over:
            taken_over += 1
        elif result.accurate:
            completed += 1
    write_timelines(out / "data" / "rollouts.jsonl", examples)
    summary = RolloutSummary(
        sessions=len(timelines),
        completed=completed,
        decisions=decisions,
        agreed=agreed,
        examples=len(examples),
        labels=dict(labels.most_common()),
        taken_over=taken_over,
    )
    record = {**asdict(summary), "live_accuracy": summary.live_accuracy, "failures": run.failures()}
    atomic_write_text(out / "summary.json", json.dumps(record, indent=2) + "\n")
    return summary
