"""Time codecs, the tokenizer extension, the stored encoding and the chat template."""

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tiny_tokenizer import tiny_tokenizer
from transformers import AutoTokenizer

from clocktune.encoding import (
    FORMATS,
    MARKERS,
    AbsBinsCodec,
    Encoding,
    LogDeltaCodec,
    TextCodec,
    TimeCodec,
    extend_tokenizer,
    get_codec,
    get_format,
    init_marker_embeddings,
    load_encoding,
)
from clocktune.render import render, render_text, timeline_to_messages
from data_gen.config import GeneratorConfig
from data_gen.generate import generate_dialogue

CODEC_NAMES = ["text", "abs_bins", "log_delta"]
SECONDS = st.floats(min_value=0.0, max_value=7000.0, allow_nan=False)


@pytest.fixture(scope="module")
def timelines():
    return [generate_dialogue(i, 3, GeneratorConfig()) for i in range(8)] + [
        generate_dialogue(i, 3, GeneratorConfig(teacher="sync")) for i in range(4)
    ]


# --- codecs -------------------------------------------------------------------------------------------------------


@given(SECONDS, SECONDS)
def test_text_codec_round_trips_within_resolution(t, prev_t):
    codec = TextCodec()
    prev_t = min(t, prev_t)
    clock = codec.encode(t, prev_t)
    assert re.fullmatch(r"\[\d+\.\ds\]\n", clock)
    assert abs(codec.decode(clock) - t) <= 0.05 + 1e-6


@given(SECONDS)
def test_abs_bins_codec_round_trips_within_resolution(t):
    codec = AbsBinsCodec()
    clock = codec.encode(t)
    tokens = re.findall(r"<\|[^|]+\|>", clock)
    assert "".join(tokens) == clock and set(tokens) <= set(codec.special_tokens())
    # Below a minute the clock is one second-bin token; the minute token is the overflow form.
    assert len(tokens) == (1 if round(t / 0.1) < 600 else 2)
    assert abs(codec.decode(clock) - t) <= 0.05 + 1e-6


def test_abs_bins_overflow_and_saturation():
    codec = AbsBinsCodec(resolution=0.1, max_minutes=120)
    assert codec.encode(12.34) == "<|t_s123|>"
    assert codec.encode(59.97) == "<|t_m1|><|t_s0|>"  # rounds into the next minute
    assert codec.encode(3 * 60 + 12.3) == "<|t_m3|><|t_s123|>"
    assert codec.decode("<|t_m3|><|t_s123|>") == 192.3
    last = "<|t_m119|><|t_s599|>"
    assert codec.encode(120 * 60) == codec.encode(1e7) == last  # the bounded vocabulary saturates
    assert codec.decode(last) == pytest.approx(7199.9)
    assert len(codec.special_tokens()) == 600 + 119
    assert len(AbsBinsCodec(resolution=1.0, max_minutes=10).special_tokens()) == 60 + 9


@given(SECONDS, st.floats(min_value=0.0, max_value=200.0, allow_nan=False))
def test_log_delta_codec_round_trips_within_relative_resolution(prev_t, delta):
    codec = LogDeltaCodec()
    t = prev_t + delta
    clock = codec.encode(t, prev_t)
    assert clock in codec.special_tokens()
    decoded = codec.decode(clock, prev_t) - prev_t
    half_step = math.sqrt((60.0 / 0.02) ** (1 / 31))
    if delta < 0.02 / half_step:
        assert clock == "<|dt0|>" and decoded == 0.0
    elif delta > 60.0:
        assert clock == "<|dt32|>" and decoded == pytest.approx(60.0)
    else:
        assert decoded / (t - prev_t) == pytest.approx(1.0, abs=half_step - 1 + 1e-6)


def test_log_delta_bins():
    codec = LogDeltaCodec()
    assert len(codec.special_tokens()) == 33
    assert codec.encode(5.0, 5.0) == "<|dt0|>"
    assert codec.encode(5.02, 5.0) == "<|dt1|>"
    assert codec.decode("<|dt32|>", 10.0) == pytest.approx(70.0)
    assert codec.decode("<|dt1|>") == pytest.approx(0.02)


@pytest.mark.parametrize(
    "codec, clock",
    [
        (TextCodec(), "12.3s"),
        (TextCodec(), "[12.3s] junk"),
        (AbsBinsCodec(), "<|t_s600|>"),
        (AbsBinsCodec(), "<|t_m0|><|t_s1|>"),
        (AbsBinsCodec(), "<|t_m120|><|t_s1|>"),
        (AbsBinsCodec(), "<|t_s1|><|t_m1|>"),
        (LogDeltaCodec(), "<|dt33|>"),
        (LogDeltaCodec(), "<|t_s1|>"),
    ],
)
def test_decode_rejects_foreign_clocks(codec, clock):
    with pytest.raises(ValueError, match="clock"):
        codec.decode(clock)


@pytest.mark.parametrize("name", CODEC_NAMES)
def test_encode_rejects_negative_or_backward_times(name):
    codec = get_codec(name)
    with pytest.raises(ValueError, match="non-negative"):
        codec.encode(-1.0)
    with pytest.raises(ValueError, match="before the previous"):
        codec.encode(1.0, prev_t=2.0)


@pytest.mark.parametrize("codec", [TextCodec(decimals=2), AbsBinsCodec(0.5, 30), LogDeltaCodec(0.01, 30.0, 16)])
def test_codec_config_round_trips(codec):
    config = codec.to_dict()
    assert TimeCodec.from_dict(config) == codec
    assert get_codec(config.pop("name"), **config) == codec


