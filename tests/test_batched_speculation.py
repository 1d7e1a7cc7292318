"""Speculation inside the engine's batch: drafts and verifications are packed with other sessions' forwards, the
toggle prices verification at the active batch, the draft length climbs a ladder, and no session's log depends on
any of it, greedy or sampled."""

from dataclasses import replace

import pytest
from transformers import LlamaConfig, LlamaForCausalLM

from clocktune.clock import DeviceProfile
from clocktune.runtime.play import run_policy
from clocktune.runtime.policy_factories import policy_factory
from clocktune.runtime.session import SessionConfig
from clocktune.runtime.speculation_costs import measure_roofline
from clocktune.runtime.speculative import (
    PROBE_PATIENCE,
    DraftLength,
    Roofline,
    SpeculationCosts,
    rung_thresholds,
)
from data_gen.backends import make_backend
from tests.tiny_models import TINY

SHORT = SessionConfig(max_notices=4, turn_limit_s=2.0, device=DeviceProfile("slow", 1e4, 50.0, 0.0))
# A device where a forward costs the same up to 6 tokens and each token past them: drafts pay while one or two sessions
# share a forward and not when eight do (EfficientRollout's regime, made small enough for a tiny model).
KNEE = Roofline(memory_s=0.006, token_s=0.001, row_s=0.0)
try:  # torchao is optional: the quantized drafter is tested where it is installed
    import torchao  # noqa: F401

    DRAFTERS = ("prompt_lookup", "layer_skip:2", "int8")
except ImportError:
    DRAFTERS = ("prompt_lookup", "layer_skip:2")


def test_a_fitted_roofline_recovers_the_device_it_was_timed_on():
    device = Roofline(memory_s=0.020, token_s=0.0004, row_s=0.0005)
    samples = [(b * k, b, device.seconds(b * k, b)) for b in (1, 2, 4, 8, 16, 32) for k in (1, 2, 3, 5, 7)]
    fitted = Roofline.fit(samples)
    assert fitted.memory_s == pytest.approx(0.020, rel=0.05) and fitted.row_s == pytest.approx(0.0005, rel=0.1)
    assert fitted.knee == pytest.approx(50, rel=0.1) and fitted.overhead_s < 0.001
    # A CPU's forwards: a fixed cost and then every token costs (no flat region): the knee falls near one token.
    cpu = Roofline(memory_s=0.010, token_s=0.010, row_s=0.0002, overhead_s=0.045)
    measured = [(b * k, b, cpu.seconds(b * k, b)) for b in (1, 2, 4, 8, 16, 32) for k in (1, 2, 3, 5, 7)]
    refit = Roofline.fit(measured)
    assert all(refit.seconds(t, r) == pytest.approx(s, rel=0.03) for t, r, s in measured)
    assert SpeculationCosts(0.055, {}, roofline=refit).verify(5, 1) == pytest.approx(95 / 55, rel=0.03)
    # Verifying 4 draft tokens: free for one session, more than 2.5 steps' worth for 64 (the rows' own cost shared).
    costs = SpeculationCosts(0.02, {}, roofline=fitted)
    assert costs.verify(5, 1) < 1.05 and costs.verify(5, 64) > 2.5
    assert costs.verify(5, 4) < costs.verify(5, 16) < costs.verify(5, 64)
    assert type(fitted.token_s) is float  # written to YAML profiles as a plain number
    assert costs.verify(1, 16) == pytest.approx(1.0)


# The engine's packed forwards on the 2-core EPYC, 2026-12-07 (bench_batched_speculation.py part 1, the demo's
# checkpoint, 1,024-token caches): (sessions, tokens each) -> median ms.
EPYC = {
    (1, 1): 63.0, (1, 2): 105.1, (1, 3): 123.8, (1, 5): 105.7, (1, 7): 144.2,
    (2, 1): 105.3, (2, 2): 100.7, (2, 3): 121.8, (2, 5): 136.6, (2, 7): 128.1,
    (4, 1): 108.1, (4, 2): 120.6, (4, 3): 136.4, (4, 5): 157.9, (4, 7): 187.0,
    (8, 1): 135.4, (8, 2): 167.1, (8, 3): 188.3, (8, 5): 247.0, (8, 7): 289.8,
    (16, 1): 195.4, (16, 2): 280.7, (16, 3): 324.7, (16, 5): 419.7, (16, 7): 507.9,
    (32, 1): 323.5, (32, 2): 466.7, (32, 3): 560.1, (32, 5): 742.7, (32, 7): 914.9,
}  # fmt: skip


