"""``clocktune render`` and ``clocktune inspect``, and the rendered dataset behind them: the saved dataset equals
``render()`` row by row, the saved tokenizer renders the same ids, summaries match, and bad input exits 2 with
file:line."""

import json
import math

import pytest
import torch
from datasets import load_from_disk
from tiny_tokenizer import tiny_tokenizer
from transformers import AutoTokenizer

from clocktune.cli import main
from clocktune.collate import IGNORE_INDEX, StreamingCollator, pack_best_fit
from clocktune.encoding import extend_tokenizer, load_encoding
from clocktune.render import render
from clocktune.rendered_dataset import ACTION_TYPES, load_timeline_files, render_timelines, summarize
from clocktune.timeline.events import AGENT_KINDS
from clocktune.timeline.io import TimelineFormatError, write_parquet, write_timelines
from data_gen.config import GeneratorConfig
from data_gen.generate import generate_dialogue

ACTION_OF_KIND = {
    "tool_call": "call",
    "tool_modify": "modify_cancel",
    "tool_cancel": "modify_cancel",
    "wait": "wait",
    "say": "say",
    "commit": "commit",
}


@pytest.fixture(scope="module")
def timelines():
    speculative = [generate_dialogue(i, 0, GeneratorConfig()) for i in range(5)]
    sync = [generate_dialogue(i, 0, GeneratorConfig(teacher="sync")) for i in range(2)]
    return speculative + sync


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, timelines):
    """Timelines split over a JSON Lines and a Parquet file in one folder, and a plain (unextended) tokenizer."""
    root = tmp_path_factory.mktemp("render_cli")
    (root / "data").mkdir()
    write_timelines(root / "data" / "a.jsonl", timelines[:4])
    write_parquet(root / "data" / "b.parquet", timelines[4:])
    tiny_tokenizer("chatml").save_pretrained(root / "tokenizer")
    return root


