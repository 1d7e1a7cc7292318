"""The renderer and the action parser on generated timelines, for every model format and time codec: prefix
property, per-event vs whole-text tokenisation, labels, visibility, and parse(render) round trips."""

import dataclasses
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_tokenizer import tiny_tokenizer

from clocktune.actions import Action, ActionParseError, parse_action
from clocktune.encoding import FORMATS, MARKERS, extend_tokenizer, get_format, load_encoding
from clocktune.render import IGNORE_INDEX, Renderer, render, render_text
from clocktune.timeline.events import AGENT_KINDS, Event
from data_gen.config import GeneratorConfig
from data_gen.generate import generate_dialogue

COMBOS = [(fmt, codec) for fmt in sorted(FORMATS) for codec in ("text", "abs_bins", "log_delta")]


def _handmade(base):
    """Every event kind and visibility case once, and a clock past the first minute, on ``base``'s header."""
    e = Event
    events = [
        e("e0", 0.5, "user_chunk", "user", text="book a", final=False),
        e("e1", 0.5, "wait", "agent"),
        e("e2", 0.9, "user_chunk", "user", text="look up", final=False, revises="e0"),
        e("e3", 1.0, "tool_call", "agent", call_id="c1", name="lookup_order", arguments={"order_id": "ord5"}),
        e("e4", 1.6, "tool_result", "tool", call_id="c1", content={"id": "ord5", "status": "late"}),
        e("e5", 2.0, "user_chunk", "user", text="order 55", final=True),
        e("e6", 2.1, "tool_modify", "agent", call_id="c1", arguments={"order_id": "ord55"}),
        e("e7", 2.8, "tool_result", "tool", call_id="c1", content={"id": "ord55", "status": "shipped"}),
        e("e8", 2.9, "notice", "system", text="c2 is not a known call"),
        e("e9", 3.0, "tool_call", "agent", call_id="c2", name="list_orders", arguments={"ref": {"$ref": "c1.id"}}),
        e("e10", 3.5, "tool_result", "tool", call_id="c2", error="timeout"),
        e("e11", 3.6, "tool_cancel", "agent", call_id="c2"),
        e("e12", 3.7, "say", "agent", text="One moment.", final=False),
        e("e13", 3.8, "commit", "agent"),
        e("e14", 4.0, "say", "agent", text="Order 55 has shipped.", final=True),
        e("e15", 75.3, "user_chunk", "user", text="thanks", final=True),
        e("e16", 75.4, "say", "agent", text="You're welcome!", final=True),
    ]
    return dataclasses.replace(base, id="handmade", events=events)


@pytest.fixture(scope="module")
def timelines():
    speculative = [generate_dialogue(i, 0, GeneratorConfig()) for i in range(30)]
    sync = [generate_dialogue(i, 0, GeneratorConfig(teacher="sync")) for i in range(8)]
    support = next(t for t in speculative if t.domain == "customer_support")
    return [*speculative, *sync, _handmade(support)]


@pytest.fixture(scope="module")
def tokenizers():
    tokenizers = {}
    for fmt, codec in COMBOS:
        tokenizers[fmt, codec] = tiny_tokenizer(fmt)
        extend_tokenizer(tokenizers[fmt, codec], codec, fmt)
    return tokenizers


def _encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _spans(rendering):
    spans = {}
    for position, index in enumerate(rendering.event_index):
        spans.setdefault(index, [position, position])[1] = position + 1
    return spans


def _expected_visible_until(timeline):
    """Hiding times computed from the timeline alone, independently of the renderer."""
    until = {event.id: math.inf for event in timeline.events}
    for index, event in enumerate(timeline.events):
        if event.kind == "user_chunk" and event.revises:
            until[event.revises] = min(until[event.revises], event.t)
        if event.kind == "tool_result":
            later = (e for e in timeline.events[index + 1 :] if e.call_id == event.call_id)
            change = next((e for e in later if e.kind in ("tool_modify", "tool_cancel")), None)
            if change is not None:
                until[event.id] = change.t
    return until


