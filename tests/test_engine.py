"""The model engine and the session driver: packed forwards equal each session's own, logs do not depend on the
batch, and one session's failure stays its own."""

import math

import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from clocktune.clock import DeviceProfile
from clocktune.runtime.engine import Engine, Forward
from clocktune.runtime.incremental import feed_rows
from clocktune.runtime.play import run_policy
from clocktune.runtime.policy_factories import policy_factory
from clocktune.runtime.session import SessionConfig
from data_gen.backends import make_backend
from tests.tiny_models import TINY

# Random weights under the grammar write valid actions for ever: a slow device and a short turn limit end each session
# after a few hundred tokens, so that eight sessions play in seconds.
SHORT = SessionConfig(max_notices=4, turn_limit_s=2.0, device=DeviceProfile("slow", 1e4, 50.0, 0.0))


def test_a_packed_forward_gives_each_session_the_logits_of_its_own_forward_under_its_own_mask():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, max_position_embeddings=512, **TINY)).eval()
    model.config._attn_implementation = "sdpa"
    engine = Engine(model, batch_size=3)
    system = tuple(range(1, 12))
    # Three sessions: tokens 11-13 are hidden from time 2.0 on in the first, visible for ever in the others.
    hidden = [math.inf] * 11 + [2.0] * 3 + [math.inf] * 20
    shown = [math.inf] * 34
    plans = [
        [Forward([20, 21, 22], [1.0] * 3, hidden), Forward([30, 31], [3.0] * 2, hidden, rows=2)],
        [Forward([20, 21, 22], [1.0] * 3, shown), Forward([30, 31], [3.0] * 2, shown, rows=2)],
        [Forward([40], [0.5], shown), Forward([41, 42, 43, 44], [0.7] * 4, shown)],
    ]
    sessions = [engine.open(system) for _ in plans]
    packed = [
        engine.forward([(session, plan[step]) for session, plan in zip(sessions, plans, strict=True)])
        for step in (0, 1)
    ]

    with torch.no_grad():
        for index, plan in enumerate(plans):
            cache = DynamicCache()
            feed_rows(model, cache, list(system), [0.0] * len(system), shown, 1)
            for step, request in enumerate(plan):
                alone = feed_rows(model, cache, request.ids, request.times, request.visible_until, request.rows)
                assert torch.allclose(packed[step][index], alone, atol=1e-5), (index, step)
    # The hidden tokens changed the first session's logits and nobody else's.
    assert not torch.allclose(packed[1][0], packed[1][1], atol=1e-3)
    assert engine.stats.forwards == 3 and engine.stats.batch_sizes == {1: 1, 3: 2}  # the system prompt once
    # Query-key pairs computed: each new token against its session's context and all the new tokens.
    assert engine.stats.attended == 11 * 11 + (3 * 14 + 3 * 14 + 1 * 12) + (2 * 16 + 2 * 16 + 4 * 16)
    assert engine.stats.logit_rows == 1 + 3 + (2 + 2 + 1)
    assert len(engine.system_prompts) == 1 and all(session.length == 16 for session in sessions[:2])


def test_a_step_packs_only_forwards_of_one_kind_and_the_others_keep_their_place():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, max_position_embeddings=512, **TINY)).eval()
    model.config._attn_implementation = "sdpa"
    engine = Engine(model, batch_size=4)
    until = [math.inf] * 64
    sessions = [engine.open((1, 2, 3)) for _ in range(4)]
    # Two sessions ask for a full forward, one for its first layer only (a layer-skip draft), one for a full one.
    kinds = [None, 1, None, None]
    results = {}

    def work(index, layers):
        logits = yield Forward([10 + index], [0.0], until, layers=layers)
        results[index] = (logits, engine.stats.forwards)

    for index, (session, layers) in enumerate(zip(sessions, kinds, strict=True)):
        engine.submit(session, work(index, layers), lambda result, error: None)
    assert engine.step() == 3 and engine.stats.shallow_forwards == 0  # the full forwards, together
    assert engine.step() == 1 and engine.stats.shallow_forwards == 1  # then the shallow one, alone
    assert engine.step() == 0 and set(results) == {0, 1, 2, 3}

    # Each got the logits of its own kind: the shallow forward's differ from a full forward of the same token.
    def alone(token):
        return Engine(model).open((1, 2, 3)).forward(Forward([token], [0.0], until))

    assert torch.allclose(results[0][0], alone(10), atol=1e-5)
    assert not torch.allclose(results[1][0], alone(11), atol=1e-3)


