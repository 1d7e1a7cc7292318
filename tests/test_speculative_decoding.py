"""Speculative decoding of a local model's actions: lossless against plain decoding, in distribution when sampling,
and switched on only where the cost model says it pays."""

import math
from collections import Counter

import numpy as np
import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from clocktune.clock import DeviceProfile
from clocktune.runtime.drafters import (
    DraftRequest,
    LayerSkipDrafter,
    PromptLookupDrafter,
    QuantizedDrafter,
    make_drafter,
)
from clocktune.runtime.engine import Engine, Forward, drive
from clocktune.runtime.incremental import crop_cache, feed_rows
from clocktune.runtime.model_policy import ModelPolicy
from clocktune.runtime.play import run_policy
from clocktune.runtime.scripted import ScriptedPolicy
from clocktune.runtime.session import SessionConfig
from clocktune.runtime.speculation_costs import resolve_drafter
from clocktune.runtime.speculation_runs import ALWAYS
from clocktune.runtime.speculative import (
    DraftLength,
    SpeculationCosts,
    break_even_acceptance,
    draft_pays,
    expected_speedup,
)
from clocktune.runtime.token_picking import SamplingNoise
from data_gen.backends import make_backend
from tests.model_probe import ModelProbe
from tests.tiny_models import TINY
from tests.tiny_tokenizer import tiny_tokenizer

FAST = DeviceProfile("fast", 1e6, 1e4, 0.0)
try:  # torchao is optional: the quantized drafter is tested where it is installed
    import torchao  # noqa: F401

    MODEL_DRAFTERS = ("layer_skip:2", "int8")
except ImportError:
    MODEL_DRAFTERS = ("layer_skip:2",)


def _short(generated, count=2):
    # Short dialogues with a revision or a modify, so that tokens get hidden while the session runs.
    timelines = [t for t in generated[0] if len(t.events) < 36 and any(e.kind == "tool_modify" for e in t.events)]
    return timelines[:count]


def _play(model, tokenizer, timelines, drafter, constrained, **options):
    probes = []

    def factory(timeline):
        policy = ModelPolicy(
            model, tokenizer, timeline, max_new_tokens=12, constrained=constrained, drafter=drafter, **options
        )
        probes.append(ModelProbe(policy, ScriptedPolicy(timeline, "speculative")))
        return probes[-1]

    run_policy("probe", timelines, factory, make_backend, SessionConfig(device=FAST), concurrency=1, progress=False)
    return [probe.actions for probe in probes], [probe.inner.decoding for probe in probes]


@pytest.mark.parametrize("constrained", [False, True], ids=["unconstrained", "grammar"])
def test_greedy_speculative_actions_equal_plain_greedy_token_for_token_for_every_drafter(
    generated, tiny_four_layer_model, constrained
):
    model, tokenizer = tiny_four_layer_model
    timelines = _short(generated)
    plain, _ = _play(model, tokenizer, timelines, None, constrained)
    assert sum(len(session) for session in plain) > 10
    for name in ("prompt_lookup", *MODEL_DRAFTERS):
        drafter = make_drafter(name, model)
        spoken, stats = _play(model, tokenizer, timelines, drafter, constrained, margin=ALWAYS)
        assert spoken == plain, name
        drafted, accepted = sum(s.drafted for s in stats), sum(s.accepted for s in stats)
        # Both paths of the verification ran: drafts kept and drafts cut (a random model's output is nothing a
        # lookup of the context predicts, but its drafts are verified all the same).
        assert drafted > 0 and accepted < drafted, name
        assert accepted > 0 or name == "prompt_lookup", name


def test_plain_decoding_under_the_grammar_feeds_its_forced_tokens_with_the_step_before_and_writes_the_same_actions(
    generated, tiny_four_layer_model
):
    from clocktune.runtime.model_policy import one_token_a_forward

    model, tokenizer = tiny_four_layer_model
    timelines = _short(generated)
    # The call bias makes the random model call while the user speaks: a call's keys and id are forced text.
    with one_token_a_forward():  # as before jump-forward
        one_by_one, slow = _play(model, tokenizer, timelines, None, True, call_bias=1e4)
    actions, fast = _play(model, tokenizer, timelines, None, True, call_bias=1e4)
    assert actions == one_by_one
    forced = sum(s.forced_tokens for s in fast)
    assert forced > 0 and sum(s.forced_tokens for s in slow) == 0
    # A forced token is the grammar's only continuation where it stands: each fed early is accepted and saves a forward.
    assert sum(s.target_forwards for s in slow) - sum(s.target_forwards for s in fast) == forced
    assert sum(s.tokens for s in fast) == sum(s.tokens for s in slow)
    assert all(s.drafts == 0 for s in fast)  # no drafter: the forced tokens are nobody's draft to count


