"""Streaming attention masks: the visibility rule on packed random renderings, backend agreement, and logits of
packed rows equal to each rendering run alone on tiny Qwen2/Llama models under eager, sdpa and flex_attention."""

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention.flex_attention import BlockMask, create_mask
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
from transformers.modeling_flash_attention_utils import FlashAttentionKwargs, prepare_fa_kwargs_from_position_ids

from clocktune.collate import METADATA_KEYS, StreamingCollator, pack_best_fit
from clocktune.masks import (
    attention_inputs,
    build_block_mask,
    build_float_mask,
    is_block_causal,
    packed_position_ids,
    streaming_mask_mod,
)
from tests.tiny_models import TINY

VOCAB = 64


def make_rendering(events, num_sink, seed):
    """A rendering from `events`: (gap_s, num_tokens, source, hidden_after) tuples, after a sink prefix.

    `hidden_after=j` hides the event's tokens from the time of the j-th later event on (a superseded partial, a
    modified call's result); j = 0 is the next event, which may share the time (then they are hidden at once).
    """
    rng = random.Random(seed)
    times, now = [], 0.0
    for gap, *_ in events:
        now += gap
        times.append(now)
    rendering = {key: [] for key in ("input_ids", "labels", "time", "visible_until", "event_index", "sink")}

    def add(n, time, visible_until, event_index, sink, agent):
        ids = [rng.randrange(1, VOCAB) for _ in range(n)]
        rendering["input_ids"] += ids
        rendering["labels"] += ids if agent else [-100] * n
        rendering["time"] += [time] * n
        rendering["visible_until"] += [visible_until] * n
        rendering["event_index"] += [event_index] * n
        rendering["sink"] += [sink] * n

    add(num_sink, 0.0, math.inf, -1, True, False)
    for index, (_, num_tokens, source, hidden_after) in enumerate(events):
        later = index + 1 + hidden_after if hidden_after is not None else len(events)
        visible_until = times[later] if later < len(events) else math.inf
        add(num_tokens, times[index], visible_until, index, False, source == "agent")
    return rendering


EVENTS = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.3, 0.6, 1.0, 2.5]),
        st.integers(1, 5),
        st.sampled_from(["user", "agent", "tool"]),
        st.one_of(st.none(), st.integers(0, 2)),
    ),
    min_size=1,
    max_size=8,
)
RENDERINGS = st.lists(
    st.builds(make_rendering, EVENTS, st.integers(1, 4), st.integers(0, 2**16)), min_size=1, max_size=5
)


def reference_allowed(time, visible_until, sink, window_s):
    """The DESIGN §4 rule for one rendering alone, pair by pair: allowed[q][k]."""
    n = len(time)
    return [
        [
            k == q
            or (
                k < q and visible_until[k] > time[q] and (window_s is None or sink[k] or time[q] - time[k] <= window_s)
            )
            for k in range(n)
        ]
        for q in range(n)
    ]


def reference_float_mask(rendering, window_s):
    allowed = torch.tensor(
        reference_allowed(rendering["time"], rendering["visible_until"], rendering["sink"], window_s)
    )
    return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None]


def segment_spans(fields, renderings, max_length):
    """(rendering index, row, start, end) of every packed rendering, from the collator's documented numbering."""
    kept = [min(len(rendering["input_ids"]), max_length) for rendering in renderings]
    order = [item for row in pack_best_fit(kept, max_length) for item in row]
    spans = []
    for segment_id, item in enumerate(order):
        row, column = (fields["segment_ids"] == segment_id).nonzero(as_tuple=True)
        spans.append((item, int(row[0]), int(column[0]), int(column[-1]) + 1))
    return spans


