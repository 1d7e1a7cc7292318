"""The runtime: virtual clock, tool executor, sessions, scripted and model policies, scoring and the eval CLI."""

import asyncio
import json
import math
import random
import statistics
import time

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from clocktune.actions import Action, parse_action
from clocktune.clock import DeviceProfile
from clocktune.runtime.evaluate import PolicyRun, paired_bootstrap, run_policy, summarize_runs
from clocktune.runtime.executor import ToolExecutor
from clocktune.runtime.scoring import DialogueResult, latencies_from_speech_end, score_session, side_effect_violations
from clocktune.runtime.scripted import SCRIPTED_POLICIES, ScriptedPolicy
from clocktune.runtime.session import Decision, Session, SessionConfig
from clocktune.runtime.virtual_clock import run_virtual
from clocktune.timeline.events import Event, LatencyModel, ToolSchema
from data_gen.domains.base import ToolError
from tests.tiny_models import TINY
from tests.tiny_tokenizer import tiny_tokenizer

# Virtual clock ------------------------------------------------------------------------------------------------


def test_virtual_clock_jumps_to_timers_in_order():
    async def main():
        loop = asyncio.get_running_loop()
        seen = []

        async def sleeper(delay):
            await asyncio.sleep(delay)
            seen.append((delay, loop.time()))

        await asyncio.gather(*(sleeper(d) for d in (30.0, 10.0, 20.0)))
        return seen

    started = time.perf_counter()
    seen = run_virtual(main())
    assert seen == [(10.0, 10.0), (20.0, 20.0), (30.0, 30.0)]
    assert time.perf_counter() - started < 1.0


# Executor -----------------------------------------------------------------------------------------------------


class _Counter:
    """A backend that records the order calls execute in; ``fail`` raises a ToolError."""

    sequential = False

    def __init__(self):
        self.log = []

    def execute(self, name, arguments):
        if name == "fail":
            raise ToolError("refused")
        self.log.append((name, arguments))
        return {"n": len(self.log), "echo": arguments}

    def state(self):
        return {"log": self.log}


def _tools(latency=1.0):
    model = LatencyModel(median_s=latency, sigma=0.0, tail_prob=0.0)
    schema = {"type": "object", "properties": {}}
    return [
        ToolSchema("read", "", schema, False, model),
        ToolSchema("write", "", schema, True, model),
        ToolSchema("fail", "", schema, False, model),
    ]


def _run_executor(script, latency=1.0, **options):
    """Runs ``script(executor)`` (a coroutine function) and returns (results as (t, call, content, error), backend)."""
    backend = _Counter()
    delivered = []

    async def main():
        loop = asyncio.get_running_loop()
        executor = ToolExecutor(
            _tools(latency),
            backend,
            0,
            lambda call_id, content, error: delivered.append((loop.time(), call_id, content, error)),
            **options,
        )
        await script(executor)
        await asyncio.sleep(100)
        return executor

    executor = run_virtual(main())
    return delivered, backend, executor


def test_reads_run_at_once_writes_wait_for_commit_and_refs_wait_for_inputs():
    async def script(executor):
        executor.call("c1", "read", {"q": 1})
        executor.call("c2", "write", {"x": {"$ref": "c1.n"}})
        executor.call("c3", "read", {"y": {"$ref": "c1"}})
        await asyncio.sleep(5)
        executor.commit()

    delivered, backend, _ = _run_executor(script)
    times = {call: t for t, call, _, _ in delivered}
    assert times["c1"] == pytest.approx(1.0)
    assert times["c3"] == pytest.approx(2.0)  # waited for c1, then ran
    assert times["c2"] == pytest.approx(6.0)  # held until the commit at 5 s
    assert ("write", {"x": 1}) in backend.log  # the reference was resolved with c1's result