def test_a_drafter_with_short_drafts_feeds_the_grammars_forced_runs_as_plain_decoding_does(
    generated, tiny_four_layer_model
):
    model, tokenizer = tiny_four_layer_model
    timelines = _short(generated)
    plain_actions, plain = _play(model, tokenizer, timelines, None, True, call_bias=1e4)
    # Longest draft 2, drafting priced out (a probe now and then): forced runs of up to FORCED_DRAFT tokens still go
    # in with one step, as without a drafter; capped at the drafter's 2, every third forced token took a forward of
    # its own.
    actions, drafted = _play(
        model, tokenizer, timelines, make_drafter("prompt_lookup", model), True, call_bias=1e4, max_draft=2, margin=1e9
    )
    assert actions == plain_actions
    assert sum(s.forced_tokens for s in plain) > 0
    # A probe's accepted draft may cover a forced position now and then (709 of 710 here; 522 when capped at 2).
    assert sum(s.forced_tokens for s in drafted) >= 0.98 * sum(s.forced_tokens for s in plain)


def test_a_drafters_acceptance_counts_its_own_tokens_and_not_the_grammars_forced_ones(
    generated, tiny_four_layer_model
):
    model, tokenizer = tiny_four_layer_model
    timelines = _short(generated)
    # Calls while the user speaks (the bias): their keys and ids are forced text, fed in the drafter's steps.
    _, stats = _play(
        model, tokenizer, timelines, make_drafter("prompt_lookup", model), True, call_bias=1e4, margin=ALWAYS
    )
    forced = sum(s.forced_tokens for s in stats)
    drafted = sum(s.drafted for s in stats)
    assert forced > 0 and drafted > 0
    # Counted in, the forced tokens (accepted all but always) lifted the α that new sessions and the profile take.
    assert drafted == sum(s.drafter_tokens for s in stats)
    assert sum(s.drafts for s in stats) == sum(s.drafter_drafts for s in stats)
    assert sum(s.accepted for s in stats) <= drafted


def test_model_driven_live_sessions_are_the_same_with_a_drafter(generated, tiny_four_layer_model):
    model, tokenizer = tiny_four_layer_model
    config = SessionConfig(max_notices=4, device=FAST)

    def play(drafter):
        policies = []

        def factory(timeline):
            # The plain argmax: a random model under the grammar writes only valid actions and plays each turn to its
            # limit (drafting under the grammar is the parametrized test above).
            policies.append(
                ModelPolicy(
                    model, tokenizer, timeline, max_new_tokens=10, drafter=drafter, margin=ALWAYS, constrained=False
                )
            )
            return policies[-1]

        run = run_policy("tiny", generated[0][:2], factory, make_backend, config, concurrency=1, progress=False)
        return [log.timeline.events for log in run.logs], policies

    plain, _ = play(None)
    for name in ("prompt_lookup", "layer_skip:2"):
        events, policies = play(make_drafter(name, model))
        assert events == plain, name
        assert sum(policy.decoding.drafts for policy in policies) > 0


def test_layer_skip_drafts_with_the_first_layers_over_the_targets_session_and_crops_it_back(tiny_four_layer_model):
    model, _ = tiny_four_layer_model
    drafter = LayerSkipDrafter(model, 2)
    shallow = LlamaForCausalLM(LlamaConfig(**{**model.config.to_dict(), "num_hidden_layers": 2})).eval()
    shallow.load_state_dict(
        {
            k: v
            for k, v in model.state_dict().items()
            if not k.startswith("model.layers.2") and not k.startswith("model.layers.3")
        }
    )
    shallow.config._attn_implementation = "sdpa"
    ids = torch.randint(model.config.vocab_size, (40,), generator=torch.Generator().manual_seed(1)).tolist()
    until = [math.inf] * 60
    engine = Engine(model)
    session = engine.open(tuple(ids[:30]))
    before = [key[:, :, :30].clone() for key in session.keys]
    request = DraftRequest(ids[:31], 30, session, [0.0] * 30, 0.0, until, 5, end_id=-1)
    draft = drive(drafter.propose(request), session.forward)
    # The drafter's greedy continuation is the 2-layer model's, computed from scratch.
    expected, context = [], ids[:31]
    with torch.no_grad():
        for _ in range(5):
            expected.append(int(shallow(input_ids=torch.tensor([context + expected])).logits[0, -1].argmax()))
    assert draft.tokens == expected
    assert session.length == 30 and engine.stats.shallow_forwards == 5
    assert all(torch.equal(key[:, :, :30], old) for key, old in zip(session.keys, before, strict=True))
    assert len(model.model.layers) == 4  # the full layer list is back
    # The next full forward after the crop sees the context alone, as if no draft had been made.
    fresh = Engine(model).open(tuple(ids[:30]))
    step = Forward(ids[30:31], [0.0], until)
    assert torch.allclose(session.forward(step), fresh.forward(step), atol=1e-5)


