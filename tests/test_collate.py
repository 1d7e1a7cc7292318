"""The packing collator: best-fit-decreasing packing, prefix truncation, consistent padding, determinism, and the
attention inputs built from its compact per-token fields."""

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from clocktune.collate import IGNORE_INDEX, METADATA_KEYS, StreamingCollator, pack_best_fit
from clocktune.masks import attention_inputs

PAD = 0
PER_TOKEN = ("input_ids", "labels", "time", "visible_until", "sink", "action")


def rendering(length, seed, hidden=False):
    """A synthetic rendering: 2 sink tokens, then events of 3 tokens at rising times; every 4th label is trained
    (with action 1 + i % 5), and with `hidden` the first event after the prefix is hidden from t = 1.0 on. Token ids
    are seed * 1000 + i, so a packed token names its rendering and index."""
    rng = random.Random(seed)
    time = [0.0] * min(length, 2) + [0.5 * (1 + i // 3) for i in range(max(length - 2, 0))]
    return {
        "input_ids": [seed * 1000 + i for i in range(length)],
        "labels": [rng.randrange(1, 1000) if i % 4 == 3 else IGNORE_INDEX for i in range(length)],
        "time": time,
        "visible_until": [1.0 if hidden and 2 <= i < 5 else math.inf for i in range(length)],
        "event_index": [-1 if i < 2 else (i - 2) // 3 for i in range(length)],
        "sink": [i < 2 for i in range(length)],
        "action": [1 + i % 5 if i % 4 == 3 else 0 for i in range(length)],
    }


def naive_best_fit(lengths, max_length):
    """Best-fit decreasing by linear scan, as the textbook states it."""
    rows, space = [], []
    for item in sorted(range(len(lengths)), key=lambda i: (-min(lengths[i], max_length), i)):
        size = min(lengths[item], max_length)
        fitting = [r for r in range(len(rows)) if space[r] >= size]
        if fitting:
            row = min(fitting, key=lambda r: (space[r], r))
            rows[row].append(item)
            space[row] -= size
        else:
            rows.append([item])
            space.append(max_length - size)
    return rows


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.integers(1, 120), min_size=1, max_size=40), max_length=st.integers(1, 100))
def test_pack_best_fit_is_best_fit_decreasing(lengths, max_length):
    rows = pack_best_fit(lengths, max_length)
    assert rows == naive_best_fit(lengths, max_length)
    assert sorted(item for row in rows for item in row) == list(range(len(lengths)))
    for row in rows:
        assert sum(min(lengths[item], max_length) for item in row) <= max_length
        if any(lengths[item] >= max_length for item in row):
            assert len(row) == 1
    assert rows == pack_best_fit(list(lengths), max_length)


def test_pack_best_fit_known_case_and_errors():
    assert pack_best_fit([5, 4, 3, 3, 2, 2, 1], 10) == [[0, 1, 6], [2, 3, 4, 5]]
    assert pack_best_fit([12, 3], 10) == [[0], [1]]
    with pytest.raises(ValueError):
        pack_best_fit([0, 3], 10)
    with pytest.raises(ValueError):
        pack_best_fit([3], 0)


def locate(fields, features):
    """Row, start and end of every rendering, found through its segment id."""
    spans = {}
    for segment_id in range(len(features)):
        row, column = (fields["segment_ids"] == segment_id).nonzero(as_tuple=True)
        assert (row == row[0]).all() and torch.equal(column, torch.arange(column[0], column[-1] + 1))
        spans[segment_id] = (int(row[0]), int(column[0]), int(column[-1]) + 1)
    return spans


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 90), min_size=1, max_size=12), max_length=st.integers(8, 64), pack=st.booleans()
)
def test_packing_keeps_renderings_whole_and_prefix_truncates(lengths, max_length, pack):
    features = [rendering(length, seed, hidden=seed % 2 == 0) for seed, length in enumerate(lengths)]
    collator = StreamingCollator(max_length, PAD, pack=pack)
    fields = collator(features)
    spans = locate(fields, features)
    found = []
    for row, start, end in spans.values():
        segment = {key: fields[key][row, start:end].tolist() for key in PER_TOKEN}
        found.append(segment["input_ids"][0] // 1000)
        feature = features[found[-1]]
        # Whole if it fits, else exactly its first max_length tokens, alone in its row.
        assert segment["input_ids"] == feature["input_ids"][:max_length]
        if len(feature["input_ids"]) >= max_length:
            assert (fields["segment_ids"][row] == fields["segment_ids"][row, start]).sum() == max_length
        for key in ("time", "visible_until", "sink", "action"):
            assert segment[key] == feature[key][:max_length]
        assert segment["labels"] == [IGNORE_INDEX] + feature["labels"][1:max_length]
        assert fields["position_ids"][row, start:end].tolist() == list(range(end - start))
    assert sorted(found) == list(range(len(features)))
    assert fields["input_ids"].shape[0] == (len(pack_best_fit(lengths, max_length)) if pack else len(features))
    assert fields["input_ids"].shape[1] <= max_length

    # Padding: one fresh segment per row, neutral values, positions restarting, and it only sees itself.
    pad = fields["segment_ids"] >= len(features)
    assert (fields["input_ids"][pad] == PAD).all() and (fields["labels"][pad] == IGNORE_INDEX).all()
    assert (fields["time"][pad] == math.inf).all() and (fields["visible_until"][pad] == math.inf).all()
    assert not fields["sink"][pad].any() and (fields["action"][pad] == 0).all()
    rows_with_pad = pad.nonzero(as_tuple=True)[0]
    assert (fields["segment_ids"][pad] == len(features) + rows_with_pad).all()
    inputs = attention_inputs(fields, "sdpa")
    assert torch.equal(inputs["position_ids"], fields["position_ids"])
    if "attention_mask" in inputs:
        allowed = inputs["attention_mask"][:, 0] == 0
        pad_pairs = pad[:, :, None] | pad[:, None, :]
        eye = torch.eye(pad.shape[1], dtype=torch.bool)
        assert torch.equal(allowed & pad_pairs, eye & pad[:, :, None])


def test_collator_outputs_and_figures():
    features = [rendering(n, seed, hidden=True) for seed, n in enumerate([30, 20, 25, 9])]
    features[1]["labels"][0] = 7  # a trained first token, which packing must not train
    batch = StreamingCollator(48, PAD)(features)
    per_token = {"input_ids", "labels", "position_ids", "segment_ids", "time", "visible_until", "sink", "action"}
    assert set(batch) == per_token | {"num_loss_tokens", "packing_efficiency"}
    assert set(METADATA_KEYS) == set(batch) - {"input_ids", "labels", "position_ids"}
    rows, width = batch["input_ids"].shape
    assert all(batch[key].shape == (rows, width) for key in per_token)
    assert batch["time"].dtype == torch.float64 and batch["sink"].dtype == torch.bool
    assert batch["action"].dtype == torch.int8
    # The first label of each rendering is dropped: in a packed row the previous rendering would predict it.
    expected_loss_tokens = sum(sum(label != IGNORE_INDEX for label in f["labels"][1:]) for f in features)
    assert expected_loss_tokens == sum(sum(label != IGNORE_INDEX for label in f["labels"]) for f in features) - 1
    assert int(batch["num_loss_tokens"]) == expected_loss_tokens == int((batch["labels"] != IGNORE_INDEX).sum())
    assert float(batch["packing_efficiency"]) == pytest.approx(84 / (rows * width))
    assert rows == 2  # 30 + 9 and 25 + 20 fit in 48
    assert int(batch["action"].count_nonzero()) == sum(sum(a != 0 for a in f["action"]) for f in features)

    # The mask is built from the batch, in the dtype of the scores it is added to.
    inputs = attention_inputs(batch, "sdpa", dtype=torch.bfloat16)
    assert inputs["attention_mask"].shape == (rows, 1, width, width)
    assert inputs["attention_mask"].dtype == torch.bfloat16

    again = StreamingCollator(48, PAD)(features)
    for key, value in batch.items():
        assert torch.equal(value, again[key]), key


def test_renderings_without_action_get_action_zero():
    with_action = [rendering(n, seed) for seed, n in enumerate([12, 7])]
    without = [{k: v for k, v in f.items() if k != "action"} for f in with_action]
    mixed = StreamingCollator(32, PAD)([with_action[0], without[1]])
    bare = StreamingCollator(32, PAD)(without)
    assert not bare["action"].any()
    assert mixed["action"].count_nonzero() == sum(a != 0 for a in with_action[0]["action"])
    for key in ("input_ids", "labels", "time", "visible_until", "sink", "segment_ids"):
        assert torch.equal(mixed[key], bare[key]), key


def test_fast_path_and_pad_to_multiple():
    features = [rendering(n, seed) for seed, n in enumerate([30, 20, 7])]
    batch = StreamingCollator(64, PAD, pad_to_multiple_of=16)(features)
    assert set(attention_inputs(batch, "sdpa")) == {"position_ids"}
    assert batch["input_ids"].shape == (1, 64)
    flash = attention_inputs(StreamingCollator(128, PAD, pad_to_multiple_of=128)(features), "flash_attention_2")
    assert flash["cu_seq_lens_q"].tolist() == [0, 30, 50, 57, 128]
    assert flash["max_length_q"] == 71
    windowed = attention_inputs(StreamingCollator(64, PAD)(features), "sdpa", window_s=5.0)
    assert windowed["attention_mask"].shape == (1, 1, 57, 57)


def test_collator_rejects_bad_renderings():
    collator = StreamingCollator(64, PAD)
    backwards = rendering(10, 0)
    backwards["time"][6] = 0.1
    with pytest.raises(ValueError, match="non-decreasing"):
        collator([rendering(5, 1), backwards])
    for key in ("sink", "action"):
        ragged = rendering(10, 0)
        ragged[key] = ragged[key][:-1]
        with pytest.raises(ValueError, match="equal lengths"):
            collator([ragged])