@settings(max_examples=60, deadline=None)
@given(renderings=RENDERINGS, max_length=st.integers(16, 48), window_s=st.sampled_from([None, 0.5, 2.0]))
def test_packed_mask_obeys_the_streaming_rule(renderings, max_length, window_s):
    fields = StreamingCollator(max_length, 0)(renderings)
    time, visible_until, segment, sink = (fields[k] for k in ("time", "visible_until", "segment_ids", "sink"))
    mask = build_float_mask(time, visible_until, segment, sink, window_s)
    assert mask.shape == (*segment.shape[:1], 1, segment.shape[1], segment.shape[1])
    assert set(mask.unique().tolist()) <= {0.0, torch.finfo(torch.float32).min}
    allowed = mask[:, 0] == 0

    # Every row, padding included, attends to itself.
    assert allowed.diagonal(dim1=1, dim2=2).all()
    # Off the diagonal: same segment, earlier position, arrived no later, still visible, inside the window.
    row, q, k = (allowed & ~torch.eye(segment.shape[1], dtype=torch.bool)).nonzero(as_tuple=True)
    assert (segment[row, q] == segment[row, k]).all()
    assert (k < q).all()
    assert (time[row, k] <= time[row, q]).all()
    assert (visible_until[row, k] > time[row, q]).all()
    if window_s is not None:
        assert (sink[row, k] | (time[row, q] - time[row, k] <= window_s)).all()

    # Exactly the pairs the rule allows: each rendering's block equals its own mask, nothing else is allowed.
    expected = torch.eye(segment.shape[1], dtype=torch.bool).repeat(segment.shape[0], 1, 1)
    for item, r, start, end in segment_spans(fields, renderings, max_length):
        rendering = {key: value[: end - start] for key, value in renderings[item].items()}
        expected[r, start:end, start:end] = torch.tensor(
            reference_allowed(rendering["time"], rendering["visible_until"], rendering["sink"], window_s)
        )
        assert fields["input_ids"][r, start:end].tolist() == rendering["input_ids"]
    assert torch.equal(allowed, expected)

    # The flex BlockMask materialised from its own mask_mod on the full grid agrees exactly.
    block_mask = build_block_mask(time, visible_until, segment, sink, window_s)
    dense = create_mask(block_mask.mask_mod, segment.shape[0], 1, segment.shape[1], segment.shape[1], device="cpu")
    assert torch.equal(dense[:, 0], allowed)

    # With the first positions run beforehand as a cached prefix, both masks are the rows of the queries after it.
    length = segment.shape[1]
    for query_start in (1, length // 2, length - 1):
        rows = build_float_mask(time, visible_until, segment, sink, window_s, query_start=query_start)
        assert torch.equal(rows[:, 0] == 0, allowed[:, query_start:])
        block_mask = build_block_mask(time, visible_until, segment, sink, window_s, query_start=query_start)
        dense = create_mask(block_mask.mask_mod, segment.shape[0], 1, length - query_start, length, device="cpu")
        assert torch.equal(dense[:, 0], allowed[:, query_start:])


def test_block_mask_skips_only_empty_blocks():
    # Two 200-token segments in a 400-token row: the 128-blocks straddling both must stay, the far corner must not.
    segment = torch.tensor([[0] * 200 + [1] * 200])
    time = torch.arange(400, dtype=torch.float64)[None] / 10
    visible_until = torch.full_like(time, math.inf)
    visible_until[0, 5] = 3.0  # token 5 hidden from t = 3.0 (token 30) on
    block_mask = build_block_mask(time, visible_until, segment)
    assert isinstance(block_mask, BlockMask) and block_mask.shape == (1, 1, 400, 400)
    blocks = block_mask.to_dense()[0, 0].bool()
    allowed = build_float_mask(time, visible_until, segment)[0, 0] == 0
    for qb in range(blocks.shape[0]):
        for kb in range(blocks.shape[1]):
            tile = allowed[qb * 128 : (qb + 1) * 128, kb * 128 : (kb + 1) * 128]
            assert bool(blocks[qb, kb]) == bool(tile.any()), (qb, kb)
    assert not blocks[3, 0] and blocks[1, 0] and blocks[2, 1]


def test_window_keeps_sinks_and_hides_old_tokens():
    time = torch.tensor([[0.0, 0.0, 1.0, 2.0, 5.0]], dtype=torch.float64)
    visible_until = torch.full_like(time, math.inf)
    sink = torch.tensor([[True, False, False, False, False]])
    segment = torch.zeros(1, 5, dtype=torch.long)
    allowed = build_float_mask(time, visible_until, segment, sink, window_s=3.0)[0, 0] == 0
    # At t = 5 the last token sees the sink and the t = 2 token (3 s ago), not the t = 0 and t = 1 ones.
    assert allowed[4].tolist() == [True, False, False, True, True]
    assert allowed[3].tolist() == [True, True, True, True, False]


def test_position_ids_restart_per_segment():
    segment = torch.tensor([[3, 3, 3, 7, 7, 9], [0, 1, 1, 1, 1, 1]])
    assert packed_position_ids(segment).tolist() == [[0, 1, 2, 0, 1, 0], [0, 0, 1, 2, 3, 4]]


def test_is_block_causal():
    never = torch.full((2, 4), math.inf)
    assert is_block_causal(never, None)
    assert not is_block_causal(never, 10.0)
    hidden = never.clone()
    hidden[1, 2] = 4.0
    assert not is_block_causal(hidden, None)


def test_fast_path_for_flash_attention_matches_transformers_varlen_kwargs():
    fields = {
        "segment_ids": torch.tensor([[0, 0, 0, 1, 1, 4, 4, 4], [2, 2, 2, 2, 2, 3, 5, 5]]),
        "visible_until": torch.full((2, 8), math.inf),
    }
    inputs = attention_inputs(fields, "flash_attention_2")
    assert "attention_mask" not in inputs
    assert set(inputs) - {"position_ids"} == set(FlashAttentionKwargs.__annotations__)
    (cu_q, cu_k), (max_q, max_k) = prepare_fa_kwargs_from_position_ids(inputs["position_ids"])
    assert inputs["cu_seq_lens_q"].dtype == cu_q.dtype == torch.int32
    assert inputs["cu_seq_lens_q"].tolist() == cu_q.tolist() == [0, 3, 5, 8, 13, 14, 16]
    assert torch.equal(inputs["cu_seq_lens_k"], cu_k)
    assert inputs["max_length_q"] == inputs["max_length_k"] == int(max_q) == int(max_k) == 5
    assert set(attention_inputs(fields, "sdpa")) == {"position_ids"}


def test_flash_attention_refuses_hidden_tokens():
    fields = {
        "segment_ids": torch.zeros(1, 3, dtype=torch.long),
        "time": torch.zeros(1, 3),
        "visible_until": torch.tensor([[math.inf, 0.0, math.inf]]),
    }
    with pytest.raises(ValueError, match="flex_attention or sdpa"):
        attention_inputs(fields, "flash_attention_2")
    with pytest.raises(ValueError, match="unsupported"):
        attention_inputs(fields, "paged_attention")


def test_mask_mod_is_usable_with_broadcast_indices():
    # The same rule object serves flex (scalar indices) and dense construction (broadcast index tensors).
    time = torch.tensor([[0.0, 1.0, 2.0]], dtype=torch.float64)
    visible_until = torch.tensor([[1.5, math.inf, math.inf]], dtype=torch.float64)
    mask_mod = streaming_mask_mod(time, visible_until, torch.zeros(1, 3, dtype=torch.long))
    index = torch.arange(3)
    assert mask_mod(0, 0, index[:, None], index[None, :]).tolist() == [
        [True, False, False],
        [True, True, False],
        [False, True, True],
    ]


# ---- logits equivalence on tiny random models -------------------------------------------------------------------

MODEL_KWARGS = dict(vocab_size=VOCAB, **TINY)
MODELS = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request):
    config_class, model_class = MODELS[request.param]
    torch.manual_seed(0)
    return model_class(config_class(**MODEL_KWARGS, attn_implementation="eager")).eval()