@pytest.mark.parametrize("fmt, codec", COMBOS)
def test_incremental_equals_full_and_whole_text(timelines, tokenizers, fmt, codec):
    tokenizer = tokenizers[fmt, codec]
    encoding = load_encoding(tokenizer)
    for timeline in timelines:
        full = render(timeline, tokenizer)
        assert _encode(tokenizer, render_text(timeline, encoding)) == full.input_ids
        renderer = Renderer(tokenizer, timeline.tools)
        for event in timeline.events:
            prompt = renderer.prompt_for_action(event.t)
            ids = renderer.append(event)
            if event.kind in AGENT_KINDS:
                # What the runtime feeds, then what the model generates, then the tail: exactly the rendered ids.
                body = encoding.model_format.action_body(event) + encoding.model_format.end
                tail = _encode(tokenizer, encoding.model_format.tail)
                assert ids == prompt + _encode(tokenizer, body) + tail
        assert renderer.rendering.to_dict() == full.to_dict()


@pytest.mark.parametrize("fmt, codec", COMBOS)
@pytest.mark.parametrize("agent_clock_loss", [False, True])
def test_labels_cover_exactly_the_agent_tokens(timelines, tokenizers, fmt, codec, agent_clock_loss):
    tokenizer = tokenizers[fmt, codec]
    encoding = load_encoding(tokenizer)
    end_id = tokenizer.convert_tokens_to_ids(encoding.model_format.end)
    for timeline in timelines:
        rendering = render(timeline, tokenizer, fmt, agent_clock_loss=agent_clock_loss)
        assert len({len(column) for column in rendering.to_dict().values()}) == 1
        for index, (start, end) in _spans(rendering).items():
            labels, ids = rendering.labels[start:end], rendering.input_ids[start:end]
            if index < 0 or timeline.events[index].kind not in AGENT_KINDS:
                assert labels == [IGNORE_INDEX] * (end - start)
                continue
            event = timeline.events[index]
            target = _encode(tokenizer, encoding.model_format.action_body(event) + encoding.model_format.end)
            labelled = [label for label in labels if label != IGNORE_INDEX]
            clock = []
            if agent_clock_loss:
                prev_t = timeline.events[index - 1].t if index else 0.0
                clock = _encode(tokenizer, encoding.codec.encode(event.t, prev_t))
            assert labelled == clock + target and labelled[-1] == end_id
            # The action is one contiguous run of the message's own ids, after the header, the clock and the state
            # line (which the runtime writes), and before the tail.
            tail = _encode(tokenizer, encoding.model_format.tail)
            body_end = len(ids) - len(tail)
            body_start = body_end - len(target)
            assert labels[body_start:body_end] == ids[body_start:body_end] == target
            assert ids[body_end:] == tail and labels[body_end:] == [IGNORE_INDEX] * len(tail)
            assert sum(label != IGNORE_INDEX for label in labels[:body_start]) == len(clock)


@pytest.mark.parametrize("fmt, codec", COMBOS)
def test_metadata_and_visibility(timelines, tokenizers, fmt, codec):
    tokenizer = tokenizers[fmt, codec]
    for timeline in timelines:
        rendering = render(timeline, tokenizer)
        expected = _expected_visible_until(timeline)
        for position, index in enumerate(rendering.event_index):
            if index < 0:
                assert rendering.sink[position] and rendering.time[position] == 0.0
                assert rendering.visible_until[position] == math.inf
                continue
            event = timeline.events[index]
            assert not rendering.sink[position] and rendering.time[position] == event.t
            assert rendering.visible_until[position] == expected[event.id]
        assert rendering.event_index == sorted(rendering.event_index)
        assert set(rendering.event_index) == set(range(-1, len(timeline.events)))


def test_handmade_visibility(timelines, tokenizers):
    handmade = timelines[-1]
    rendering = render(handmade, tokenizers["chatml", "abs_bins"])
    hidden = {
        handmade.events[index].id: until
        for index, until in zip(rendering.event_index, rendering.visible_until, strict=True)
        if until != math.inf
    }
    # The revised partial from its reviser's time, the result superseded by the modify and the cancelled call's
    # error from the cancel's time; the result that arrived after the modify stays visible.
    assert hidden == {"e0": 0.9, "e4": 2.1, "e10": 3.6}
    assert "<|t_m1|><|t_s153|>thanks (final)" in render_text(handmade, load_encoding(tokenizers["chatml", "abs_bins"]))