def test_prompt_lookup_copies_what_followed_the_latest_match_of_the_longest_n_gram():
    drafter = PromptLookupDrafter()
    request = DraftRequest([5, 6, 7, 1, 2, 3, 9, 1, 2, 3, 4, 8, 2, 3], 0, None, [], 0.0, [], 3, end_id=8)
    assert drafter.lookup(request).tokens == [4, 8]  # "2 3" last followed by "4 8" (cut after the end token)
    request.corpus, request.ids = [11, 12, 13, 14], [20, 11, 12]
    assert drafter.lookup(request).tokens == [13, 14]  # from the corpus when the context has no match
    request.ids = [20, 21]
    assert drafter.lookup(request).tokens == []
    assert drive(drafter.propose(request), None).tokens == []  # as draft work: no forward asked for


def test_a_quantized_drafter_is_derived_again_when_the_targets_weights_change(tiny_four_layer_model):
    pytest.importorskip("torchao")
    model, _ = tiny_four_layer_model
    drafter = QuantizedDrafter(model, 8)
    first = drafter.draft_model
    drafter.session()
    assert drafter.draft_model is first  # nothing changed: the same copy
    weight = model.model.layers[0].mlp.up_proj.weight
    with torch.no_grad():
        weight.add_(0.0)  # an in-place update, as an optimizer step
    drafter.session()
    assert drafter.draft_model is not first
    assert len(drafter.rebuild_s) == 2 and all(seconds > 0 for seconds in drafter.rebuild_s)


def _chi_square_p(observed: list[int], expected: list[float]) -> float:
    # Pearson's statistic and its upper tail, Q(k/2, x/2) for k = cells - 1 degrees of freedom.
    statistic = sum((o - e) ** 2 / e for o, e in zip(observed, expected, strict=True))
    dof = len(observed) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(statistic / 2)))


def test_sampling_with_each_positions_noise_draws_from_the_softmax_and_the_same_token_for_the_same_key():
    logits = torch.log(torch.tensor([0.4, 0.25, 0.15, 0.1, 0.07, 0.03]))
    counts = Counter(SamplingNoise((7, seed, 0)).sample(logits, 3, 1.0) for seed in range(20_000))
    observed = [counts[token] for token in range(6)]
    assert _chi_square_p(observed, [float(p) * 20_000 for p in torch.softmax(logits, -1)]) > 1e-3
    # A key and a position decide the draw: drawn again (a verification of a draft there), it is the same token.
    noise = SamplingNoise((1, 2, 3))
    assert [noise.sample(logits, position, 1.0) for position in range(50)] == [
        SamplingNoise((1, 2, 3)).sample(logits, position, 1.0) for position in range(50)
    ]
    allowed = np.array([False, False, True, True, False, False])
    assert {SamplingNoise((seed,)).sample(logits, 0, 1.0, allowed) for seed in range(200)} == {2, 3}


def _exact_distribution(model, context, length, temperature, end_id):
    # P(first `length` tokens) under plain sampling, by enumeration of the likely prefixes (the rest pooled), each
    # prefix fed over a cache of the context and cropped off again.
    cache, until = DynamicCache(), [math.inf] * (len(context) + length)
    with torch.no_grad():
        first = feed_rows(model, cache, context, [0.0] * len(context), until, 1)[0]
    outcomes = {(): 1.0}
    for _ in range(length):
        grown = {}
        for prefix, probability in outcomes.items():
            if prefix and prefix[-1] == end_id:
                grown[prefix] = probability
                continue
            with torch.no_grad():
                logits = feed_rows(model, cache, list(prefix), [0.0] * len(prefix), until, 1)[0] if prefix else first
            crop_cache(cache, len(context))
            probs = torch.softmax(logits.double() / temperature, -1)
            for token in torch.nonzero(probs * probability > 2e-4).flatten().tolist():
                grown[prefix + (token,)] = probability * float(probs[token])
        outcomes = grown
    return outcomes


