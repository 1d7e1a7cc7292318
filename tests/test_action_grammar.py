"""Constrained actions: the grammar allows every action the teacher wrote and nothing the session would reject, an
untrained model under it writes only valid actions, and the constraint only ever removes tokens."""

from collections import Counter

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from clocktune.actions import parse_action
from clocktune.clock import DeviceProfile
from clocktune.encoding import extend_tokenizer, get_codec, get_format
from clocktune.runtime.action_grammar import CallBook, action_grammar, start_matcher
from clocktune.runtime.model_policy import ModelPolicy
from clocktune.runtime.play import run_policy
from clocktune.runtime.session import SessionConfig
from clocktune.timeline.events import AGENT_KINDS, Event
from data_gen.backends import make_backend
from tests.tiny_models import TINY
from tests.tiny_tokenizer import tiny_tokenizer

FORMATS = ("chatml", "qwen2.5", "llama3.2")


def _extended(model_format: str):
    tokenizer = tiny_tokenizer(model_format)
    extend_tokenizer(tokenizer, get_codec("abs_bins"), model_format)
    return tokenizer


@pytest.fixture(scope="module")
def tokenizers():
    return {name: _extended(name) for name in FORMATS}


@pytest.fixture(scope="module")
def tiny_chatml_model(tokenizers):
    tokenizer = tokenizers["chatml"]
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=8192, **TINY)).eval()
    model.config._attn_implementation = "sdpa"
    return model, tokenizer


def _book(timeline, events=()) -> CallBook:
    calls = CallBook({tool.name: tool.side_effect for tool in timeline.tools})
    for event in events:
        calls.update(event)
    return calls


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _replay_teacher(timelines, tokenizer, fmt) -> Counter:
    # Every agent action of each timeline, written as the renderer writes it, must be a path through the grammar of
    # the state before it, ending in an accepting state.
    checked: Counter = Counter()
    for timeline in timelines:
        grammar = action_grammar(tokenizer, fmt, timeline.tools)
        calls = _book(timeline)
        for event in timeline.events:
            if event.kind in AGENT_KINDS:
                text = fmt.action_body(event) + fmt.end
                matcher = start_matcher(tokenizer, grammar, calls)
                for token in _ids(tokenizer, text):
                    assert matcher.allows(token), f"{timeline.id} {event.id}: {text!r} stops at {token}"
                    matcher.advance(token)
                assert matcher.is_accepting(), f"{timeline.id} {event.id}: {text!r} is not a whole action"
                checked[event.kind] += 1
            calls.update(event)
    return checked


@pytest.mark.parametrize("model_format", FORMATS)
def test_grammar_allows_every_action_the_teacher_wrote(generated, tokenizers, model_format):
    speculative, sync = generated
    checked = _replay_teacher(speculative[:60] + sync[:15], tokenizers[model_format], get_format(model_format))
    assert checked["tool_call"] > 50 and checked["tool_modify"] > 0 and checked["tool_cancel"] > 0
    assert checked["commit"] > 0 and checked["say"] > 50 and checked["wait"] > 50


def test_grammar_allows_the_bfcl_teacher_actions(tokenizers, tmp_path):
    from tests.test_bfcl import FIXTURE, _installed

    if not _installed():
        pytest.skip("bfcl-eval is not installed (run `make bfcl`)")
    from clocktune.timeline import read_timelines
    from data_gen.importers.bfcl import import_bfcl

    result = import_bfcl("multi_turn_base", tmp_path, seed=0, data_dir=FIXTURE)
    timelines = list(read_timelines(result["path"]))
    checked = _replay_teacher(timelines, tokenizers["chatml"], get_format("chatml"))
    assert checked["tool_call"] > 3


# What the mask forbids --------------------------------------------------------------------------------------


def _walk_to_divergence(tokenizer, matcher, text: str, diverge_at: int) -> None:
    """Feeds ``text``'s tokens while they stay in its first ``diverge_at`` characters (a valid prefix): each must be
    allowed; the first token that reaches past them must be forbidden by the mask."""
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    vocab = len(tokenizer)
    for token, (_, end) in zip(encoded["input_ids"], encoded["offset_mapping"], strict=True):
        mask = matcher.mask(vocab)
        if end <= diverge_at:
            assert mask[token], f"{text[:end]!r} should still be allowed"
            matcher.advance(token)
            continue
        assert not mask[token], f"{text[:end]!r} should be impossible"
        assert not matcher.allows(token)
        return
    raise AssertionError(f"{text!r} never reached its divergence at {diverge_at}")