def test_a_model_plays_the_same_sessions_at_batch_eight_as_alone(generated, tiny_chatml_model):
    timelines = [t for t in generated[0] if len(t.events) < 40][:8]

    def play(batch_size: int):
        factory = policy_factory("tiny", loaded=tiny_chatml_model, batch_size=batch_size)
        run = run_policy("tiny", timelines, factory, make_backend, SHORT, concurrency=batch_size)
        return run, factory

    alone, _ = play(1)
    together, factory = play(8)
    assert [log.timeline.events for log in together.logs] == [log.timeline.events for log in alone.logs]
    assert sum(len(log.timeline.events) for log in alone.logs) > 8 * 10  # the model played, not one notice each
    engine = factory.engine
    assert max(engine.stats.batch_sizes) > 4  # the driver kept sessions waiting together


def test_a_session_whose_model_work_fails_ends_with_its_notice_while_the_batch_goes_on(generated, tiny_chatml_model):
    from clocktune.runtime.model_policy import ModelPolicy

    timelines = [t for t in generated[0] if len(t.events) < 40][:4]
    broken = timelines[1].id

    class Failing(ModelPolicy):
        def act_work(self, t):
            if self.fails and self.stats["actions"] >= 1:
                raise RuntimeError("out of memory, say")
            return (yield from super().act_work(t))

    def play(cls, batch_size):
        engine = Engine(tiny_chatml_model[0], batch_size)

        def factory(timeline):
            policy = cls(*tiny_chatml_model, timeline, name="tiny", engine=engine)
            policy.fails = timeline.id == broken
            return policy

        return run_policy("tiny", timelines, factory, make_backend, SHORT, concurrency=batch_size)

    healthy, failing = play(ModelPolicy, 4), play(Failing, 4)
    for log, reference in zip(failing.logs, healthy.logs, strict=True):
        if log.timeline.id == broken:
            notices = [e.text for e in log.timeline.events if e.kind == "notice"]
            assert any("the model failed: RuntimeError: out of memory, say" in text for text in notices)
            assert log.end_reason == "gave_up"
        else:
            assert log.timeline.events == reference.timeline.events


def test_a_backend_that_raises_fails_its_call_and_no_other_session(generated):
    from clocktune.runtime.scripted import ScriptedPolicy

    timelines = [t for t in generated[0] if any(e.kind == "tool_result" for e in t.events)][:4]
    broken = timelines[2].id

    def backends(timeline):
        backend = make_backend(timeline)
        if timeline.id == broken:

            def explode(name, arguments):
                raise KeyError("a bug in the domain's code")

            backend.execute = explode
        return backend

    run = run_policy("oracle", timelines, lambda t: ScriptedPolicy(t, "oracle"), backends, SessionConfig())
    for log, result in zip(run.logs, run.results, strict=True):
        errors = [e.error for e in log.timeline.events if e.kind == "tool_result" and e.error]
        if log.timeline.id == broken:
            # The first call fails with the backend's error; calls that needed its result fail because it did.
            assert errors and "the backend failed: KeyError" in errors[0]
            assert all(
                "the backend failed: KeyError" in error or "failed or was cancelled" in error for error in errors
            )
            assert not result.accurate
        else:
            assert not errors and result.accurate
