"""Reactive experts: every strategy completes generated tasks live, and the expert finishes from perturbed states.

The fuzzer (``data_gen.expert.perturb.PerturbedExpert``, the generator's noise) is a policy wrapping the expert: it lets the expert observe everything and, now and then, replaces the
action the expert chose with a wrong one (another tool, other arguments, a wait instead of a call, an answer before
the results, a commit before the calls are right). The expert must then complete every task that can still be
completed; the sessions that cannot are classified by why, from the log and the fuzzer's record alone.
"""

import json
import random
import time
from collections import Counter

import pytest

from clocktune.runtime.play import run_policy
from clocktune.runtime.scoring import score_session
from clocktune.runtime.session import SessionConfig
from clocktune.timeline.analysis import call_records
from clocktune.timeline.events import Timeline
from clocktune.timeline.refs import resolve_refs
from data_gen.backends import make_backend
from data_gen.config import GeneratorConfig
from data_gen.dialogues import dialogue_task, select_domains
from data_gen.expert import EXPERT_STRATEGIES, MAX_RETRIES, expert_factory, spoken_words
from data_gen.expert.perturb import PERTURBATIONS, RECOVERABLE_PERTURBATIONS, PerturbedExpert
from data_gen.generate import generate_dialogue


@pytest.fixture(scope="module")
def domains():
    return select_domains(GeneratorConfig())


# Live completion -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", EXPERT_STRATEGIES)
def test_every_expert_strategy_completes_every_generated_task_live(generated, domains, strategy):
    speculative, sync = generated
    for teacher, timelines in (("speculative", speculative[:300]), ("sync", sync[:300])):
        factory = expert_factory(strategy, GeneratorConfig(teacher=teacher), domains)
        run = run_policy(strategy, timelines, factory, make_backend, SessionConfig())
        assert [r.id for r in run.results if not r.accurate] == [], (teacher, strategy, run.failures())
        assert run.violations == 0, (teacher, strategy)
        assert run.per_dialogue("notices") == 0, (teacher, strategy)
        assert {timeline.domain for timeline in timelines} == {domain.name for domain in domains}


def test_the_experts_keep_the_strategies_latency_order(generated, domains):
    timelines = generated[0][:300]
    p50 = {}
    for strategy in EXPERT_STRATEGIES:
        run = run_policy(strategy, timelines, expert_factory(strategy, None, domains), make_backend, SessionConfig())
        p50[strategy] = run.latency(50)
    assert p50["sync"] > p50["sync_parallel"] >= p50["async"] - 0.01
    assert p50["sync"] / p50["speculative"] > 1.4
    assert p50["oracle"] <= p50["speculative"] + 1e-6


def _events(timeline: Timeline) -> list[tuple]:
    return [
        (e.id, e.t, e.kind, e.source, e.call_id, e.name, e.arguments, e.text, e.final, e.revises, e.content, e.error)
        for e in timeline.events
    ]


@pytest.mark.parametrize("teacher", ["speculative", "sync"])
def test_a_generated_timeline_replayed_by_its_expert_gives_the_same_events_at_the_same_times(
    generated, domains, teacher
):
    timelines = generated[0 if teacher == "speculative" else 1]  # 1,000 and 300
    factory = expert_factory(teacher, GeneratorConfig(teacher=teacher), domains)
    run = run_policy(teacher, timelines, factory, make_backend, SessionConfig())
    differ = [t.id for log, t in zip(run.logs, timelines, strict=True) if _events(log.timeline) != _events(t)]
    assert differ == []
    assert all(log.final_state == t.ground_truth.final_state for log, t in zip(run.logs, timelines, strict=True))


def test_the_task_rebuilt_from_a_timelines_seed_is_the_one_it_was_generated_from(generated, domains):
    config = GeneratorConfig()
    for timeline in generated[0][:200]:
        drawn = dialogue_task(timeline.seed, config, domains)
        assert drawn.domain.name == timeline.domain and drawn.task.kind == timeline.task
        assert drawn.initial_state == timeline.initial_state and drawn.tools == timeline.tools
        assert [turn.words for turn in drawn.task.turns] == spoken_words(timeline)


def test_an_expert_refuses_a_timeline_its_config_does_not_rebuild(generated):
    timeline = generated[0][0]
    other = [name for name in ("banking", "weather_news") if name != timeline.domain][0]
    factory = expert_factory("speculative", GeneratorConfig(domains=[other]))
    with pytest.raises(ValueError, match="rebuilds"):
        factory(timeline)
    with pytest.raises(ValueError, match="unknown expert strategy"):
        expert_factory("psychic")


