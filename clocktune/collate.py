"""Packing collator for rendered timelines.

A rendering is a dict of equal-length per-token lists: ``input_ids``, ``labels`` (-100 where no loss), ``time``,
``visible_until`` (``inf`` when never hidden), ``sink`` and optionally ``action`` (index into
``clocktune.rendered_dataset.ACTION_TYPES``, 0 when absent); other keys (e.g. ``event_index``, ``timeline_id``) are
ignored. :class:`StreamingCollator` packs renderings into rows with best-fit decreasing and pads the rows.

It returns compact ``[R, W]`` per-token fields, not attention masks: a dense ``[R, 1, W, W]`` mask costs ``W²`` per
row (94% of collate time when it was built here) and a flex ``BlockMask`` must be built on the GPU anyway. The
trainer builds the mask where the batch lives, with :func:`clocktune.masks.attention_inputs` on these fields.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import torch

from clocktune.masks import packed_position_ids

IGNORE_INDEX = -100

# Keys of the collator's output that are not model kwargs: the inputs of ``attention_inputs`` and per-token
# bookkeeping. Pop them before ``model(**batch)``.
METADATA_KEYS = ("segment_ids", "time", "visible_until", "sink", "action", "num_loss_tokens", "packing_efficiency")

# Per-token fields read from a rendering and the dtype they are packed to; `action` is optional.
_FIELD_DTYPES = {
    "input_ids": torch.long,
    "labels": torch.long,
    "time": torch.float64,
    "visible_until": torch.float64,
    "sink": torch.bool,
    "action": torch.int8,
}
# Padding of every field but `input_ids` (the collator's pad_token_id). Pads arrive "at the end of time"
# (time = inf) and are hidden from then on (visible_until = inf is not > inf): in their own segment they see only
# themselves, and visible_until = inf keeps the block-causal fast path. Action 0 is "none".
_PAD_VALUES = {"labels": IGNORE_INDEX, "time": math.inf, "visible_until": math.inf, "sink": False, "action": 0}
_REQUIRED = ("input_ids", "labels", "time", "visible_until", "sink")


def pack_best_fit(lengths: Sequence[int], max_length: int) -> list[list[int]]:
    """Best-fit-decreasing bin packing of sequence lengths into rows of ``max_length``.

    Deterministic: items go longest first (ties by index) into the fullest row that still fits them (ties by the
    earliest row). An item is never split; one longer than ``max_length`` counts as ``max_length`` (it will be
    truncated) and so fills a row alone. TRL's ``_pack_bfd`` is private and works on pyarrow tables, so it is not
    reused here.

    Args:
        lengths: length of each item, all >= 1.
        max_length: capacity of a row.

    Returns:
        Rows as lists of item indices, in the order rows were opened and items placed.
    """
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    if any(length < 1 for length in lengths):
        raise ValueError("every item must have at least one token")
    sizes = [min(length, max_length) for length in lengths]
    rows: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (space left, row index) of rows with space, sorted
    for item in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        size = sizes[item]
        slot = bisect_left(free, (size, -1))  # smallest space >= size, then lowest row index
        if slot == len(free):
            rows.append([item])
            space, row = max_length - size, len(rows) - 1
        else:
            space, row = free.pop(slot)
            rows[row].append(item)
            space -= size
        if space > 0:
            insort(free, (space, row))
    return rows


@dataclass
class StreamingCollator:
    """Collate renderings into packed, padded rows of per-token fields.

    Truncation: a rendering longer than ``max_length`` keeps its first ``max_length`` tokens. Events only ever see
    earlier events, so every kept agent token keeps everything it could attend to, and its loss is unchanged.

    Attributes:
        max_length: row capacity in tokens.
        pad_token_id: id written into padding.
        pack: pack several renderings per row (best-fit decreasing); otherwise one rendering per row.
        pad_to_multiple_of: round the padded width up to a multiple of this (e.g. 128 to limit flex recompiles).
    """

    max_length: int
    pad_token_id: int
    pack: bool = True
    pad_to_multiple_of: int = 1

    def __call__(self, features: Sequence[Mapping[str, Sequence]]) -> dict[str, Any]:
        """Pack and pad renderings.

        Args:
            features: renderings (see the module docstring).

        Returns:
            ``[R, W]`` tensors ``input_ids``, ``labels``, ``position_ids`` (model kwargs) and ``segment_ids``,
            ``time``, ``visible_until``, ``sink``, ``action`` (the inputs of
            :func:`clocktune.masks.attention_inputs` and of per-action metrics), plus the scalars
            ``num_loss_tokens`` (labels that enter the loss) and ``packing_efficiency`` (real tokens / ``R * W``).
            Pop :data:`METADATA_KEYS` before calling the model.

            Segment ids number the renderings in row-major order; the padding of row ``r`` is one more segment,
            ``len(features) + r``. Pads carry ``pad_token_id``, label -100, ``time = visible_until = inf``, no
            sink and action 0. The first label of each segment is -100: the causal-LM shift would otherwise make
            the previous segment's last token predict it, and run alone it is never a target.

        Raises:
            ValueError: When a rendering's per-token fields differ in length or its time decreases.
        """
        lengths = [len(feature["input_ids"]) for feature in features]
        for feature, length in zip(features, lengths, strict=True):
            if any(len(feature[key]) != length for key in _FIELD_DTYPES if key in feature or key in _REQUIRED):
                raise ValueError(f"per-token fields {list(_FIELD_DTYPES)} must have equal lengths")
        kept = [min(length, self.max_length) for length in lengths]
        rows = pack_best_fit(kept, self.max_length) if self.pack else [[i] for i in range(len(features))]
        order = [item for row in rows for item in row]
        longest_row = max(sum(kept[item] for item in row) for row in rows)
        width = -(-longest_row // self.pad_to_multiple_of) * self.pad_to_multiple_of

        # Scatter every kept token into the flattened [R * W] grid with one indexing op per field.
        token_start = []  # flat index of each item's first token, in `order`
        for row_index, row in enumerate(rows):
            offset = row_index * width
            for item in row:
                token_start.append(offset)
                offset += kept[item]
        kept_in_order = torch.tensor([kept[item] for item in order])
        first_token = torch.cumsum(kept_in_order, 0) - kept_in_order  # index of each item's first token in `values`
        flat_index = torch.repeat_interleave(torch.tensor(token_start) - first_token, kept_in_order)
        flat_index += torch.arange(flat_index.numel())

        pad_values = {"input_ids": self.pad_token_id, **_PAD_VALUES}
        batch: dict[str, Any] = {}
        for key, dtype in _FIELD_DTYPES.items():
            grid = torch.full((len(rows) * width,), pad_values[key], dtype=dtype)
            if key in _REQUIRED or any(key in features[item] for item in order):
                # A rendering without `action` (e.g. straight from clocktune.render) gets action 0, "none".
                values = chain.from_iterable(
                    features[item][key][: kept[item]] if key in features[item] else [0] * kept[item] for item in order
                )
                grid[flat_index] = torch.tensor(list(values), dtype=dtype)
            batch[key] = grid.view(len(rows), width)

        segment = torch.repeat_interleave(len(features) + torch.arange(len(rows)), width)
        segment[flat_index] = torch.repeat_interleave(torch.arange(len(order)), kept_in_order)
        batch["segment_ids"] = segment.view(len(rows), width)
        batch["position_ids"] = packed_position_ids(batch["segment_ids"])
        batch["labels"][batch["position_ids"] == 0] = IGNORE_INDEX

        # The mask's "k <= q" stands for "k had arrived by q's time" only if time never decreases in a segment.
        same_segment = batch["segment_ids"][:, 1:] == batch["segment_ids"][:, :-1]
        if (same_segment & (batch["time"][:, 1:] < batch["time"][:, :-1])).any():
            raise ValueError("time must be non-decreasing along each rendering")

        batch["num_loss_tokens"] = (batch["labels"] != IGNORE_INDEX).sum()
        batch["packing_efficiency"] = torch.tensor(sum(kept) / (len(rows) * width))
        return batch