def test_codec_config_errors():
    with pytest.raises(ValueError, match="unknown time codec"):
        TimeCodec.from_dict({"name": "sundial"})
    with pytest.raises(ValueError, match="bad parameters"):
        get_codec("abs_bins", step=0.1)
    with pytest.raises(ValueError, match="divide 60"):
        AbsBinsCodec(resolution=0.7)
    with pytest.raises(ValueError, match="min_s"):
        LogDeltaCodec(min_s=1.0, max_s=0.5)
    with pytest.raises(ValueError, match="unknown model format"):
        get_format("gpt2")


# --- tokenizer extension ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_format", sorted(FORMATS))
@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_extend_tokenizer_adds_single_special_tokens(model_format, codec):
    tokenizer = tiny_tokenizer(model_format)
    size = len(tokenizer)
    ids = extend_tokenizer(tokenizer, codec, model_format)
    encoding = load_encoding(tokenizer)
    tokens = encoding.special_tokens()
    assert encoding == Encoding(get_codec(codec), get_format(model_format))
    assert ids == tokenizer.convert_tokens_to_ids(tokens) and len(set(ids)) == len(tokens)
    assert len(tokenizer) == size + len(tokens) and min(ids) == size
    assert set(tokens) <= set(tokenizer.all_special_tokens)
    assert tokenizer("".join(tokens), add_special_tokens=False)["input_ids"] == ids
    # Idempotent: the same ids, nothing added.
    assert extend_tokenizer(tokenizer, codec, model_format) == ids and len(tokenizer) == size + len(tokens)


def test_extend_tokenizer_rejects_other_model_family():
    with pytest.raises(ValueError, match=re.escape("<|start_header_id|>")):
        extend_tokenizer(tiny_tokenizer("chatml"), "text", "llama3.2")


def test_unextended_tokenizer_has_no_encoding(timelines):
    tokenizer = tiny_tokenizer("qwen2.5")
    with pytest.raises(ValueError, match="extend_tokenizer"):
        load_encoding(tokenizer)
    with pytest.raises(ValueError, match="extend_tokenizer"):
        render(timelines[0], tokenizer)


@pytest.mark.parametrize("model_format", sorted(FORMATS))
@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_save_and_reload_recovers_encoding_and_ids(tmp_path, timelines, model_format, codec):
    tokenizer = tiny_tokenizer(model_format)
    ids = extend_tokenizer(tokenizer, codec, model_format)
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert load_encoding(reloaded) == load_encoding(tokenizer)
    assert reloaded.convert_tokens_to_ids(load_encoding(reloaded).special_tokens()) == ids
    for timeline in timelines[:4]:
        assert render(timeline, reloaded).to_dict() == render(timeline, tokenizer).to_dict()


@pytest.mark.parametrize("model_format", sorted(FORMATS))
@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_chat_template_renders_the_renderer_text(timelines, model_format, codec):
    tokenizer = tiny_tokenizer(model_format)
    extend_tokenizer(tokenizer, codec, model_format)
    encoding = load_encoding(tokenizer)
    fmt = encoding.model_format
    for timeline in timelines:
        messages = timeline_to_messages(timeline, encoding)
        text = render_text(timeline, encoding)
        assert tokenizer.apply_chat_template(messages, tokenize=False) == text
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert prompt == text + fmt.header("assistant")
        assert len(messages) == len(timeline.events) + 1 and messages[0]["role"] == "system"


# --- embeddings of the new tokens ---------------------------------------------------------------------------------


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("codec", ["abs_bins", "log_delta"])
def test_marker_rows_start_as_the_mean_of_their_names(codec, tied):
    import torch
    from tiny_models import TINY
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tiny_tokenizer("llama3.2")
    ids = extend_tokenizer(tokenizer, codec, "llama3.2")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), tie_word_embeddings=tied, **TINY))
    clocks_before = model.get_input_embeddings().weight[ids[len(MARKERS) :]].clone()
    assert init_marker_embeddings(model, tokenizer) == len(MARKERS)
    words = load_encoding(tokenizer).marker_words()
    assert words["<|commit|>"] == " commit" and list(words) == list(MARKERS)
    tables = [model.get_input_embeddings().weight, model.get_output_embeddings().weight]
    for token, text in words.items():
        word_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        for table in tables:
            torch.testing.assert_close(table[tokenizer.convert_tokens_to_ids(token)], table[word_ids].mean(dim=0))
    # Different names give different rows: the markers are told apart from the start. Clock rows are untouched.
    rows = tables[0][ids[: len(MARKERS)]]
    assert torch.cdist(rows, rows).fill_diagonal_(1.0).min() > 0
    torch.testing.assert_close(model.get_input_embeddings().weight[ids[len(MARKERS) :]], clocks_before)


def test_tokenizer_of_an_older_encoding_version_is_refused():
    tokenizer = tiny_tokenizer("chatml")
    extend_tokenizer(tokenizer, "abs_bins", "chatml")
    # A tokenizer extended before the state line existed: its model never saw one.
    tokenizer.chat_template = tokenizer.chat_template.replace('{"version":2,', '{"version":1,', 1)
    with pytest.raises(ValueError, match="version 1 .*extend the base model's tokenizer again"):
        load_encoding(tokenizer)
