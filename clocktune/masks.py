"""Streaming attention masks (DESIGN §4).

Token ``q`` may attend token ``k`` iff

    same packed segment  AND  k <= q  AND  visible_until[k] > time[q]
    AND (no window OR sink[k] OR time[q] - time[k] <= window_s)

or ``k == q``: every row, padding included, attends at least to itself, because a row that attends to nothing
gives NaN under SDPA. One ``mask_mod`` states this rule; the flex ``BlockMask`` and the additive float mask for
SDPA/eager are both evaluated from it, so the backends cannot drift apart. When no token is ever hidden and there is
no window, the rule is plain block-causal attention and :func:`attention_inputs` takes the fast path: no mask at all,
only ``position_ids`` restarting per segment (plus the varlen kwargs for FlashAttention).

All per-token inputs are ``[B, L]`` tensors on one device. Segments must be contiguous runs inside a row (the
collator guarantees it); pads are expected to carry ``time = visible_until = inf`` in a segment of their own, which
makes them see only themselves while leaving :func:`is_block_causal` untouched.

Masks are built where the batch lives, not in the collator: :class:`clocktune.collate.StreamingCollator` returns
the compact ``[B, L]`` fields and the trainer calls :func:`attention_inputs` on them on the device, in
``compute_loss``. A dense mask is ``L²`` per row against the collator's ``L``, and a ``BlockMask`` belongs on the GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask
from transformers.masking_utils import and_masks, causal_mask_function, or_masks, packed_sequence_mask_function

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _visible_function(time: torch.Tensor, visible_until: torch.Tensor) -> MaskMod:
    """k is still visible at q's time: superseded partials and modified results drop out here."""

    def inner(batch_idx, head_idx, q_idx, kv_idx):
        return visible_until[batch_idx, kv_idx] > time[batch_idx, q_idx]

    return inner


def _window_function(time: torch.Tensor, window_s: float) -> MaskMod:
    """k arrived at most ``window_s`` seconds before q."""

    def inner(batch_idx, head_idx, q_idx, kv_idx):
        return time[batch_idx, q_idx] - time[batch_idx, kv_idx] <= window_s

    return inner


def _sink_function(sink: torch.Tensor) -> MaskMod:
    """k is a sink (system prompt, tool schemas): exempt from the window, not from visibility."""

    def inner(batch_idx, head_idx, q_idx, kv_idx):
        return sink[batch_idx, kv_idx]

    return inner


def _diagonal_function(batch_idx, head_idx, q_idx, kv_idx):
    """Every row attends to itself, so no softmax row is empty."""
    return q_idx == kv_idx


def streaming_mask_mod(
    time: torch.Tensor,
    visible_until: torch.Tensor,
    segment: torch.Tensor,
    sink: torch.Tensor | None = None,
    window_s: float | None = None,
) -> MaskMod:
    """Build the streaming-attention rule as a flex_attention ``mask_mod``.

    The function indexes the captured ``[B, L]`` tensors with its arguments, so it works with scalar indices
    (flex_attention, ``create_mask`` under vmap) and with broadcastable index tensors alike.

    Args:
        time: ``[B, L]`` float, seconds at which each token's event entered the context; non-decreasing inside a
            segment.
        visible_until: ``[B, L]`` float, time from which the token is hidden (``inf`` if never).
        segment: ``[B, L]`` int, packed segment id of each token; contiguous runs.
        sink: ``[B, L]`` bool, tokens exempt from the window. Only read when ``window_s`` is set.
        window_s: optional attention window in seconds.

    Returns:
        ``mask_mod(batch_idx, head_idx, q_idx, kv_idx) -> bool tensor``, True where attention is allowed.
    """
    rule = [packed_sequence_mask_function(segment), causal_mask_function, _visible_function(time, visible_until)]
    if window_s is not None:
        window = _window_function(time, window_s)
        rule.append(window if sink is None else or_masks(_sink_function(sink), window))
    return or_masks(and_masks(*rule), _diagonal_function)