def test_renderer_hide_and_format_checks(timelines, tokenizers):
    timeline = timelines[0]
    tokenizer = tokenizers["qwen2.5", "text"]
    renderer = Renderer(tokenizer, timeline.tools)
    renderer.extend(timeline.events[:3])
    renderer.hide(timeline.events[1].id, 5.0)
    renderer.hide(timeline.events[1].id, 9.0)  # a later time keeps the earlier hiding
    rendering = renderer.rendering
    assert {
        until for until, index in zip(rendering.visible_until, rendering.event_index, strict=True) if index == 1
    } == {5.0}
    with pytest.raises(ValueError, match="never appended"):
        renderer.hide("e999", 1.0)
    with pytest.raises(ValueError, match="model format 'qwen2.5', not 'llama3.2'"):
        render(timeline, tokenizer, "llama3.2")


@pytest.mark.parametrize("fmt, codec", COMBOS)
def test_parse_of_rendered_agent_spans_returns_the_actions(timelines, tokenizers, fmt, codec):
    tokenizer = tokenizers[fmt, codec]
    for timeline in timelines:
        rendering = render(timeline, tokenizer)
        for index, (start, end) in _spans(rendering).items():
            labelled = [label for label in rendering.labels[start:end] if label != IGNORE_INDEX]
            if index < 0 or not labelled:
                continue
            event = timeline.events[index]
            action = parse_action(tokenizer.decode(labelled, skip_special_tokens=False), fmt)
            assert action.to_event(event.id, event.t) == event


# --- action parser ------------------------------------------------------------------------------------------------

CALL_JSON = '{"name": "f", "arguments": {"a": 1}, "id": "c1"}'


@pytest.mark.parametrize(
    "fmt, text, message",
    [
        ("chatml", "<|wait|>", "missing end token"),
        ("chatml", "<|wait|><|im_end|>\n", "missing end token"),
        ("chatml", "<|wait|><|im_end|>x<|im_end|>", "unexpected <|im_end|>"),
        ("chatml", "<|wait|>now<|im_end|>", "unexpected text after <|wait|>"),
        ("chatml", "<|say|>hi<|commit|><|im_end|>", "unexpected <|commit|>"),
        ("chatml", "<|hum|><|im_end|>", "unknown marker '<|hum|>'"),
        ("qwen2.5", "<|call|>" + CALL_JSON + "<|im_end|>", "not an action of format 'qwen2.5'"),
        ("chatml", "<|say|><|im_end|>", "without words"),
        ("chatml", "hello<|im_end|>", "expected an action marker"),
        ("chatml", "<|cancel|><|im_end|>", "missing or malformed call id"),
        ("chatml", "<|cancel|>c1 please<|im_end|>", "missing or malformed call id"),
        ("chatml", '<|call|>{"name": "f", "arguments": {}}<|im_end|>', "keys"),
        ("chatml", '<|call|>{"name": "f", "arguments": {}, "id": 3}<|im_end|>', "call id"),
        ("chatml", '<|call|>{"name": "", "arguments": {}, "id": "c1"}<|im_end|>', "tool name"),
        ("chatml", '<|call|>{"name": "f", "arguments": [], "id": "c1"}<|im_end|>', "must be a JSON object"),
        ("chatml", '<|call|>{"name": "f", "arguments": {}, "id": "c1"} ok<|im_end|>', "bad JSON"),
        ("chatml", '<|call|>{"name": "f", "arguments": {"a": NaN}, "id": "c1"}<|im_end|>', "bad JSON"),
        ("chatml", '<|call|>{"name": "f", "name": "g", "arguments": {}, "id": "c1"}<|im_end|>', "bad JSON"),
        ("chatml", "<|modify|>" + CALL_JSON + "<|im_end|>", "keys"),
        ("qwen2.5", "<tool_call>\n" + CALL_JSON + "<|im_end|>", "missing '\\n</tool_call>'"),
        ("qwen2.5", "<tool_call>\n" + CALL_JSON + "\n</tool_call>\nok<|im_end|>", "missing"),
        ("llama3.2", CALL_JSON + "<|eot_id|>", "keys"),  # llama's calls say "parameters"
        ("llama3.2", "Sure!<|eot_id|>", "expected an action marker"),
        ("llama3.2", "[" * 5000 + "<|eot_id|>", "expected an action marker"),
        ("llama3.2", "{" * 5000 + "<|eot_id|>", "bad JSON"),
        ("llama3.2", '{"a": ' * 100000 + "<|eot_id|>", "bad JSON"),
    ],
)
def test_malformed_actions_are_rejected_with_a_clear_message(fmt, text, message):
    with pytest.raises(ActionParseError, match=re.escape(message)):
        parse_action(text, fmt)


