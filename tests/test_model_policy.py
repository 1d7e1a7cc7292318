"""A local model as a runtime policy: its context renders to the ids fed, shared prefills, notices for bad output."""

import math

import pytest
import torch

from clocktune.clock import DeviceProfile
from clocktune.runtime.play import run_policy
from clocktune.runtime.scripted import ScriptedPolicy
from clocktune.runtime.session import Session, SessionConfig
from clocktune.runtime.virtual_clock import run_virtual
from data_gen.backends import make_backend
from tests.model_probe import ModelProbe
from tests.tiny_tokenizer import tiny_tokenizer

# Model policy ----------------------------------------------------------------------------------------------


def test_model_policy_context_renders_to_the_ids_fed_and_matches_a_full_forward(generated, tiny_chatml_model):
    from clocktune.masks import build_float_mask
    from clocktune.render import Renderer, render
    from clocktune.runtime.model_policy import ModelPolicy

    model, tokenizer = tiny_chatml_model
    # A timeline with a revision or a modify, so that tokens get hidden while the session runs.
    timeline = next(t for t in generated[0] if any(e.kind == "tool_modify" for e in t.events) and len(t.events) < 40)
    probe = ModelProbe(
        ModelPolicy(model, tokenizer, timeline, max_new_tokens=4), ScriptedPolicy(timeline, "speculative")
    )
    log = run_virtual(Session(timeline, probe, SessionConfig(), make_backend(timeline)).run())
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
    from clocktune.runtime.engine import Engine
    from clocktune.runtime.model_policy import ModelPolicy

    model, tokenizer = tiny_chatml_model
    same_tools = [t for t in generated[0] if t.domain == generated[0][0].domain and len(t.events) < 40][:2]
    fed = []
    hook = model.register_forward_pre_hook(
        lambda _, args, kwargs: fed.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )

    def play(timeline, engine):
        fed.clear()
        policy = ModelPolicy(model, tokenizer, timeline, max_new_tokens=4, engine=engine)
        probe = ModelProbe(policy, ScriptedPolicy(timeline, "speculative"))
        run_virtual(Session(timeline, probe, SessionConfig(), make_backend(timeline)).run())
        return [logits for _, _, logits in probe.logits], sum(fed), len(policy.system_ids)

    try:
        shared = Engine(model)
        play(same_tools[0], shared)  # the first session of the model prefills the system prompt
        alone, fed_alone, system = play(same_tools[1], None)
        together, fed_together, _ = play(same_tools[1], shared)
    finally:
        hook.remove()
    # A later session starts from a copy of that prefill and decides exactly as one that computed its own.
    assert len(shared.system_prompts) == 1 and fed_together == fed_alone - system > 0
    assert len(alone) == len(together) > 2
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(alone, together, strict=True))


def test_untrained_model_output_gets_notices_not_crashes(generated, tiny_chatml_model):
    from clocktune.runtime.model_policy import ModelPolicy

    model, tokenizer = tiny_chatml_model
    config = SessionConfig(max_notices=4, device=DeviceProfile("fast", 1e6, 1e4, 0.0))
    policies = []

    def factory(timeline):
        # The plain argmax: under the grammar (the default) even random weights write only valid actions.
        policies.append(ModelPolicy(model, tokenizer, timeline, max_new_tokens=8, constrained=False))
        return policies[-1]

    run = run_policy("tiny", generated[0][:3], factory, make_backend, config)
    for result in run.results:
        assert result.end_reason in ("gave_up", "done", "timeout") and result.notices <= 4
    assert sum(result.notices for result in run.results) > 0  # random weights write invalid actions
    # A long evaluation must not keep every finished session's KV cache.
    assert len(policies) == 3 and all(policy.kv is None for policy in policies)


# Scoring and CLI -------------------------------------------------------------------------------------------


