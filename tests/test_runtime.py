"""The runtime: scripted policies in sessions, scoring, fuzzed actions, the eval CLI and the wall clock."""

import json
import random
import statistics
import time

import pytest

from clocktune.actions import Action, parse_action
from clocktune.runtime.clocks import WallClock
from clocktune.runtime.play import PolicyRun, run_policy
from clocktune.runtime.policy import Decision, PolicySpec
from clocktune.runtime.report import (
    accuracy_delta_ci95,
    format_intervals,
    paired_bootstrap,
    read_outcomes,
    summarize_runs,
)
from clocktune.runtime.scoring import (
    DialogueResult,
    latencies_from_speech_end,
    score_session,
    side_effect_violations,
    task_progress,
)
from clocktune.runtime.scripted import SCRIPTED_POLICIES, ScriptedPolicy
from clocktune.runtime.session import Session, SessionConfig
from clocktune.runtime.virtual_clock import run_virtual
from clocktune.timeline.events import Event
from data_gen.backends import make_backend

# Scripted policies on generated timelines ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(generated):
    timelines = generated[0][:300]
    config = SessionConfig()
    return {
        name: run_policy(name, timelines, lambda t, n=name: ScriptedPolicy(t, n), make_backend, config)
        for name in SCRIPTED_POLICIES
    }


def test_every_scripted_policy_is_accurate_and_safe(runs):
    for name, run in runs.items():
        assert all(r.accurate for r in run.results), name
        assert sum(r.side_effect_violations for r in run.results) == 0, name
        assert sum(r.notices for r in run.results) == 0, name


def test_speculation_cuts_latency_and_the_oracle_bounds_it(runs):
    p50 = {name: statistics.median(r.latency_s for r in run.results) for name, run in runs.items()}
    assert p50["sync"] > p50["sync_parallel"] >= p50["async"] - 0.01
    assert p50["sync"] / p50["speculative"] > 1.4
    assert p50["oracle"] <= p50["speculative"] + 1e-6
    summary = summarize_runs(runs["speculative"], runs["sync"], runs["oracle"])
    assert summary["speedup_p50"] == pytest.approx(p50["sync"] / p50["speculative"], rel=1e-3)
    assert summary["accuracy"] == summary["baseline_accuracy"] == 1.0
    assert summary["wasted_calls_per_dialogue"] > 0  # wrong guesses were made and paid for
    assert 0.5 < summary["share_of_oracle_reduction"] <= 1.01


def _run_of(name, latencies, accurate):
    results = [
        DialogueResult(
            id=f"d{i}",
            policy=name,
            accurate=ok,
            calls_ok=ok,
            state_ok=ok,
            answer_ok=ok,
            answered=lat is not None,
            latency_s=lat,
            completion_s=lat,
            dispatches=1,
            wasted_calls=0,
            wasted_tool_s=0.0,
            notices=0,
            side_effect_violations=0,
            end_reason="done",
        )
        for i, (lat, ok) in enumerate(zip(latencies, accurate, strict=True))
    ]
    return PolicyRun(name, results, [])


def test_paired_bootstrap_intervals_cover_the_estimate_and_shrink_with_more_dialogues(runs):
    # Every dialogue exactly twice as fast and equally accurate: no resample can say otherwise.
    rng = random.Random(0)
    base = [rng.uniform(0.5, 2.0) for _ in range(200)]
    exact = paired_bootstrap(_run_of("p", [b / 2 for b in base], [True] * 200), _run_of("b", base, [True] * 200))
    assert exact["speedup_p50_ci95"] == pytest.approx([2.0, 2.0])
    assert exact["accuracy_delta_ci95"] == [0.0, 0.0]
    # 6 of 20 against 5 of 20, unanswered dialogues left out of the medians as speedup_p50 leaves them out.
    ok, base_ok = [i < 6 for i in range(20)], [i < 5 or i == 19 for i in range(20)]
    small = paired_bootstrap(_run_of("p", [None] * 2 + base[2:20], ok), _run_of("b", base[:20], base_ok))
    low, high = small["accuracy_delta_ci95"]
    assert low < 0.0 < 0.05 < high  # one dialogue in twenty cannot be told from none
    # Real runs: the interval holds the point estimate and narrows with four times the dialogues.
    summary = summarize_runs(runs["speculative"], runs["sync"])
    low, high = summary["speedup_p50_ci95"]
    assert low < summary["speedup_p50"] < high
    quarter = [PolicyRun(r.name, r.results[:75], []) for r in (runs["speculative"], runs["sync"])]
    low_q, high_q = paired_bootstrap(*quarter)["speedup_p50_ci95"]
    assert high_q - low_q > 1.5 * (high - low)