def test_modify_aborts_the_request_in_flight_and_reruns_dependents():
    async def script(executor):
        executor.call("c1", "read", {"q": 1})
        executor.call("c2", "read", {"y": {"$ref": "c1.echo"}})
        await asyncio.sleep(0.5)
        executor.modify("c1", {"q": 2})  # its first request's result is dropped
        await asyncio.sleep(3)
        executor.modify("c1", {"q": 3})  # after both returned: both run again
        executor.call("c4", "read", {})
        executor.cancel("c4")

    delivered, _, executor = _run_executor(script)
    results = [(round(t, 3), call, content["echo"] if content else None) for t, call, content, _ in delivered]
    assert results == [
        (1.5, "c1", {"q": 2}),
        (2.5, "c2", {"y": {"q": 2}}),
        (4.5, "c1", {"q": 3}),
        (5.5, "c2", {"y": {"q": 3}}),
    ]
    assert executor.wasted_dispatches == 4  # first c1 in flight, finished c1 and c2 replaced, c4 cancelled
    assert executor.in_flight == 0


def test_sequential_backends_order_calls_after_earlier_writes():
    async def script(executor):
        executor.call("c1", "write", {})
        executor.call("c2", "read", {})
        executor.commit()

    delivered, _, _ = _run_executor(script, sequential=True)
    assert [(round(t, 3), call) for t, call, _, _ in delivered] == [(1.0, "c1"), (2.0, "c2")]


def test_failures_timeouts_and_failed_inputs_become_error_results():
    async def script(executor):
        executor.call("c1", "fail", {})
        executor.call("c2", "read", {"x": {"$ref": "c1"}})

    delivered, _, _ = _run_executor(script)
    assert [(call, error) for _, call, _, error in delivered] == [
        ("c1", "refused"),
        ("c2", "input c1 failed or was cancelled"),
    ]

    async def missing_path(executor):  # c1's result has no "items", and "echo" holds no list
        executor.call("c1", "read", {})
        executor.call("c2", "read", {"x": {"$ref": "c1.items.0.id"}})
        executor.call("c3", "write", {"x": {"$ref": "c1.echo.0"}})
        executor.commit()

    delivered, backend, _ = _run_executor(missing_path)
    assert [(call, error) for _, call, _, error in delivered] == [
        ("c1", None),
        ("c2", "input 'c1.items.0.id': no 'items' in the result of c1"),
        ("c3", "input 'c1.echo.0': no '0' in the result of c1"),
    ]
    assert backend.log == [("read", {})]  # neither reached the backend, and the write changed nothing

    async def slow(executor):
        executor.call("c1", "read", {})

    delivered, _, _ = _run_executor(slow, latency=20.0, timeout_s=5.0)
    assert delivered[0][0] == pytest.approx(5.0) and "timed out" in delivered[0][3]

    delivered, _, _ = _run_executor(slow, failure_rate=1.0)
    assert delivered[0][3] is not None and delivered[0][2] is None


# Scripted policies on generated timelines ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(generated):
    timelines = generated[0][:300]
    config = SessionConfig()
    return {
        name: run_policy(name, timelines, lambda t, n=name: ScriptedPolicy(t, n), config) for name in SCRIPTED_POLICIES
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
        run = run_policy(name, timelines, lambda t, n=name: ScriptedPolicy(t, n), config)
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
    run = run_policy("fuzz", timelines, lambda t: _FuzzPolicy(hash(t.id) % 1000), config)
    assert sum(r.notices for r in run.results) > 0
    for result, log in zip(run.results, run.logs, strict=True):
        assert result.notices <= 8
        assert result.end_reason in ("done", "gave_up", "timeout")
        assert result.side_effect_violations == 0
        assert all(e.kind != "tool_call" or e.name != "no_such_tool" for e in log.timeline.events)


# Model policy ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_chatml_model():
    from clocktune.encoding import extend_tokenizer, get_codec

    tokenizer = tiny_tokenizer("chatml")
    extend_tokenizer(tokenizer, get_codec("abs_bins"), "chatml")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=8192, **TINY)
    model = LlamaForCausalLM(config).eval()
    model.config._attn_implementation = "sdpa"
    return model, tokenizer