@pytest.fixture(scope="module")
def shopping(generated):
    # A generated dialogue of the shopping domain, in the state after its first two calls.
    timeline = next(t for t in generated[0] if t.domain == "shopping")
    return timeline


def test_mask_forbids_unknown_tools_keys_types_and_call_ids(tokenizers, shopping):
    tokenizer = tokenizers["chatml"]
    fmt = get_format("chatml")
    grammar = action_grammar(tokenizer, fmt, shopping.tools)
    calls = _book(shopping)
    for index, name in enumerate(["search_products", "get_product"]):
        arguments = {"category": "keyboard"} if index == 0 else {"product_id": "x"}
        calls.update(
            Event(f"e{index}", 1.0, "tool_call", "agent", call_id=f"c{index + 1}", name=name, arguments=arguments)
        )
    names = {tool.name for tool in shopping.tools}
    assert "search_products" in names and not any(name.startswith("z") for name in names)

    def check(text: str, bad: str, offset: int = 0) -> None:
        _walk_to_divergence(tokenizer, start_matcher(tokenizer, grammar, calls), text, text.index(bad) + offset)

    # A tool the schema does not have: impossible from the first character no tool name shares.
    check('<|call|>{"name": "zap_everything", "arguments": {}, "id": "c3"}<|im_end|>', "zap")
    # An unknown argument key (search_products takes category, max_price).
    check('<|call|>{"name": "search_products", "arguments": {"zone": "x"}, "id": "c3"}<|im_end|>', "zone")
    # A wrong type: category is a string enum, not a number; quantity an integer, not a string.
    check('<|call|>{"name": "search_products", "arguments": {"category": 7}, "id": "c3"}<|im_end|>', "7")
    check(
        '<|call|>{"name": "add_to_cart", "arguments": {"product_id": "a", "quantity": "two"}, "id": "c3"}<|im_end|>',
        '"two',
    )
    # An enum value the schema does not list.
    check('<|call|>{"name": "search_products", "arguments": {"category": "zebras"}, "id": "c3"}<|im_end|>', "zebras")
    # Cancel or modify of a call id never issued; a new call under a used id; a $ref to a call that does not exist.
    check("<|cancel|>c9<|im_end|>", "9")
    check('<|modify|>{"id": "c7", "arguments": {}}<|im_end|>', "7")
    check('<|call|>{"name": "view_cart", "arguments": {}, "id": "c1"}<|im_end|>', '1"}')
    check(
        '<|call|>{"name": "get_product", "arguments": {"product_id": {"$ref": "c5.results"}}, "id": "c3"}<|im_end|>',
        "5.",
    )
    # Commit and answer wait for the user's final chunk; a say needs words; no control token inside the words.
    check("<|commit|><|im_end|>", "<|commit|>")
    check("<|answer|>done<|im_end|>", "<|answer|>")
    check("<|say|><|im_end|>", "<|im_end|>")
    check("<|say|>one <|wai<|im_end|>", "<|wai", offset=1)  # "<" may be said, "<|" never

    # Once the call is cancelled, neither it nor a reference to it is possible; after the final chunk, commit is.
    calls.update(Event("e2", 2.0, "tool_cancel", "agent", call_id="c1"))
    check("<|cancel|>c1<|im_end|>", "1")
    check('<|call|>{"name": "get_product", "arguments": {"product_id": {"$ref": "c1"}}, "id": "c3"}<|im_end|>', '1"}')
    calls.update(Event("e3", 3.0, "user_chunk", "user", text="that's all", final=True))
    for text in ("<|commit|><|im_end|>", "<|answer|>done<|im_end|>", "<|cancel|>c2<|im_end|>"):
        matcher = start_matcher(tokenizer, grammar, calls)
        for token in _ids(tokenizer, text):
            matcher.advance(token)
        assert matcher.is_accepting()