class _Deterministic:
    """The first layers' argmax as a fixed proposal, as a prompt lookup proposes (the noise not used); unlike a
    lookup on a random model's output, it is often right."""

    name = "deterministic"

    def __init__(self, model):
        self.inner = LayerSkipDrafter(model, 2)

    def session(self):
        return self

    def close(self):
        pass

    def propose(self, request):
        request.temperature = 0.0
        return self.inner.propose(request)


@pytest.mark.parametrize("drafts", ["fixed", "sampled"])
def test_sampled_speculative_actions_follow_the_targets_distribution(generated, tiny_four_layer_model, drafts):
    model, tokenizer = tiny_four_layer_model
    timeline = generated[0][0]
    drafter = _Deterministic(model) if drafts == "fixed" else make_drafter("layer_skip:2", model)
    # Unconstrained: the target's distribution here is the softmax of its logits, with no grammar mask.
    policy = ModelPolicy(
        model,
        tokenizer,
        timeline,
        max_new_tokens=3,
        drafter=drafter,
        temperature=0.2,
        seed=7,
        margin=ALWAYS,
        constrained=False,
    )
    policy.observe(timeline.events[:1])
    t = timeline.events[0].t + 0.5
    samples = Counter()
    trials = 600
    for _ in range(trials):
        policy.act(t)  # the same context each time: act drops its prompt and tokens from the cache
        samples[tuple(policy.last_action_ids)] += 1
    assert policy.decoding.drafts >= trials and 0 < policy.decoding.accepted < policy.decoding.drafted
    context = policy.fed_ids + policy.renderer.prompt_for_action(t)
    exact = _exact_distribution(model, context, 3, 0.2, policy.end_id)
    cells = [outcome for outcome, p in exact.items() if p * trials >= 5]
    expected = [exact[outcome] * trials for outcome in cells]
    observed = [samples[outcome] for outcome in cells]
    expected.append(trials - sum(expected))
    observed.append(trials - sum(observed))
    assert len(cells) >= 5 and _chi_square_p(observed, expected) > 1e-3
    # Whatever was drafted, each action is the one plain sampling draws with the same seed.
    plain = ModelPolicy(model, tokenizer, timeline, max_new_tokens=3, temperature=0.2, seed=7, constrained=False)
    plain.observe(timeline.events[:1])
    drawn = Counter()
    for _ in range(trials):
        plain.act(t)
        drawn[tuple(plain.last_action_ids)] += 1
    assert drawn == samples


def test_expected_speedup_is_the_issues_formula_with_verification_at_one_step():
    alpha, gamma, c = 0.7, 4, 0.2
    issue = (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1))
    assert expected_speedup(alpha, gamma, c) == pytest.approx(issue)
    assert expected_speedup(1.0, 3, 0.0) == 4.0 and expected_speedup(0.0, 3, 0.0, 2.0) == 0.5
    assert expected_speedup(0.9, 0, 0.5) == 1.0


def test_the_toggle_speculates_only_where_the_measured_costs_let_it_pay():
    cpu = SpeculationCosts(0.045, {1: 1.0, 2: 1.2, 3: 1.6, 4: 2.0, 5: 2.2, 6: 2.4, 7: 2.6})
    # A drafter costlier than the target (torchao int8 on this CPU: 1.8x a step) never pays, whatever α.
    slow = DraftLength(1.8, cpu.verify, prior_alpha=0.99, prior_weight=1e6, probe_every=10**9)
    assert all(slow.choose() == 0 for _ in range(50))
    # A free drafter with high acceptance drafts long; with low acceptance it stays off but probes now and then.
    sure = DraftLength(0.0, cpu.verify, prior_alpha=0.95, prior_weight=1e6)
    unsure = DraftLength(0.0, cpu.verify, prior_alpha=0.2, prior_weight=1e6, probe_every=8)
    assert sure.choose() >= 3
    assert [unsure.choose() for _ in range(16)].count(1) == 2 and unsure.best()[1] < 1.1
    # The session's own measurement moves it: drafts that keep being accepted turn it on.
    learning = DraftLength(0.0, cpu.verify, prior_alpha=0.2, prior_weight=4)
    assert learning.choose() == 0
    for _ in range(20):
        learning.record(3, 3)
    assert learning.choose() >= 2
    # The margin: a gain of 5% is not worth it at the default margin of 10%.
    assert DraftLength(0.0, lambda k, batch=1: 1.0 + 0.45 * (k - 1), prior_alpha=0.5, prior_weight=1e6).choose() == 0