def test_the_expert_runs_transiently_failed_calls_again(generated, domains):
    timelines = generated[0][:300]
    factory = expert_factory("speculative", None, domains)
    run = run_policy("speculative", timelines, factory, make_backend, SessionConfig(failure_rate=0.15))
    failed = [log for log in run.logs if any(e.kind == "tool_result" and e.error for e in log.timeline.events)]
    assert len(failed) > 30  # the faults hit
    for log, result in zip(run.logs, run.results, strict=True):
        assert result.side_effect_violations == 0 and log.notices == 0 and log.end_reason == "done"
        if not result.accurate:
            # Only a call that failed more often than the expert retries is given up on, with an apology naming it.
            counts = Counter(
                (r.name, str(r.arguments)) for r in call_records(log.timeline).values() for _ in r.results
            )
            assert max(counts.values()) > MAX_RETRIES, result.id
            assert log.timeline.events[-1].text.startswith("Sorry, I couldn't complete that:")
    assert run.share("accurate") >= 0.97


# The fuzzer: a PerturbedExpert drawing every kind of perturbation -------------------------------------------------


def _releasing_commit(timeline: Timeline, call_id: str) -> int | None:
    # The index of the commit that released a state-changing call: the first after its last change and after the end
    # of speech before that (a commit releases every open state-changing call; a released one is never open again).
    last_change, end_of_speech = None, -1.0
    for index, event in enumerate(timeline.events):
        if event.kind == "user_chunk" and event.final:
            end_of_speech = event.t
        elif event.call_id == call_id and event.kind in ("tool_call", "tool_modify"):
            last_change = event.t
        elif event.kind == "commit" and last_change is not None and event.t >= end_of_speech:
            return index
    return None


def _call_key(name: str, arguments: dict) -> str:
    return f"{name}:{json.dumps(arguments, sort_keys=True)}"


def _classify(log, fuzzer: PerturbedExpert) -> str | None:
    """Why a fuzzed session cannot be completed any more, from its log and what the fuzzer did; ``None`` when it can.

    - ``ended_by_fuzzer``: the fuzzer's final answer ended the dialogue while a gold result was outstanding;
    - ``irreversible_write``: a state-changing call that ground truth does not ask for took effect (the backend
      ran it and it returned content), released by the fuzzer's commit, and the backend did not end in the ground
      truth's state (no tool undoes a transfer or a booking; a wrong write the gold one overwrites, like a lock set
      twice, leaves the task completable). One released by the expert's commit is an expert bug: it is classified
      ``expert_released_wrong_write`` and fails the test.
    """
    timeline = log.timeline
    own = set(fuzzer.own_event_ids)
    answers = [e for e in timeline.events if e.kind == "say" and e.final]
    if answers and answers[-1].id in own and log.answered:
        return "ended_by_fuzzer"
    wanted = Counter(_call_key(c.name, c.arguments) for c in timeline.ground_truth.calls)
    records = call_records(timeline)
    took_effect = []  # as executed_calls counts them: the current version returned content, not cancelled
    for record in records.values():
        if record.side_effect and record.cancelled_t is None and record.results:
            t, _, error = record.results[-1]
            if error is None and t >= record.last_change_t:
                took_effect.append((t, record))
    for _, record in sorted(took_effect, key=lambda item: item[0]):
        arguments = resolve_refs(record.arguments, lambda target: records[target].results[-1][1])
        key = _call_key(record.name, arguments)
        if wanted[key] > 0:
            wanted[key] -= 1
            continue
        commit = _releasing_commit(timeline, record.call_id)
        event = timeline.events[commit] if commit is not None else None
        if event is None or event.id not in own:
            return "expert_released_wrong_write"
        if log.final_state != timeline.ground_truth.final_state:
            return "irreversible_write"
    return None