def test_a_decode_step_alone_is_timed_apart_from_the_roofline_so_a_verification_at_batch_one_is_priced_as_measured():
    samples = [(b * k, b, ms / 1e3) for (b, k), ms in EPYC.items()]
    roofline = Roofline.fit(samples)
    costs = SpeculationCosts(0.063, {}, roofline=roofline)
    # Measured: a 2-token forward alone costs 1.67 decode steps (matrix products against matrix-vector ones); fitted
    # through the decode step, the linear model said 1.04.
    assert roofline.single_s == pytest.approx(0.063)
    assert costs.verify(2, 1) == pytest.approx(105.1 / 63.0, rel=0.2)
    assert all(roofline.seconds(t, r) == pytest.approx(s, rel=0.15) for t, r, s in samples if r >= 4)
    # Prompt lookup on sampled rollouts (its own tokens' α, 0.15-0.29 there) pays at none of these batches on this
    # CPU. At 2 sessions two tokens each cost what one each did (100.7 and 105.3 ms): there a draft is all but free.
    for batch in (1, 16, 100):
        assert DraftLength(0.001, costs.verify, prior_alpha=0.27, prior_weight=1e6).choose(batch) == 0, batch


def test_a_due_probe_waits_for_a_step_whose_forced_tokens_make_it_cheap_and_the_toggle_is_not_moved_by_them():
    samples = [(b * k, b, ms / 1e3) for (b, k), ms in EPYC.items()]
    costs = SpeculationCosts(0.063, {}, roofline=Roofline.fit(samples))
    # Prompt lookup at α 0.27, one session: after a decode step alone one draft token makes a one-token forward
    # (63 ms) one of two (~105 ms) and loses; after a forced token the forward holds two tokens anyway.
    length = DraftLength(0.001, costs.verify, prior_alpha=0.27, prior_weight=1e6, probe_every=4)
    assert length.speedup(1, 1) < 1.0 <= length.speedup(1, 1, forced=1)
    assert length.speedup(1, 16, forced=1) < 1.0  # at 16 sessions each token costs its share: no cheap probe
    # The toggle prices a draft as after a decode step alone, forced tokens or not (the fit's error here is the
    # whole of the gain after them): off at batch 1 either way.
    assert length.choose(1) == 0 and length.choose(1, forced=1) == 0 and not length.on
    # A probe falls due after probe_every plain steps and waits for a step where it is not expected to lose ...
    assert [length.choose(1) for _ in range(6)] == [0] * 6
    assert length.choose(1, forced=2) == length.rungs[0] and not length.on
    # ... but not for ever: a session without forced tokens still probes, PROBE_PATIENCE times as seldom.
    alone = DraftLength(0.001, costs.verify, prior_alpha=0.27, prior_weight=1e6, probe_every=4)
    chosen = [alone.choose(1) for _ in range(4 * PROBE_PATIENCE)]
    assert chosen.count(alone.rungs[0]) == 1 and chosen[-1] == alone.rungs[0]


def test_the_toggle_speculates_at_a_small_batch_and_not_at_a_large_one_at_the_same_acceptance():
    costs = SpeculationCosts(0.006, {}, roofline=KNEE)
    length = DraftLength(0.0, costs.verify, prior_alpha=0.6, prior_weight=1e6, probe_every=10**9)
    assert length.choose(1) > 0 and length.on
    assert length.choose(64) == 0 and not length.on
    assert length.choose(2) > 0