@pytest.fixture(scope="module")
def rendered(workspace):
    out = workspace / "out"
    args = ["render", "--input", str(workspace / "data"), "--tokenizer", str(workspace / "tokenizer")]
    assert main([*args, "--model-format", "chatml", "--max-length", "2048", "--out", str(out), "--quiet"]) == 0
    # Rendering again replaces the outputs atomically and leaves no staging folder behind.
    assert main([*args, "--model-format", "chatml", "--max-length", "2048", "--out", str(out), "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["dataset", "render_summary.json", "tokenizer"]
    return out


def reference_tokenizer(workspace):
    tokenizer = AutoTokenizer.from_pretrained(workspace / "tokenizer")
    extend_tokenizer(tokenizer, "abs_bins", "chatml")
    return tokenizer


def test_load_timeline_files_reads_folders_in_path_order(workspace, timelines):
    loaded = load_timeline_files([workspace / "data"])
    assert [t.id for t in loaded] == [t.id for t in timelines]
    assert loaded[5].events == timelines[5].events


def test_rendered_dataset_equals_render(workspace, rendered, timelines):
    dataset = load_from_disk(str(rendered / "dataset"))
    assert dataset.column_names == [
        "timeline_id", "input_ids", "labels", "time", "visible_until", "sink", "event_index", "action"
    ]  # fmt: skip
    dtypes = {name: getattr(feature, "feature", feature).dtype for name, feature in dataset.features.items()}
    assert dtypes == {
        "timeline_id": "string", "input_ids": "int32", "labels": "int32", "time": "float64",
        "visible_until": "float64", "sink": "bool", "event_index": "int32", "action": "int8",
    }  # fmt: skip
    tokenizer = reference_tokenizer(workspace)
    assert len(dataset) == len(timelines)
    for row, timeline in zip(dataset, timelines, strict=True):
        expected = render(timeline, tokenizer).to_dict()
        assert row["timeline_id"] == timeline.id
        assert {key: row[key] for key in expected} == expected
        # Action: the event's kind on every token of an agent event, "none" elsewhere.
        for index, action in zip(row["event_index"], row["action"], strict=True):
            kind = timeline.events[index].kind if index >= 0 else None
            assert ACTION_TYPES[action] == (ACTION_OF_KIND[kind] if kind in AGENT_KINDS else "none")
        trained = [a for a, label in zip(row["action"], row["labels"], strict=True) if label != IGNORE_INDEX]
        assert trained and all(trained)
    assert any(until != math.inf for row in dataset for until in row["visible_until"])

    # The collator packs dataset rows as they come, action included.
    batch = StreamingCollator(4096, 0)(dataset.select(range(3)).to_list())
    assert int(batch["action"].count_nonzero()) == sum(sum(a != 0 for a in dataset[i]["action"]) for i in range(3))
    assert batch["action"].dtype == torch.int8


def test_saved_tokenizer_renders_the_same_ids(workspace, rendered, timelines):
    saved = AutoTokenizer.from_pretrained(rendered / "tokenizer")
    assert load_encoding(saved) == load_encoding(reference_tokenizer(workspace))
    dataset = load_from_disk(str(rendered / "dataset"))
    for row, timeline in zip(dataset, timelines, strict=True):
        assert render(timeline, saved).input_ids == row["input_ids"]


def test_summary_matches_the_renderings(workspace, rendered, timelines):
    summary = json.loads((rendered / "render_summary.json").read_text())
    renderings = [render(timeline, reference_tokenizer(workspace)) for timeline in timelines]
    lengths = [len(r) for r in renderings]
    loss_tokens = sum(label != IGNORE_INDEX for r in renderings for label in r.labels)
    rows = pack_best_fit(lengths, 2048)
    assert summary["timelines"] == len(timelines)
    assert summary["tokens"] == sum(lengths)
    assert summary["loss_tokens"] == loss_tokens
    assert summary["loss_share"] == pytest.approx(loss_tokens / sum(lengths))
    assert summary["packed_rows"] == len(rows)
    assert summary["packing_efficiency"] == pytest.approx(sum(min(n, 2048) for n in lengths) / (len(rows) * 2048))
    assert summary["encoding"]["model_format"] == "chatml" and summary["encoding"]["codec"]["name"] == "abs_bins"
    # summarize honours a selection (an indices mapping over the same table).
    dataset = load_from_disk(str(rendered / "dataset"))
    assert summarize(dataset.select([2, 0]), 2048)["tokens"] == lengths[2] + lengths[0]


def test_render_timelines_with_agent_clock_loss(workspace, timelines):
    tokenizer = reference_tokenizer(workspace)
    dataset = render_timelines(iter(timelines[:2]), tokenizer, agent_clock_loss=True)
    assert dataset["labels"] == [render(t, tokenizer, agent_clock_loss=True).labels for t in timelines[:2]]
    assert sum(map(len, dataset["labels"])) == sum(map(len, render_timelines(timelines[:2], tokenizer)["labels"]))


def test_pre_extended_tokenizer_must_match(workspace, rendered, capsys):
    tokenizer = str(rendered / "tokenizer")
    data = str(workspace / "data" / "a.jsonl")
    out = str(workspace / "out2")
    assert main(["render", "--input", data, "--tokenizer", tokenizer, "--model-format", "chatml", "--out", out,
                 "--quiet"]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["render", "--input", data, "--tokenizer", tokenizer, "--model-format", "qwen2.5", "--out", out]) == 2
    assert "error: tokenizer is already extended for model format 'chatml'" in capsys.readouterr().err
    assert main(["render", "--input", data, "--tokenizer", tokenizer, "--model-format", "chatml",
                 "--time-codec", "text", "--out", out]) == 2  # fmt: skip
    assert "not time codec 'text'" in capsys.readouterr().err


def test_bad_input_exits_2_naming_file_and_line(workspace, timelines, tmp_path, capsys):
    good = (workspace / "data" / "a.jsonl").read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([good[0], good[1].replace('"t":', '"t":"soon","was":', 1), "{not json", good[2]]) + "\n")
    common = ["--tokenizer", str(workspace / "tokenizer"), "--model-format", "chatml", "--out", str(tmp_path / "o")]
    assert main(["render", "--input", str(bad), *common]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert f"{bad}:2:events.0.t:" in err and f"{bad}:3:-: not valid JSON" in err
    with pytest.raises(TimelineFormatError) as error:
        load_timeline_files([bad])
    assert [(issue.line, issue.field) for issue in error.value.issues][-1] == (3, "-")

    assert main(["render", "--input", str(tmp_path / "missing.jsonl"), *common]) == 2
    assert f"{tmp_path / 'missing.jsonl'}: no such file" in capsys.readouterr().err
    assert main(["inspect", str(bad), "--index", "1", "--tokenizer", str(workspace / "tokenizer")]) == 2
    assert f"{bad}:2:events.0.t:" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_inspect_marks_loss_clock_and_hidden_tokens(workspace, rendered, timelines, capsys):
    path = workspace / "data" / "a.jsonl"
    tokenizer = str(workspace / "tokenizer")
    assert main(["inspect", str(path), "--index", "1", "--tokenizer", tokenizer]) == 2
    assert "pass --model-format" in capsys.readouterr().err

    assert main(["inspect", str(path), "--index", "1", "--tokenizer", tokenizer, "--model-format", "chatml"]) == 0
    lines = capsys.readouterr().out.splitlines()
    timeline = timelines[1]
    rendering = render(timeline, reference_tokenizer(workspace))
    assert lines[0].startswith(f"timeline {timeline.id}") and f"{len(rendering):,} tokens" in lines[0]
    events = [i for i, line in enumerate(lines) if line.startswith("#")]
    assert len(events) == len(timeline.events)
    hidden = {index for index, until in zip(rendering.event_index, rendering.visible_until, strict=True)
              if until != math.inf}  # fmt: skip
    for number, (event, at) in enumerate(zip(timeline.events, events, strict=True)):
        header, tokens = lines[at], lines[at + 1]
        assert header.split()[:3] == [f"#{number}", f"t={event.t:.3f}s", event.kind]
        assert ("HIDDEN from t=" in header) == (number in hidden)
        assert "{<|t_s" in tokens  # the abs_bins clock, marked as clock
        # Loss-bearing runs end on the end token: exactly the agent events have one.
        assert ("<|im_end|>]" in tokens) == (event.kind in AGENT_KINDS)

    assert main(["inspect", str(path), "--index", "1", "--tokenizer", tokenizer, "--model-format", "chatml",
                 "--agent-clock-loss", "--system"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("system prefix (sink, t=0)") and lines[3].startswith("    <|im_start|>|")
    agent = next(i for i, event in enumerate(timeline.events) if event.kind in AGENT_KINDS)
    at = next(i for i, line in enumerate(lines) if line.startswith(f"#{agent} "))
    assert "[{<|t_s" in lines[at + 1]  # the agent's clock, loss-bearing and clock