def test_call_bias_makes_the_model_call_while_the_user_speaks_and_leaves_it_alone_once_they_are_done(
    generated, tiny_chatml_model
):
    from clocktune.runtime.model_policy import ModelPolicy

    model, tokenizer = tiny_chatml_model
    timeline = next(t for t in generated[0] if t.tools and sum(e.kind == "user_chunk" for e in t.events) > 2)
    chunks = [e for e in timeline.events if e.kind == "user_chunk"]
    final = next(i for i, e in enumerate(chunks) if e.final)

    def first_action(call_bias: float, heard: list) -> tuple:
        policy = ModelPolicy(model, tokenizer, timeline, max_new_tokens=48, call_bias=call_bias)
        policy.observe(heard)
        decision = policy.act(heard[-1].t)
        return decision.action, policy.last_action_ids

    # While the user speaks the bias decides: a large one puts the call marker first (and the grammar completes a
    # valid call), a large negative one rules calls out.
    speaking = chunks[:1]
    eager, _ = first_action(1e4, speaking)
    reluctant, _ = first_action(-1e4, speaking)
    assert eager is not None and eager.kind == "tool_call"
    assert reluctant is None or reluctant.kind != "tool_call"
    # Once the final chunk is heard the bias is off: the model writes what it writes without one, token for token.
    heard = chunks[: final + 1]
    assert first_action(1e4, heard)[1] == first_action(-1e4, heard)[1] == first_action(0.0, heard)[1]


def test_call_bias_needs_a_format_with_a_call_marker(generated):
    from clocktune.encoding import extend_tokenizer, get_codec
    from clocktune.runtime.model_policy import ModelPolicy

    tokenizer = tiny_tokenizer("llama3.2")
    extend_tokenizer(tokenizer, get_codec("abs_bins"), "llama3.2")
    with pytest.raises(ValueError, match="bare JSON"):
        ModelPolicy(None, tokenizer, generated[0][0], call_bias=1.0)


def test_call_bias_reaches_a_checkpoints_policies_and_names_its_results_apart(generated, tiny_chatml_model):
    from clocktune.cli.main import build_parser
    from clocktune.runtime.policy_factories import policy_spec
    from clocktune.train.sft import make_parser as sft_parser

    timeline = generated[0][0]
    plain = policy_spec("tiny", "ckpt", tiny_chatml_model)
    biased = policy_spec("tiny", "ckpt", tiny_chatml_model, call_bias=1.5)
    assert plain.factory(timeline).call_bias == 0.0 and biased.factory(timeline).call_bias == 1.5
    assert biased.key == plain.key + ":call_bias=1.5"  # a journal of one never answers for the other
    assert policy_spec("sync", call_bias=1.5).key == "scripted:sync"  # scripted policies have no logits to bias
    argv = ["eval", "--data", "d", "--out", "o"]
    assert build_parser().parse_args(argv).call_bias == 0.0
    assert build_parser().parse_args([*argv, "--call-bias", "1.5"]).call_bias == 1.5
    _, training_args, _ = sft_parser().parse_args_and_config(["--output_dir", "o", "--live_eval_call_bias", "1.5"])
    assert training_args.live_eval_call_bias == 1.5


# An action's tokens kept in the cache -------------------------------------------------------------------------


def _acted(model, tokenizer, timeline, t):
    from clocktune.runtime.model_policy import ModelPolicy

    policy = ModelPolicy(model, tokenizer, timeline, max_new_tokens=4)
    policy.observe(timeline.events[:1])
    policy.act(t)
    return policy