def _fuzz_plan(index: int) -> tuple[str, tuple[str, ...], int]:
    # Sessions 0-499: one kind each (83 or 84 per kind), up to 2 perturbations; 500-999: the kinds that leave the expert a
    # move mixed, up to 4, so that a fuzzer's wrong write can meet a fuzzer's commit (an early answer ends the
    # dialogue: mixed in, it would cut most of those sessions short). Strategies cycle through both halves.
    strategy = EXPERT_STRATEGIES[index % len(EXPERT_STRATEGIES)]
    if index < 500:
        return strategy, (PERTURBATIONS[(index // len(EXPERT_STRATEGIES)) % len(PERTURBATIONS)],), 2
    return strategy, tuple(kind for kind in PERTURBATIONS if kind != "early_answer"), 4


def test_the_expert_finishes_every_task_still_completable_from_perturbed_states(generated, domains):
    timelines = generated[0][:1000]
    config = GeneratorConfig()
    experts = {strategy: expert_factory(strategy, config, domains) for strategy in EXPERT_STRATEGIES}
    index_of = {timeline.id: index for index, timeline in enumerate(timelines)}
    fuzzers: dict[str, PerturbedExpert] = {}

    def factory(timeline: Timeline) -> PerturbedExpert:
        index = index_of[timeline.id]
        strategy, kinds, budget = _fuzz_plan(index)
        expert = experts[strategy](timeline)
        fuzzers[timeline.id] = PerturbedExpert(expert, timeline, kinds, random.Random(f"fuzz:{index}"), budget=budget)
        return fuzzers[timeline.id]

    start = time.perf_counter()
    run = run_policy("fuzz", timelines, factory, make_backend, SessionConfig())
    elapsed = time.perf_counter() - start

    outcomes: Counter[str] = Counter()
    by_kind: dict[str, Counter[str]] = {kind: Counter() for kind in PERTURBATIONS}
    for log, result in zip(run.logs, run.results, strict=True):
        fuzzer = fuzzers[log.timeline.id]
        reason = _classify(log, fuzzer)
        where = (log.timeline.id, fuzzer.applied, reason, result.failure)
        # No hang: every session ends by an answer, none by the turn limit or by running out of notices.
        assert log.end_reason == "done", where
        assert fuzzer.expert_notices == 0, where  # the expert never acted invalidly nor waited for nothing
        assert result.side_effect_violations == 0, where
        assert reason != "expert_released_wrong_write", where
        # The classification is exactly the sessions not completed.
        assert result.accurate == (reason is None), where
        outcome = reason or ("completed" if fuzzer.applied else "completed_unperturbed")
        outcomes[outcome] += 1
        for kind in set(fuzzer.applied):
            by_kind[kind][outcome] += 1
    print(f"\n{len(timelines)} fuzzed sessions in {elapsed:.1f} s: {dict(outcomes)}")
    for kind, row in by_kind.items():
        print(f"  sessions with {kind:17s} {dict(row)}")
    assert all(sum(row.values()) >= 60 for row in by_kind.values())  # early answers need a result outstanding
    assert outcomes["ended_by_fuzzer"] > 0 and outcomes["irreversible_write"] > 0
    # Wrong calls and missed calls alone never make a task impossible: nothing the expert does not commit runs.
    for index, timeline in enumerate(timelines[:500]):
        if _fuzz_plan(index)[1][0] in RECOVERABLE_PERTURBATIONS:
            assert run.results[index].accurate, timeline.id
    assert elapsed < 60


def test_error_kinds_read_the_phrases_the_executor_writes():
    from clocktune.runtime.executor import error_kind, input_error, timeout_error, unavailable_error

    assert error_kind("get_weather", timeout_error("get_weather", 10.0)) == "transient"
    assert error_kind("get_weather", unavailable_error("get_weather")) == "transient"
    assert error_kind("book", input_error("c1 failed or was cancelled")) == "input"
    assert error_kind("book", "no seats left at 19:00") == "refused"
    # Another tool's timeout is a refusal of this one's service, not a fault of its own call.
    assert error_kind("book", timeout_error("get_weather", 10.0)) == "refused"


def test_a_config_generated_timeline_replays_under_the_expert_of_its_own_config(domains):
    # A sync-teacher timeline holds no speculative plan, yet its task gives the speculative expert one.
    config = GeneratorConfig(teacher="sync", domains=["calendar"])
    timelines = [generate_dialogue(i, 7, config) for i in range(40)]
    run = run_policy("speculative", timelines, expert_factory("speculative", config), make_backend, SessionConfig())
    assert run.share("accurate") == 1.0
    assert sum(r.speculative for log in run.logs for r in call_records(log.timeline).values()) > 0
    assert [score_session(log, "x").accurate for log in run.logs] == [r.accurate for r in run.results]