def test_the_break_even_acceptance_is_where_the_toggle_turns_a_drafter_on():
    cpu = SpeculationCosts(0.045, {1: 1.0, 2: 1.2, 3: 1.6, 4: 2.0, 5: 2.2, 6: 2.4, 7: 2.6})
    cheap = break_even_acceptance(0.1, cpu.verify)
    assert 0.0 < cheap < 1.0
    assert draft_pays(cheap, 0.1, cpu.verify, 0.1, 6) and not draft_pays(cheap - 0.002, 0.1, cpu.verify, 0.1, 6)
    # A costlier drafter needs more of its tokens accepted; one as costly as a target step never pays on this CPU.
    assert break_even_acceptance(0.4, cpu.verify) > cheap
    assert break_even_acceptance(1.0, cpu.verify) is None


def test_auto_picks_by_the_cost_model_and_none_where_nothing_pays(tiny_four_layer_model):
    model, _ = tiny_four_layer_model
    costs = SpeculationCosts(
        0.045,
        {1: 1.0, 2: 1.2, 3: 1.6, 4: 2.0},
        {"prompt_lookup": 0.01, "layer_skip:2": 0.5, "int8": 1.8},
        acceptance={"prompt_lookup": 0.6, "layer_skip:2": 0.3, "int8": 0.95},
    )
    drafter, _ = resolve_drafter("auto", model, costs)
    assert drafter is not None and drafter.name == "prompt_lookup"
    poor = SpeculationCosts(0.045, costs.verify_ratio, costs.draft_ratio, {k: 0.05 for k in costs.draft_ratio})
    assert resolve_drafter("auto", model, poor)[0] is None


def test_eval_with_a_drafter_writes_decoding_metrics_and_profile_measures_speculation(tmp_path, generated):
    import json

    from clocktune.cli import main
    from clocktune.encoding import extend_tokenizer, get_codec
    from clocktune.runtime.device_profiles import load_device_profile, load_speculation_costs
    from clocktune.timeline.io import write_timelines

    tokenizer = tiny_tokenizer("chatml")
    extend_tokenizer(tokenizer, get_codec("abs_bins"), "chatml")
    torch.manual_seed(0)
    checkpoint = tmp_path / "checkpoint"
    LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=8192, **TINY)).save_pretrained(
        checkpoint
    )
    tokenizer.save_pretrained(checkpoint)
    data = tmp_path / "data.jsonl"
    write_timelines(data, generated[0][:1])
    profile = tmp_path / "profile.yaml"
    # --no-constrained, here and in eval: an untrained model under the grammar plays each turn to its 60 s limit.
    argv = ["profile", "--model", str(checkpoint), "--context-tokens", "64", "--drafters", "prompt_lookup"]
    argv += ["--data", str(data), "--limit", "1", "--draft", "prompt_lookup", "--no-constrained"]
    assert main([*argv, "--out", str(profile)]) == 0
    costs = load_speculation_costs(str(profile))
    assert costs.verify_ratio[1] == 1.0 and "prompt_lookup" in costs.draft_ratio
    assert set(costs.decode_tokens_per_s) == {"none", "prompt_lookup"} and "prompt_lookup" in costs.acceptance
    assert load_device_profile(str(profile)).decode_tokens_per_s > 0
    out = tmp_path / "eval"
    argv = ["eval", "--data", str(data), "--model", str(checkpoint), "--policy", "speculative"]
    argv += ["--baseline", "sync", "--baseline-model", "scripted", "--profile", str(profile)]
    assert main([*argv, "--draft", "prompt_lookup", "--no-constrained", "--out", str(out)]) == 0
    decoding = json.loads((out / "summary.json").read_text())["decoding"]["policy"]
    assert decoding["drafter"] == "prompt_lookup" and decoding["actions"] > 0
    assert {"acceptance_rate", "mean_accepted_length", "acceptance_by_position", "tokens_per_s"} <= set(decoding)
    assert main([*argv, "--draft", "layer_skip:9", "--out", str(tmp_path / "bad")]) == 2  # only 2 layers


def test_crop_cache_cuts_every_layer_to_one_length():
    cache = DynamicCache()
    for layer, length in ((0, 7), (1, 5)):
        cache.update(torch.zeros(1, 1, length, 2), torch.zeros(1, 1, length, 2), layer)
    crop_cache(cache, 5)
    assert [layer.get_seq_length() for layer in cache.layers] == [5, 5]