class _ReplayThroughModel:
    """Feeds a ModelPolicy the session's events but acts like the scripted speculative policy, and records the
    model's logits at each decision point: the model's context goes through every path a real model run does."""

    io_bound = False

    def __init__(self, model_policy, scripted):
        self.inner, self.scripted, self.name = model_policy, scripted, "probe"
        self.logits = []

    def close(self):
        self.inner.close()

    def observe(self, events):
        self.scripted.observe(events)
        return self.inner.observe(events)

    def act(self, t):
        self.inner.act(t)  # runs the cache, the streaming mask and greedy decoding; its choice is ignored
        self.logits.append((t, len(self.inner.fed_ids), self.inner.last_prompt_logits))
        return self.scripted.act(t)


def test_model_policy_context_renders_to_the_ids_fed_and_matches_a_full_forward(generated, tiny_chatml_model):
    from clocktune.masks import build_float_mask
    from clocktune.render import Renderer, render
    from clocktune.runtime.model_policy import ModelPolicy

    model, tokenizer = tiny_chatml_model
    # A timeline with a revision or a modify, so that tokens get hidden while the session runs.
    timeline = next(t for t in generated[0] if any(e.kind == "tool_modify" for e in t.events) and len(t.events) < 40)
    probe = _ReplayThroughModel(
        ModelPolicy(model, tokenizer, timeline, max_new_tokens=4), ScriptedPolicy(timeline, "speculative")
    )
    log = run_virtual(Session(timeline, probe, SessionConfig()).run())
    assert log.end_reason == "done"
    rendering = render(log.timeline, tokenizer)
    fed = probe.inner.fed_ids
    assert rendering.input_ids[: len(fed)] == fed and len(fed) > len(rendering) // 2
    assert probe.inner.renderer.rendering.input_ids == rendering.input_ids
    assert any(until != math.inf for until in rendering.visible_until)

    # The cached, incremental logits at a late decision point equal one full forward under the training mask.
    t, kept, cached = probe.logits[-1]
    renderer = Renderer(tokenizer, timeline.tools)
    for event in log.timeline.events:
        if len(renderer.rendering) >= kept:
            break
        renderer.append(event)
    assert len(renderer.rendering) == kept
    prompt = renderer.prompt_for_action(t)
    ids = renderer.rendering.input_ids[:kept] + prompt
    times = renderer.rendering.time[:kept] + [t] * len(prompt)
    until = renderer.rendering.visible_until[:kept] + [math.inf] * len(prompt)
    mask = build_float_mask(
        torch.tensor([times]), torch.tensor([until]), torch.zeros(1, len(ids), dtype=torch.long), dtype=torch.float32
    )
    with torch.no_grad():
        full = model(input_ids=torch.tensor([ids]), attention_mask=mask, use_cache=False).logits[0, -1]
    assert torch.allclose(full, cached, atol=1e-4)


def test_sessions_of_one_model_share_the_system_prompt_prefill(generated, tiny_chatml_model):
    from clocktune.runtime.model_policy import ModelPolicy

    model, tokenizer = tiny_chatml_model
    same_tools = [t for t in generated[0] if t.domain == generated[0][0].domain and len(t.events) < 40][:2]
    fed = []
    hook = model.register_forward_pre_hook(
        lambda _, args, kwargs: fed.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )

    def play(timeline, system_caches):
        fed.clear()
        policy = ModelPolicy(model, tokenizer, timeline, max_new_tokens=4, system_caches=system_caches)
        probe = _ReplayThroughModel(policy, ScriptedPolicy(timeline, "speculative"))
        run_virtual(Session(timeline, probe, SessionConfig()).run())
        return [logits for _, _, logits in probe.logits], sum(fed), len(policy.system_ids)

    try:
        shared = {}
        play(same_tools[0], shared)  # the first session of the model prefills the system prompt
        alone, fed_alone, system = play(same_tools[1], None)
        together, fed_together, _ = play(same_tools[1], shared)
    finally:
        hook.remove()
    # A later session starts from a copy of that prefill and decides exactly as one that computed its own.
    assert len(shared) == 1 and fed_together == fed_alone - system > 0
    assert len(alone) == len(together) > 2
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(alone, together, strict=True))