def fixed_renderings(hidden):
    """Four renderings of 20-40 tokens with partials and results hidden (or nothing hidden)."""
    rng = random.Random(1)
    renderings = []
    for seed in range(4):
        events = [
            (rng.choice([0.0, 0.4, 1.1]), rng.randint(1, 5), rng.choice(["user", "agent", "tool"]), None)
            for _ in range(rng.randint(6, 10))
        ]
        if hidden:
            events[1] = (*events[1][:3], 0)
            events[3] = (*events[3][:3], 2)
        renderings.append(make_rendering(events, 3, seed))
    return renderings


def logits(model, attn_implementation, **inputs):
    model.config._attn_implementation = attn_implementation
    with torch.no_grad():
        return model(**inputs, use_cache=False).logits


@pytest.mark.parametrize("window_s", [None, 1.0])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa", "flex_attention"])
def test_packed_rows_equal_each_rendering_alone(model, attn_implementation, window_s):
    renderings = fixed_renderings(hidden=True)
    batch = StreamingCollator(64, 0)(renderings)
    # As the trainer does: pop the metadata, add the attention inputs built from it.
    inputs = attention_inputs(batch, attn_implementation, window_s)
    assert isinstance(inputs["attention_mask"], BlockMask if attn_implementation == "flex_attention" else torch.Tensor)
    model_kwargs = {k: v for k, v in batch.items() if k not in METADATA_KEYS}
    assert set(model_kwargs) == {"input_ids", "labels", "position_ids"}
    assert torch.equal(inputs["position_ids"], batch["position_ids"])
    packed = logits(model, attn_implementation, **{**model_kwargs, **inputs})

    spans = segment_spans(batch, renderings, 64)
    assert batch["input_ids"].shape[0] < len(renderings)  # really packed
    for item, row, start, end in spans:
        rendering = renderings[item]
        assert end - start == len(rendering["input_ids"])
        alone = logits(
            model,
            "eager",
            input_ids=torch.tensor([rendering["input_ids"]]),
            position_ids=torch.arange(end - start)[None],
            attention_mask=reference_float_mask(rendering, window_s),
        )
        assert (packed[row, start:end] - alone[0]).abs().max() < 1e-4


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_block_causal_fast_path_equals_dense_mask(model, attn_implementation):
    renderings = fixed_renderings(hidden=False)
    batch = StreamingCollator(64, 0)(renderings)
    assert set(attention_inputs(batch, attn_implementation)) == {"position_ids"}
    dense = build_float_mask(batch["time"], batch["visible_until"], batch["segment_ids"])
    fast = logits(model, attn_implementation, input_ids=batch["input_ids"], position_ids=batch["position_ids"])
    slow = logits(
        model,
        attn_implementation,
        input_ids=batch["input_ids"],
        position_ids=batch["position_ids"],
        attention_mask=dense,
    )
    real = batch["segment_ids"] < len(renderings)
    assert real.sum() < real.numel()  # there is padding to ignore
    assert (fast[real] - slow[real]).abs().max() < 1e-4