def test_the_accuracy_gaps_interval_depends_on_how_the_two_models_outcomes_pair_up():
    # 32 of 50 against 35 of 50 (make demo's two models, 2026-12-03), as two ways the 50 can pair up.
    model = [i < 32 for i in range(50)]
    nested = accuracy_delta_ci95([i < 35 for i in range(50)], model)  # the sync model completes a superset
    # Both complete 17; each of the other 33 only one of them.
    crossed = accuracy_delta_ci95([i >= 15 for i in range(50)], model)
    assert nested[0] >= 0.0 and nested[0] < 0.06 < nested[1]  # three more, never fewer
    assert crossed[0] < -0.1 and crossed[1] > 0.2  # the same 6 points, from 18 against 15
    assert accuracy_delta_ci95(model, model) == [0.0, 0.0]
    assert accuracy_delta_ci95([], []) is None
    with pytest.raises(ValueError, match="differ in length: 2 against 1"):
        accuracy_delta_ci95([True, False], [True])


def test_read_outcomes_returns_each_dialogues_result_and_names_the_file_without_the_policy(tmp_path):
    rows = [
        {"id": "a", "policy": "sync", "accurate": True},
        {"id": "a", "policy": "model", "accurate": False},
        {"id": "b", "policy": "model", "accurate": True},
    ]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert read_outcomes(tmp_path, "model") == {"a": False, "b": True}
    with pytest.raises(ValueError, match=r"results\.jsonl: no results of policy 'oracle'"):
        read_outcomes(tmp_path, "oracle")


def test_speculative_replay_reproduces_the_recorded_response_times(generated, runs):
    from clocktune.clock import FIRST_WORDS_TOKENS
    from clocktune.timeline.analysis import response_latencies

    # The recording ends each turn when the teacher starts its answer; a session, once the first words are out.
    first_words_s = SessionConfig().device.first_words_s(FIRST_WORDS_TOKENS)
    recorded = [statistics.fmean(response_latencies(t)) + first_words_s for t in generated[0][:300]]
    replayed = [r.latency_s for r in runs["speculative"].results]
    # Tool latencies are drawn per call in the runtime and per stream in the generator: close, not identical.
    assert statistics.median(replayed) == pytest.approx(statistics.median(recorded), rel=0.1)


def test_injected_failures_never_break_commit_safety_or_hang(generated):
    timelines = generated[0][:200]
    config = SessionConfig(failure_rate=0.2)
    for name in ("sync", "speculative", "oracle"):
        run = run_policy(name, timelines, lambda t, n=name: ScriptedPolicy(t, n), make_backend, config)
        assert sum(r.side_effect_violations for r in run.results) == 0
        assert all(r.end_reason == "done" for r in run.results), name
        accuracy = sum(r.accurate for r in run.results) / len(run.results)
        assert 0.4 < accuracy < 0.95  # failures cost accuracy: the scoring sees them
        assert sum(run.failures().values()) == sum(not r.accurate for r in run.results)


def test_side_effect_auditor_flags_a_write_without_commit(generated):
    timeline = next(t for t in generated[0] if any(tool.side_effect for tool in t.tools) and t.events)
    tools = {tool.name: tool for tool in timeline.tools}
    write = next(name for name, tool in tools.items() if tool.side_effect)
    events = [
        Event("e0", 1.0, "user_chunk", "user", text="do it", final=True),
        Event("e1", 1.1, "tool_call", "agent", call_id="c1", name=write, arguments={}),
        Event("e2", 1.8, "tool_result", "tool", call_id="c1", content={"ok": True}),
    ]
    from dataclasses import replace

    assert side_effect_violations(replace(timeline, events=events)) == 1
    committed = events[:2] + [Event("e3", 1.2, "commit", "agent"), replace(events[2], id="e4")]
    assert side_effect_violations(replace(timeline, events=committed)) == 0
    early = [Event("e9", 0.5, "commit", "agent")] + events
    assert side_effect_violations(replace(timeline, events=early)) == 1  # a commit before the end of speech