def test_the_draft_length_climbs_the_ladder_one_rung_at_a_time_with_acceptance_and_comes_down_without_it():
    costs = SpeculationCosts(0.024, {1: 1.0, 2: 1.1, 3: 1.2, 4: 1.4, 5: 1.6, 6: 1.8, 7: 2.0})
    length = DraftLength(0.0, costs.verify, prior_alpha=0.3, prior_weight=1.0)
    chosen = []
    for _ in range(12):
        gamma = length.choose()
        chosen.append(gamma)
        if gamma:
            length.record(gamma, gamma)  # every draft token accepted
    climbing = [gamma for gamma in chosen if gamma]
    assert climbing[-1] == length.rungs[-1] and climbing == sorted(climbing)
    rungs = [length.rungs.index(gamma) for gamma in climbing]
    assert {b - a for a, b in zip(rungs, rungs[1:], strict=False)} <= {0, 1}
    for _ in range(150):  # every draft rejected: the old acceptance fades (64 positions' memory)
        gamma = length.choose()
        if gamma:
            length.record(gamma, 0)
    assert length.choose() in (0, length.rungs[0])
    # The ladder's thresholds: above each, the longer rung is expected to pay more; below, the shorter.
    thresholds = rung_thresholds(0.0, costs.verify)
    first = thresholds[0]
    assert first is not None and 0.0 < first < 1.0
    above = DraftLength(0.0, costs.verify, prior_alpha=first + 0.01, prior_weight=1e6)
    below = DraftLength(0.0, costs.verify, prior_alpha=first - 0.01, prior_weight=1e6)
    assert above.speedup(2) > above.speedup(1) and below.speedup(2) < below.speedup(1)


def test_the_roofline_sweep_times_the_engines_packed_forwards():
    import torch

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, max_position_embeddings=512, **TINY)).eval()
    model.config._attn_implementation = "sdpa"
    roofline, samples = measure_roofline(model, context_tokens=32, batches=(1, 4), tokens_per_row=(1, 3), repeats=1)
    assert {(tokens, rows) for tokens, rows, _ in samples} == {(1, 1), (3, 1), (4, 4), (12, 4)}
    assert all(seconds > 0 for _, _, seconds in samples)
    # The one-token forward is priced as timed; the others by the model fitted to them alone.
    assert roofline.seconds(1, 1) == roofline.single_s == next(s for t, _, s in samples if t == 1)
    assert replace(roofline, single_s=None) == Roofline.fit([sample for sample in samples if sample[0] > 1])


def _play(model, timelines, batch_size, draft, temperature):
    costs = SpeculationCosts(0.006, {}, {"prompt_lookup": 0.0, "layer_skip:2": 0.05, "int8": 0.05}, roofline=KNEE)
    factory = policy_factory(
        "tiny", loaded=model, batch_size=batch_size, draft=draft, costs=costs, temperature=temperature
    )
    run = run_policy("tiny", timelines, factory, make_backend, SHORT, concurrency=batch_size, progress=False)
    return [log.timeline.events for log in run.logs], factory


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
def test_sessions_drafting_inside_a_batch_of_eight_log_what_plain_decoding_logs_alone(
    generated, tiny_four_layer_model, temperature
):
    timelines = [t for t in generated[0] if len(t.events) < 40][:8]
    plain, _ = _play(tiny_four_layer_model, timelines, 1, "none", temperature)
    assert sum(len(events) for events in plain) > 8 * 10
    # Sampled: the model drafter, which drafts with the target's noise (a lookup's drafts do not depend on it).
    for draft in DRAFTERS if temperature == 0 else ("layer_skip:2",):
        logs, factory = _play(tiny_four_layer_model, timelines, 8, draft, temperature)
        assert logs == plain, draft
        decoding, engine = factory.decoding, factory.engine
        assert decoding.drafter_drafts > 0, draft
        # Drafted inside shared forwards, and switched off while the batch was large (a lookup of a random model's
        # output may never be worth switching on: its probes still draft).
        assert max(engine.stats.batch_sizes) > 1, draft
        assert decoding.switched_on_batch < 8, draft
        assert decoding.switched_on_batch > 0 or draft == "prompt_lookup", draft
        assert 0 < decoding.drafter_drafts < decoding.target_forwards, draft
        if draft.startswith("layer_skip"):
            assert engine.stats.shallow_forwards > 0