@pytest.mark.parametrize(
    "fmt, text, action",
    [
        (
            "qwen2.5",
            "<tool_call>\n" + CALL_JSON + "\n</tool_call><|im_end|>",
            Action("tool_call", "c1", "f", {"a": 1}),
        ),
        ("llama3.2", '{"id": "c1", "parameters": {}, "name": "f"}<|eot_id|>', Action("tool_call", "c1", "f", {})),
        (
            "chatml",
            '<|modify|>{"id": "c2", "arguments": {"b": null}}<|im_end|>',
            Action("tool_modify", "c2", None, {"b": None}),
        ),
        ("chatml", "<|cancel|>c3<|im_end|>", Action("tool_cancel", "c3")),
        ("chatml", "<|answer|> It is 5. <|im_end|>", Action("say", text=" It is 5. ", final=True)),
        ("chatml", "<|commit|><|im_end|>", Action("commit")),
    ],
)
def test_well_formed_actions_parse(fmt, text, action):
    assert parse_action(text, fmt) == action


FRAGMENTS = st.sampled_from(
    [*MARKERS, "<|call|>", "<|im_end|>", "<|eot_id|>", "<|im_start|>", "<tool_call>\n", "\n</tool_call>", "{", "}",
     '"name": "f"', '"id": "c1"', '"arguments": {}', '"parameters": {}', ", ", "c1", "[", "]", "null", "NaN", " "]
)  # fmt: skip
TEXTS = st.one_of(st.text(), st.lists(st.one_of(FRAGMENTS, st.text(max_size=3)), max_size=12).map("".join))


@settings(max_examples=400, deadline=None)
@given(TEXTS, st.sampled_from(sorted(FORMATS)))
def test_parser_raises_only_action_parse_errors(text, fmt):
    for candidate in (text, text + get_format(fmt).end):
        try:
            action = parse_action(candidate, fmt)
        except ActionParseError:
            continue
        assert action.kind in AGENT_KINDS


CALL_IDS = st.from_regex(r"[a-z][0-9a-z_]{0,6}", fullmatch=True)
# Free text without special-token markup, which the tokenizer would split off and the parser rejects.
PLAIN = st.text().filter(lambda text: "<|" not in text)
WORDS = PLAIN.filter(bool)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | PLAIN,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(PLAIN, children, max_size=3),
    max_leaves=8,
)
ACTIONS = st.one_of(
    st.builds(
        lambda i, n, a: Event("x", 0.0, "tool_call", "agent", call_id=i, name=n, arguments=a),
        CALL_IDS,
        WORDS,
        st.dictionaries(PLAIN, JSON, max_size=3),
    ),
    st.builds(
        lambda i, a: Event("x", 0.0, "tool_modify", "agent", call_id=i, arguments=a),
        CALL_IDS,
        st.dictionaries(PLAIN, JSON, max_size=3),
    ),
    st.builds(lambda i: Event("x", 0.0, "tool_cancel", "agent", call_id=i), CALL_IDS),
    st.builds(lambda w, f: Event("x", 0.0, "say", "agent", text=w, final=f), WORDS, st.booleans()),
    st.sampled_from([Event("x", 0.0, "wait", "agent"), Event("x", 0.0, "commit", "agent")]),
)


@settings(max_examples=300, deadline=None)
@given(ACTIONS, st.sampled_from(sorted(FORMATS)))
def test_parse_inverts_the_rendered_action_body(event, fmt):
    model_format = get_format(fmt)
    parsed = parse_action(model_format.action_body(event) + model_format.end, fmt)
    assert parsed.to_event(event.id, event.t) == event