def is_block_causal(visible_until: torch.Tensor, window_s: float | None) -> bool:
    """Whether the streaming rule reduces to plain block-causal attention.

    Conservative: any finite ``visible_until`` counts as hidden, even if the segment ends before it takes effect.

    Args:
        visible_until: ``[B, L]`` float visibility deadlines.
        window_s: the attention window in seconds, or None.

    Returns:
        True when there is no window and no token is ever hidden.
    """
    return window_s is None and bool((visible_until == math.inf).all())


def packed_position_ids(segment: torch.Tensor) -> torch.Tensor:
    """Positions that restart at 0 at the start of every segment run.

    Args:
        segment: ``[B, L]`` int segment ids; each segment must be one contiguous run inside its row.

    Returns:
        ``[B, L]`` long tensor: index of each token inside its segment.
    """
    length = segment.shape[-1]
    index = torch.arange(length, device=segment.device).expand_as(segment)
    is_start = torch.ones_like(segment, dtype=torch.bool)
    is_start[:, 1:] = segment[:, 1:] != segment[:, :-1]
    # Running maximum of the start indices seen so far = start of the current run.
    run_start = torch.where(is_start, index, 0).cummax(dim=-1).values
    return index - run_start


def _segment_spans(segment: torch.Tensor) -> list[tuple[int, int, int]]:
    """``(row, start, end)`` of every segment run, in row-major order."""
    row, start = (packed_position_ids(segment) == 0).nonzero(as_tuple=True)
    length = segment.shape[-1]
    next_start = torch.cat([start[1:], start.new_tensor([length])])
    next_row = torch.cat([row[1:], row.new_tensor([-1])])
    end = torch.where(next_row == row, next_start, length)
    return list(zip(row.tolist(), start.tolist(), end.tolist(), strict=True))


def build_block_mask(
    time: torch.Tensor,
    visible_until: torch.Tensor,
    segment: torch.Tensor,
    sink: torch.Tensor | None = None,
    window_s: float | None = None,
    query_start: int = 0,
) -> BlockMask:
    """Flex-attention ``BlockMask`` of the streaming rule, on the device of ``segment``.

    ``create_block_mask`` evaluates the rule on the full ``[B, L, L]`` grid once (L**2 bytes per row, transient) to
    find the empty and full 128x128 blocks; the kernel then calls the ``mask_mod`` only on partial blocks.

    Args:
        time, visible_until, segment, sink, window_s: as in :func:`streaming_mask_mod`.
        query_start: queries are positions ``query_start..L-1`` (the first ones are a cached prefix); keys are all.

    Returns:
        A BlockMask of shape ``[B, 1, L - query_start, L]`` (broadcast over heads).
    """
    batch_size, length = segment.shape
    rule = streaming_mask_mod(time, visible_until, segment, sink, window_s)

    def mask_mod(batch_idx, head_idx, q_idx, kv_idx):
        return rule(batch_idx, head_idx, q_idx + query_start, kv_idx)

    return create_block_mask(mask_mod, batch_size, None, length - query_start, length, device=segment.device)


def build_float_mask(
    time: torch.Tensor,
    visible_until: torch.Tensor,
    segment: torch.Tensor,
    sink: torch.Tensor | None = None,
    window_s: float | None = None,
    dtype: torch.dtype = torch.float32,
    query_start: int = 0,
) -> torch.Tensor:
    """Additive 4D mask of the streaming rule for SDPA/eager (a bool mask is silently wrong under eager).

    Everything outside the diagonal segment blocks is blocked by the rule, so the mask starts fully blocked and the
    rule is evaluated, vectorised, only on each ``[n, n]`` segment block: one loop step per segment, never per token.

    Args:
        time, visible_until, segment, sink, window_s: as in :func:`streaming_mask_mod`.
        dtype: dtype of the attention scores it is added to.
        query_start: queries are positions ``query_start..L-1`` (the first ones are a cached prefix); keys are all.

    Returns:
        ``[B, 1, L - query_start, L]`` tensor: 0 where allowed, ``torch.finfo(dtype).min`` where blocked.
    """
    batch_size, length = segment.shape
    mask_mod = streaming_mask_mod(time, visible_until, segment, sink, window_s)
    shape = (batch_size, 1, length - query_start, length)
    mask = torch.full(shape, torch.finfo(dtype).min, dtype=dtype, device=segment.device)
    index = torch.arange(length, device=segment.device)
    for row, start, end in _segment_spans(segment):
        queries = index[max(start, query_start) : end]
        if queries.numel() == 0:
            continue
        keys = index[start:end]
        allowed = mask_mod(row, 0, queries[:, None], keys[None, :])
        mask[row, 0, queries[0] - query_start : end - query_start, start:end].masked_fill_(allowed, 0.0)
    return mask