def test_greedy_choice_is_the_argmax_whenever_the_grammar_allows_it(tokenizers, shopping):
    tokenizer = tokenizers["chatml"]
    grammar = action_grammar(tokenizer, get_format("chatml"), shopping.tools)
    calls = _book(shopping, [Event("e0", 1.0, "user_chunk", "user", text="buy it", final=True)])
    path = _ids(
        tokenizer, '<|call|>{"name": "add_to_cart", "arguments": {"product_id": "x", "quantity": 2}, "id": "c1"}'
    )
    matcher = start_matcher(tokenizer, grammar, calls)
    generator = torch.Generator().manual_seed(0)
    kept = removed = 0
    for step_token in path:
        # What may come next: any token that keeps the text an action prefix. llguidance's mask is a subset of it
        # (at forced text it keeps only the canonical spelling), and the choice falls back to the mask.
        allowed = torch.tensor([matcher.allows(token) for token in range(len(tokenizer))])
        mask = matcher.mask(len(tokenizer))
        assert not (mask & ~allowed).any() and mask.any()
        for trial in range(20):
            logits = torch.randn(len(tokenizer), generator=generator)
            if trial % 2:
                logits[int(torch.nonzero(allowed)[0])] += 100.0  # half the time the argmax itself is allowed
            chosen = matcher.choose(logits)
            top = int(logits.argmax())
            assert allowed[chosen]
            if allowed[top]:
                assert chosen == top
                kept += 1
            else:
                assert chosen == int(logits.masked_fill(~mask, float("-inf")).argmax())
                removed += 1
        matcher.advance(step_token)
    assert kept > 0 and removed > 0


def test_wrap_up_closes_an_action_that_outruns_its_budget(tokenizers, shopping):
    # A model stuck writing "a" forever inside a string argument still ends with a whole, parsable call.
    tokenizer = tokenizers["chatml"]
    fmt = get_format("chatml")
    matcher = start_matcher(tokenizer, action_grammar(tokenizer, fmt, shopping.tools), _book(shopping))
    written = _ids(tokenizer, '<|call|>{"name": "get_product", "arguments": {"product_id": "')
    for token in written:
        matcher.advance(token)
    stuck = _ids(tokenizer, "a")[0]
    end_id = _ids(tokenizer, fmt.end)[0]
    for _ in range(10):
        logits = torch.zeros(len(tokenizer))
        logits[stuck] = 10.0
        token = matcher.choose(logits)
        assert token == stuck
        matcher.advance(token)
        written.append(token)
    for _ in range(32):
        logits = torch.zeros(len(tokenizer))
        logits[stuck] = 10.0
        token = matcher.choose_closing(logits)
        matcher.advance(token)
        written.append(token)
        if token == end_id:
            break
    action = parse_action(tokenizer.decode(written, skip_special_tokens=False), fmt)
    assert action.kind == "tool_call" and action.name == "get_product" and action.call_id == "c1"
    assert action.arguments == {"product_id": "a" * 10}


# Live -------------------------------------------------------------------------------------------------------


def test_untrained_model_writes_only_valid_actions_under_the_grammar(generated, tiny_chatml_model):
    model, tokenizer = tiny_chatml_model
    # Slow decoding on the virtual clock: a model that never answers reaches the turn limit in a few dozen actions.
    config = SessionConfig(max_notices=6, turn_limit_s=5.0, device=DeviceProfile("slow", 1e5, 40.0, 0.0))
    timelines = generated[0][:2]

    def play(constrained: bool) -> tuple[int, Counter]:
        def factory(timeline):
            return ModelPolicy(model, tokenizer, timeline, max_new_tokens=24, constrained=constrained)

        run = run_policy("tiny", timelines, factory, make_backend, config)
        events = [event for log in run.logs for event in log.timeline.events]
        invalid = sum(event.kind == "notice" and event.text.startswith("invalid action") for event in events)
        return invalid, Counter(event.kind for event in events if event.kind in AGENT_KINDS)

    invalid, actions = play(constrained=True)
    assert invalid == 0 and sum(actions.values()) > 0, actions
    unconstrained_invalid, _ = play(constrained=False)
    assert unconstrained_invalid > 0


def test_a_model_plays_under_the_grammar_unless_told_not_to(generated, tiny_chatml_model, tmp_path):
    from clocktune.cli.demo import make_parser as demo_parser
    from clocktune.cli.main import build_parser
    from clocktune.runtime.policy_factories import policy_factory
    from clocktune.train.config import ClockSFTConfig

    timeline = generated[0][0]
    assert ModelPolicy(*tiny_chatml_model, timeline).grammar is not None
    assert policy_factory("tiny", loaded=tiny_chatml_model)(timeline).grammar is not None
    assert policy_factory("tiny", loaded=tiny_chatml_model, constrained=False)(timeline).grammar is None
    out = str(tmp_path / "out")
    for command in (["eval", "--data", "d", "--out", out], ["rollout", "--model", "m", "--data", "d", "--out", out]):
        assert build_parser().parse_args(command).constrained is True
        assert build_parser().parse_args([*command, "--no-constrained"]).constrained is False
    assert demo_parser().parse_args([]).constrained is True
    assert ClockSFTConfig(output_dir="unused", use_cpu=True).constrained_decoding is True