# Invalid actions -------------------------------------------------------------------------------------------


class _FuzzPolicy:
    """Emits random text and random well-formed but invalid actions; stops after ``budget`` actions."""

    name = "fuzz"

    io_bound = False

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def close(self):
        pass

    def observe(self, events):
        return sum(len(e.text or "") // 4 for e in events)

    def act(self, t):
        rng = self.rng
        choice = rng.randrange(6)
        if choice == 0:
            text = "".join(rng.choice('<|>{}[]":,abc ') for _ in range(rng.randrange(40))) + "<|im_end|>"
            try:
                return Decision(parse_action(text, "chatml"), 5)
            except ValueError as error:
                return Decision(None, 5, str(error))
        if choice == 1:
            return Decision(Action("tool_modify", call_id=f"c{rng.randrange(3)}", arguments={}), 3)
        if choice == 2:
            return Decision(Action("tool_call", call_id="c1", name="no_such_tool", arguments={}), 3)
        if choice == 3:
            return Decision(Action("say", text="done", final=True), 3)
        if choice == 4:
            return Decision(Action("commit"), 1)
        return Decision(Action("tool_cancel", call_id="c9"), 2)


def test_fuzzed_actions_get_notices_and_bounded_retries(generated):
    timelines = generated[0][:60]
    config = SessionConfig(max_notices=8)
    run = run_policy("fuzz", timelines, lambda t: _FuzzPolicy(hash(t.id) % 1000), make_backend, config)
    assert sum(r.notices for r in run.results) > 0
    for result, log in zip(run.results, run.logs, strict=True):
        assert result.notices <= 8
        assert result.end_reason in ("done", "gave_up", "timeout")
        assert result.side_effect_violations == 0
        assert all(e.kind != "tool_call" or e.name != "no_such_tool" for e in log.timeline.events)


def test_scoring_checks_calls_state_and_answer_facts(generated):
    timeline = next(t for t in generated[0] if t.ground_truth.facts and t.ground_truth.calls)
    log = run_virtual(
        Session(timeline, ScriptedPolicy(timeline, "sync"), SessionConfig(), make_backend(timeline)).run()
    )
    assert score_session(log, "sync").accurate
    from dataclasses import replace

    wrong_answer = replace(
        log,
        timeline=replace(
            log.timeline,
            events=[replace(e, text="something else") if e.kind == "say" else e for e in log.timeline.events],
        ),
    )
    assert not score_session(wrong_answer, "sync").answer_ok
    assert not score_session(replace(log, final_state={}), "sync").state_ok


def test_task_progress_is_one_exactly_where_a_session_is_accurate_and_gives_part_credit_for_a_call_half_right(
    generated,
):
    from dataclasses import replace

    from clocktune.timeline.events import GroundTruthCall

    timelines = [t for t in generated[0][:40] if t.ground_truth.calls]
    config = SessionConfig(max_notices=8)
    fuzzed = run_policy("fuzz", timelines, lambda t: _FuzzPolicy(hash(t.id) % 1000), make_backend, config)
    scripted = run_policy("sync", timelines, lambda t: ScriptedPolicy(t, "sync"), make_backend, config)
    for run in (fuzzed, scripted):
        for result, log in zip(run.results, run.logs, strict=True):
            progress = task_progress(log)
            assert 0.0 <= progress <= 1.0
            assert (progress == 1.0) == result.accurate, (log.timeline.id, progress, result.failure)
    assert any(result.accurate for result in scripted.results)
    assert any(0 < task_progress(log) < 1 for log in fuzzed.logs)

    # One argument of one ground-truth call wrong: that call keeps its half for the tool and the share of its keys
    # still right; the state and the answer keep theirs.
    log = next(
        log
        for result, log in zip(scripted.results, scripted.logs, strict=True)
        if result.accurate and log.timeline.ground_truth.calls[0].arguments
    )
    truth = log.timeline.ground_truth
    first, *rest = truth.calls
    key = sorted(first.arguments)[0]
    wrong = GroundTruthCall(first.name, {**first.arguments, key: "not what was said"})
    changed = replace(log, timeline=replace(log.timeline, ground_truth=replace(truth, calls=[wrong, *rest])))
    share = (len(first.arguments) - 1) / len(first.arguments)
    calls = (0.5 + 0.5 * share + len(rest)) / len(truth.calls)
    assert not score_session(changed, "sync").accurate
    assert task_progress(changed) == pytest.approx((calls + 1 + 1) / 3)
    # A tool that never ran earns that call nothing.
    renamed = GroundTruthCall("no_such_tool", first.arguments)
    other = replace(log, timeline=replace(log.timeline, ground_truth=replace(truth, calls=[renamed, *rest])))
    assert task_progress(other) == pytest.approx((len(rest) / len(truth.calls) + 1 + 1) / 3)


def test_latency_counts_from_the_end_of_speech_even_when_the_agent_reads_it_late(generated):
    from clocktune.clock import PROFILES
    from clocktune.timeline.analysis import response_latencies

    # On the phone profile a speculative call takes about half a second to emit, so the user often finishes while
    # the agent is still writing one, and the final chunk enters its context only after that action.
    config = SessionConfig(device=PROFILES["phone-135m"])
    late = 0
    for timeline in generated[0][:40]:
        log = run_virtual(
            Session(timeline, ScriptedPolicy(timeline, "speculative"), config, make_backend(timeline)).run()
        )
        spoken = next(e.t for e in timeline.events if e.kind == "user_chunk" and e.final)
        read = next(e.t for e in log.timeline.events if e.kind == "user_chunk" and e.final)
        assert log.speech_ends[0] == pytest.approx(spoken, abs=1e-3)  # the first utterance replays at its own times
        answer = next(e.t for e in log.timeline.events if e.kind == "say" and e.final)
        # The answer is heard once its first words are decoded, not when the agent starts writing it: the phone's
        # 50 ms per action and three tokens (the answer marker and a first word) at 40 tokens/s.
        assert latencies_from_speech_end(log)[0] - (answer - spoken) == pytest.approx(0.05 + 3 / 40, abs=2e-3)
        if read > spoken + 0.05:
            late += 1
            assert score_session(log, "speculative").latency_s > statistics.fmean(response_latencies(log.timeline))
    assert late >= 5


def test_scoring_names_the_first_failure_of_a_session(generated):
    from dataclasses import replace

    timeline = next(t for t in generated[0] if len({call.name for call in t.ground_truth.calls}) >= 2)
    log = run_virtual(
        Session(timeline, ScriptedPolicy(timeline, "sync"), SessionConfig(), make_backend(timeline)).run()
    )
    assert score_session(log, "sync").failure is None

    def edited(edit) -> str | None:
        events = [edit(event) for event in log.timeline.events]
        return score_session(replace(log, timeline=replace(log.timeline, events=events)), "sync").failure

    first_call = next(e.call_id for e in log.timeline.events if e.kind == "tool_call")
    assert edited(lambda e: replace(e, text="something else") if e.kind == "say" else e) == "answer_missing_facts"
    assert edited(lambda e: replace(e, kind="wait") if e.kind == "tool_result" else e) == "no_call"
    assert edited(lambda e: replace(e, name="nope") if e.call_id == first_call else e) == "wrong_tool"
    assert edited(lambda e: replace(e, arguments={"x": 1}) if e.kind == "tool_call" else e) == "wrong_arguments"
    assert score_session(replace(log, final_state={}), "sync").failure == "wrong_state"
    assert score_session(replace(log, end_reason="gave_up", final_state={}), "sync").failure == "gave_up"


def test_eval_cli_writes_summary_results_and_plots(tmp_path, generated, capsys):
    from clocktune.cli import main
    from clocktune.timeline.io import write_timelines

    data = tmp_path / "data.jsonl"
    write_timelines(data, generated[0][:40])
    out = tmp_path / "eval"
    assert main(["eval", "--data", str(data), "--out", str(out), "--failure-rate", "0.2", "--session-logs"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in (
        "dialogues", "accuracy", "baseline_accuracy", "latency_p50_s", "latency_p90_s", "baseline_latency_p50_s",
        "speedup_p50", "speedup_geomean", "speedup_p50_ci95", "accuracy_delta_ci95", "completed_both",
        "speedup_p50_completed", "wasted_calls_per_dialogue", "side_effect_violations",
        "baseline_side_effect_violations", "failures",
    ):  # fmt: skip
        assert key in summary, key
    assert summary["dialogues"] == 40 and summary["side_effect_violations"] == 0
    # Against the scripted sync baseline, the bound is the oracle's own speedup.
    oracle_speedup = summary["baseline_latency_p50_s"] / summary["oracle_latency_p50_s"]
    assert summary["bound_speedup_p50"] == pytest.approx(oracle_speedup, abs=1e-3) and summary["bound_speedup_p50"] > 1
    # Injected failures cost some dialogues; the table says why.
    assert summary["failures"] and f"speculative failed: {next(iter(summary['failures']))}" in capsys.readouterr().out
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3 * 40  # sync, speculative and the oracle
    from clocktune.timeline.io import read_timelines

    sessions = read_timelines(out / "sessions_speculative.jsonl")
    assert [t.id for t in sessions] == [t.id for t in generated[0][:40]]
    for name in ("latency_cdf.png", "gantt_sync.png", "gantt_speculative.png", "gantt_oracle.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"


def _spec(name):
    return PolicySpec(name, lambda t, n=name: ScriptedPolicy(t, n), f"scripted:{name}")


class _Counting:
    """A policy factory that counts the sessions it starts."""

    def __init__(self, name):
        self.name, self.sessions = name, 0

    def __call__(self, timeline):
        self.sessions += 1
        return ScriptedPolicy(timeline, self.name)


def test_the_bound_divides_the_flawless_sync_not_the_baseline(tmp_path, generated):
    from clocktune.runtime.evaluate import compare_policies

    timelines, config = generated[0][:40], SessionConfig()
    summary = compare_policies(
        timelines, _spec("speculative"), _spec("sync_parallel"), make_backend, config, tmp_path,
        bound=(_spec("oracle"), _spec("sync")), progress=False,
    )  # fmt: skip
    sync = run_policy("sync", timelines, _spec("sync").factory, make_backend, config)
    assert summary["bound_speedup_p50"] == pytest.approx(sync.latency(50) / summary["oracle_latency_p50_s"], abs=1e-3)
    oracle_over_baseline = summary["baseline_latency_p50_s"] / summary["oracle_latency_p50_s"]
    assert summary["bound_speedup_p50"] > oracle_over_baseline  # the sync loop is slower than sync_parallel


def test_a_run_the_bound_needs_is_played_once_and_the_bound_stands_whatever_the_policy(tmp_path, generated):
    from clocktune.runtime.evaluate import compare_policies

    timelines, config = generated[0][:30], SessionConfig()
    sync, oracle = _Counting("sync"), _Counting("oracle")
    bound = (PolicySpec("oracle", oracle, "scripted:oracle"), PolicySpec("sync", sync, "scripted:sync"))
    # The oracle measured against the scripted sync: both are the bound's runs already.
    summary = compare_policies(
        timelines, bound[0], bound[1], make_backend, config, tmp_path / "a", bound=bound, progress=False
    )
    assert sync.sessions == oracle.sessions == 30
    assert summary["bound_speedup_p50"] == summary["speedup_p50"] > 1
    assert summary["share_of_oracle_reduction"] == 1.0
    assert len((tmp_path / "a" / "results.jsonl").read_text().splitlines()) == 2 * 30


def test_the_summary_counts_violations_per_policy_and_the_speedup_where_both_completed():
    # The policy answers fast and wrong on half the dialogues; where both completed it is 1.25x faster.
    base = _run_of("b", [1.0] * 10, [True] * 10)
    fast_wrong = _run_of("p", [0.05] * 5 + [0.8] * 5, [False] * 5 + [True] * 5)
    fast_wrong.results[0].side_effect_violations = 2
    summary = summarize_runs(fast_wrong, base)
    assert summary["completed_both"] == 5
    assert summary["speedup_p50_completed"] == pytest.approx(1.25)
    assert summary["speedup_p50"] > 2  # the median over all answered dialogues flatters it
    # A geometric mean of per-dialogue ratios: sqrt(20 x 1.25) = 5, where the arithmetic mean says 10.6.
    assert summary["speedup_geomean"] == pytest.approx(5.0)
    assert summary["side_effect_violations"] == 2 and summary["baseline_side_effect_violations"] == 0
    base.results[3].side_effect_violations = 1
    assert summarize_runs(fast_wrong, base)["side_effect_violations"] == 2
    assert "on the 5 dialogues both completed: speedup_p50 1.25x" in format_intervals(summary)


def _fast_dialogue(generated):
    from dataclasses import replace

    # A dialogue sped up 20x so that a wall-clock test takes a fraction of a second of real time.
    original = next(t for t in generated[0] if t.ground_truth.calls and len(t.events) < 30)
    return replace(
        original,
        events=[replace(e, t=round(e.t / 20, 4)) for e in original.events],
        tools=[
            replace(tool, latency=replace(tool.latency, median_s=tool.latency.median_s / 20))
            for tool in original.tools
        ],
    )


class _Deliberate(ScriptedPolicy):
    """Takes 20 ms per action, remembers the threads it ran on, and with ``streams`` says its first words were out
    10 ms into each action, as a model decoding token by token does."""

    def __init__(self, timeline, streams=False, io_bound=False):
        super().__init__(timeline, "speculative")
        self.streams, self.io_bound, self.threads = streams, io_bound, set()

    def act(self, t):
        import dataclasses
        import threading

        self.threads.add(threading.current_thread())
        started = time.monotonic()
        time.sleep(0.02)
        decision = super().act(t)
        return dataclasses.replace(decision, first_words_at=started + 0.01) if self.streams else decision


def test_wall_clock_mode_runs_in_real_time(generated):
    import threading

    fast = _fast_dialogue(generated)
    config = SessionConfig(clock=WallClock())
    policy = _Deliberate(fast)
    started = time.perf_counter()
    log = config.clock.run(Session(fast, policy, config, make_backend(fast)).run())
    elapsed = time.perf_counter() - started
    assert log.end_reason == "done" and score_session(log, "speculative").accurate
    # On the wall clock an answer is out when the policy hands it over, after the time it took to write it.
    answer = next(e.t for e in log.timeline.events if e.kind == "say" and e.final)
    assert log.first_words[0] - answer >= 0.02
    last_chunk = max(e.t for e in fast.events if e.kind == "user_chunk")
    assert elapsed >= last_chunk  # the user's speech was replayed in real time
    assert log.timeline.events[-1].t == pytest.approx(elapsed, abs=0.25)
    # Compute ran on the thread that started the run: torch's CPU kernels are 1.7x slower off the main thread.
    assert policy.threads == {threading.main_thread()}


def test_wall_clock_takes_streamed_first_words_and_runs_io_bound_policies_in_workers(generated):
    import threading

    fast = _fast_dialogue(generated)
    policy = _Deliberate(fast, streams=True, io_bound=True)
    log = WallClock().run(Session(fast, policy, SessionConfig(clock=WallClock()), make_backend(fast)).run())
    answer = next(e.t for e in log.timeline.events if e.kind == "say" and e.final)
    # The answer's first words were out 10 ms into the action that wrote it, before the policy handed it over.
    assert 0.005 <= log.first_words[0] - answer < 0.02
    assert threading.main_thread() not in policy.threads


class _Waiter:
    """Waits whatever it hears: a policy that never answers."""

    name = "waiter"
    io_bound = False

    def close(self):
        pass

    def observe(self, events):
        return 0

    def act(self, t):
        return Decision(Action("wait"), 1)


def test_an_unanswered_turn_times_out_its_limit_after_the_users_final_words_however_long_they_spoke(generated):
    import asyncio

    timeline = generated[0][0]
    spoken = next(e.t for e in timeline.events if e.kind == "user_chunk" and e.final)
    limit = spoken / 2.5  # the user speaks for longer than the limit

    async def play():
        # Notices ("nothing is pending") come every action and never add up to giving up: only the limit ends it.
        config = SessionConfig(turn_limit_s=limit, max_notices=10**6)
        log = await Session(timeline, _Waiter(), config, make_backend(timeline)).run()
        return log, asyncio.get_running_loop().time()

    log, ended = run_virtual(play())
    heard = next(e.t for e in log.timeline.events if e.kind == "user_chunk" and e.final)
    assert log.end_reason == "timeout"
    # Within one notice's action of the limit; counted from the turn's start, it ended 0.2 x spoken after the words.
    assert ended == pytest.approx(heard + limit, abs=0.05)