def _varlen_kwargs(position_ids: torch.Tensor) -> dict[str, torch.Tensor | int]:
    """FlashAttention varlen kwargs (transformers 5 ``FlashAttentionKwargs`` names) over the flattened batch.

    transformers flattens ``[B, L]`` to ``[B * L]`` before ``flash_attn_varlen_func``, so the boundaries index the
    flattened sequence; the max lengths are Python ints because the varlen kernels want ints, not tensors.
    """
    flat = position_ids.reshape(-1)
    starts = (flat == 0).nonzero().view(-1).to(torch.int32)
    cu_seq_lens = torch.cat([starts, starts.new_tensor([flat.numel()])])
    max_length = int(cu_seq_lens.diff().max())
    return {
        "cu_seq_lens_q": cu_seq_lens,
        "cu_seq_lens_k": cu_seq_lens,
        "max_length_q": max_length,
        "max_length_k": max_length,
    }


def attention_inputs(
    batch_fields: Mapping[str, torch.Tensor],
    attn_implementation: str,
    window_s: float | None = None,
    dtype: torch.dtype = torch.float32,
    query_start: int = 0,
) -> dict[str, torch.Tensor | BlockMask | int]:
    """The attention-related model kwargs for one packed batch.

    Args:
        batch_fields: a :class:`~clocktune.collate.StreamingCollator` batch, or any mapping with the ``[B, L]``
            tensors ``segment_ids``, ``time``, ``visible_until`` and ``sink`` (``sink`` only read when ``window_s``
            is set), on the device the model runs on.
        attn_implementation: the model's ``config._attn_implementation``: ``eager``, ``sdpa``, ``flex_attention``
            or a FlashAttention flavour (any name containing ``flash``, the rule transformers itself uses).
        window_s: optional attention window in seconds.
        dtype: dtype of the float mask for eager/sdpa; must match the attention scores' dtype.
        query_start: the first ``query_start`` positions of every row are run beforehand as a cached prefix
            (``ClockSFTConfig.cache_prompt``); the mask then covers the queries after it, and is always explicit,
            because transformers cannot split packed documents from ``position_ids`` across a cache.

    Returns:
        ``position_ids`` always, for the whole row. Fast path (nothing hidden, no window, no cached prefix):
        nothing else for eager/sdpa/flex, whose transformers mask builders split documents on restarting
        ``position_ids`` when ``attention_mask`` is None (with ``use_cache=False``); ``cu_seq_lens_q/k`` and
        ``max_length_q/k`` for FlashAttention. Otherwise
        ``attention_mask``: a ``BlockMask`` for flex_attention, an additive ``[B, 1, L - query_start, L]`` float
        mask for eager/sdpa.

    Raises:
        ValueError: FlashAttention with hidden tokens, a window or a cached prefix (it cannot take an arbitrary
            mask), or an unknown implementation.
    """
    segment = batch_fields["segment_ids"]
    position_ids = packed_position_ids(segment)
    is_flash = "flash" in attn_implementation
    if query_start == 0 and is_block_causal(batch_fields["visible_until"], window_s):
        return {"position_ids": position_ids, **(_varlen_kwargs(position_ids) if is_flash else {})}
    if is_flash:
        raise ValueError(
            f"{attn_implementation} cannot apply streaming visibility, a window or a cached prompt; use "
            "flex_attention or sdpa"
        )
    rule_args = (batch_fields["time"], batch_fields["visible_until"], segment, batch_fields.get("sink"), window_s)
    if attn_implementation == "flex_attention":
        mask = build_block_mask(*rule_args, query_start=query_start)
    elif attn_implementation in ("eager", "sdpa"):
        mask = build_float_mask(*rule_args, dtype=dtype, query_start=query_start)
    else:
        raise ValueError(f"unsupported attn_implementation {attn_implementation!r}")
    return {"attention_mask": mask, "position_ids": position_ids}