def test_an_actions_prompt_stays_in_the_cache_only_while_the_rendering_repeats_it(generated, tiny_chatml_model):
    from clocktune.timeline.events import Event

    model, tokenizer = tiny_chatml_model
    timeline = next(t for t in generated[0] if len(t.events) < 40)
    first = timeline.events[0]
    t = first.t + 0.5

    # A wait at the action's time renders the same header, clock and state line: they are kept, not fed again.
    policy = _acted(model, tokenizer, timeline, t)
    prompt = policy.renderer.prompt_for_action(t)
    policy.observe([Event("a1", t, "wait", "agent")])
    assert policy._confirmed_by(policy.renderer.rendering) >= len(prompt)

    # At another time the clock differs, and the prompt's tokens were fed at another time: nothing is kept.
    policy = _acted(model, tokenizer, timeline, t)
    policy.observe([Event("a1", t + 0.25, "wait", "agent")])
    assert policy._confirmed_by(policy.renderer.rendering) == 0

    # A token before them hidden from the action's time on (a modified call's result): they were fed seeing it,
    # training feeds them not seeing it, so they are fed again.
    policy = _acted(model, tokenizer, timeline, t)
    policy.renderer.hide(first.id, t)
    policy.observe([Event("a1", t, "wait", "agent")])
    assert policy._confirmed_by(policy.renderer.rendering) == 0


def test_a_model_acting_on_its_own_keeps_its_actions_and_still_matches_a_full_forward(generated, tiny_chatml_model):
    from clocktune.masks import build_float_mask
    from clocktune.render import render
    from clocktune.runtime.model_policy import ModelPolicy

    model, tokenizer = tiny_chatml_model
    timeline = next(t for t in generated[0] if any(e.kind == "tool_modify" for e in t.events) and len(t.events) < 40)
    policy = ModelPolicy(model, tokenizer, timeline, max_new_tokens=4)
    config = SessionConfig(max_notices=4, turn_limit_s=2.0, device=DeviceProfile("slow", 1e4, 50.0, 0.0))
    log = run_virtual(Session(timeline, policy, config, make_backend(timeline)).run())
    agent = [e for e in log.timeline.events if e.kind in ("wait", "say", "tool_call", "tool_modify", "tool_cancel")]
    assert len(agent) >= 3
    fed = policy.engine.stats.tokens
    rendering = render(log.timeline, tokenizer)
    # Each action's tokens were fed once (decoded), not again as the rendering's: fewer tokens than the rendering
    # plus every action's prompt and tokens.
    assert fed < len(rendering) + policy.stats["tokens"]

    # The prompt logits of one more action over the whole log equal one full forward under the training mask.
    t = log.timeline.events[-1].t + 0.1
    policy.act(t)
    prompt = policy.renderer.prompt_for_action(t)
    ids = rendering.input_ids + prompt
    times = rendering.time + [t] * len(prompt)
    until = rendering.visible_until + [math.inf] * len(prompt)
    mask = build_float_mask(
        torch.tensor([times]), torch.tensor([until]), torch.zeros(1, len(ids), dtype=torch.long), dtype=torch.float32
    )
    with torch.no_grad():
        full = model(input_ids=torch.tensor([ids]), attention_mask=mask, use_cache=False).logits[0, -1]
    assert torch.allclose(full, policy.last_prompt_logits, atol=1e-4)


def test_a_say_is_streamed_word_by_word_as_it_is_decoded_and_nothing_else_is(generated, tiny_chatml_model):
    from clocktune.runtime.model_policy import ModelPolicy

    model, tokenizer = tiny_chatml_model
    policy = ModelPolicy(model, tokenizer, generated[0][0])
    heard = []
    policy.on_speech = lambda words, final: heard.append((words, final))
    answer = tokenizer.encode("<|answer|>The kitchen lights are off.<|im_end|>", add_special_tokens=False)
    for count in range(1, len(answer) + 1):
        policy._stream_speech(answer[:count])
    texts = [words for words, _ in heard]
    assert texts[-1] == "The kitchen lights are off." and all(final for _, final in heard)
    assert all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:], strict=False))
    heard.clear()
    for text in ("<|wait|>", '<|call|>{"name": "x"'):
        ids = tokenizer.encode(text, add_special_tokens=False)
        for count in range(1, len(ids) + 1):
            policy._stream_speech(ids[:count])
    assert heard == []