def test_untrained_model_output_gets_notices_not_crashes(generated, tiny_chatml_model):
    from clocktune.runtime.model_policy import ModelPolicy

    model, tokenizer = tiny_chatml_model
    config = SessionConfig(max_notices=4, device=DeviceProfile("fast", 1e6, 1e4, 0.0))
    policies = []

    def factory(timeline):
        policies.append(ModelPolicy(model, tokenizer, timeline, max_new_tokens=8))
        return policies[-1]

    run = run_policy("tiny", generated[0][:3], factory, config)
    for result in run.results:
        assert result.end_reason in ("gave_up", "done", "timeout") and result.notices <= 4
    assert sum(result.notices for result in run.results) > 0  # random weights write invalid actions
    # A long evaluation must not keep every finished session's KV cache.
    assert len(policies) == 3 and all(policy.cache is None for policy in policies)


# Scoring and CLI -------------------------------------------------------------------------------------------


def test_scoring_checks_calls_state_and_answer_facts(generated):
    timeline = next(t for t in generated[0] if t.ground_truth.facts and t.ground_truth.calls)
    log = run_virtual(Session(timeline, ScriptedPolicy(timeline, "sync"), SessionConfig()).run())
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


def test_latency_counts_from_the_end_of_speech_even_when_the_agent_reads_it_late(generated):
    from clocktune.clock import PROFILES
    from clocktune.timeline.analysis import response_latencies

    # On the phone profile a speculative call takes about half a second to emit, so the user often finishes while
    # the agent is still writing one, and the final chunk enters its context only after that action.
    config = SessionConfig(device=PROFILES["phone-135m"])
    late = 0
    for timeline in generated[0][:40]:
        log = run_virtual(Session(timeline, ScriptedPolicy(timeline, "speculative"), config).run())
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
    log = run_virtual(Session(timeline, ScriptedPolicy(timeline, "sync"), SessionConfig()).run())
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
    assert main(["eval", "--data", str(data), "--out", str(out), "--failure-rate", "0.2"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in (
        "dialogues", "accuracy", "baseline_accuracy", "latency_p50_s", "latency_p90_s", "baseline_latency_p50_s",
        "speedup_p50", "speedup_mean", "speedup_p50_ci95", "accuracy_delta_ci95", "wasted_calls_per_dialogue",
        "side_effect_violations", "failures",
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


def test_the_bound_divides_the_flawless_sync_not_the_baseline(tmp_path, generated):
    from clocktune.runtime.evaluate import compare_policies

    timelines, config = generated[0][:40], SessionConfig()
    factory = {name: (lambda t, n=name: ScriptedPolicy(t, n)) for name in ("speculative", "sync_parallel", "sync")}
    summary = compare_policies(
        timelines, ("speculative", factory["speculative"]), ("sync_parallel", factory["sync_parallel"]), config,
        tmp_path, progress=False,
    )  # fmt: skip
    sync = run_policy("sync", timelines, factory["sync"], config)
    assert summary["bound_speedup_p50"] == pytest.approx(sync.latency(50) / summary["oracle_latency_p50_s"], abs=1e-3)
    oracle_over_baseline = summary["baseline_latency_p50_s"] / summary["oracle_latency_p50_s"]
    assert summary["bound_speedup_p50"] > oracle_over_baseline  # the sync loop is slower than sync_parallel


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

    from clocktune.runtime.virtual_clock import run_on_clock

    fast = _fast_dialogue(generated)
    config = SessionConfig(clock="wall")
    policy = _Deliberate(fast)
    started = time.perf_counter()
    log = run_on_clock(Session(fast, policy, config).run(), "wall")
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

    from clocktune.runtime.virtual_clock import run_on_clock

    fast = _fast_dialogue(generated)
    policy = _Deliberate(fast, streams=True, io_bound=True)
    log = run_on_clock(Session(fast, policy, SessionConfig(clock="wall")).run(), "wall")
    answer = next(e.t for e in log.timeline.events if e.kind == "say" and e.final)
    # The answer's first words were out 10 ms into the action that wrote it, before the policy handed it over.
    assert 0.005 <= log.first_words[0] - answer < 0.02
    assert threading.main_thread() not in policy.threads
