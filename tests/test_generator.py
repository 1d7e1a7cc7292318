"""The generator: determinism, validity, dataset statistics, and the teacher's invariants on every timeline."""

import json
import subprocess
import sys
from collections import Counter
from dataclasses import replace

import pytest

from clocktune.timeline import read_timelines, validate_timeline
from clocktune.timeline.analysis import call_records, executed_calls
from data_gen.cli import main as datagen_main
from data_gen.config import GeneratorConfig, load_config
from data_gen.domains import DOMAINS
from data_gen.stats import DatasetStats


def test_eight_domains_each_with_read_only_and_state_changing_tools():
    assert len(DOMAINS) >= 8
    for domain in DOMAINS.values():
        kinds = {tool.side_effect for tool in domain.tools}
        assert kinds == {False, True}, domain.name


def test_every_generated_timeline_is_valid(generated):
    speculative, sync = generated
    for timeline in speculative + sync:
        assert validate_timeline(timeline) == [], timeline.id


def test_dataset_statistics_meet_the_targets(generated):
    stats = DatasetStats()
    for timeline in generated[0]:
        stats.add(timeline)
    summary = stats.to_dict()
    assert summary["dialogues"] == 1000
    assert len(summary["domains"]) >= 8
    assert summary["frac_with_speculative_call"] >= 0.5
    assert summary["frac_with_corrected_call"] >= 0.2
    assert summary["frac_with_parallel_calls"] >= 0.3
    assert summary["frac_with_dependent_calls"] >= 0.2
    assert 0.05 <= summary["frac_no_tool"] <= 0.2
    assert 2.4 <= summary["speech_words_per_s_mean"] <= 3.6
    assert 0.4 <= summary["tool_latency_s_p50"] <= 1.0 < summary["tool_latency_s_p90"]


def test_task_grammars_cover_every_kind(generated):
    kinds = Counter(timeline.task for timeline in generated[0])
    for kind in ("lookup", "compare", "dependent", "late_intent", "correction", "multi_turn", "no_tool"):
        assert kinds[kind] >= 20, kinds


def test_no_state_changing_call_executes_before_commit(generated):
    for timeline in generated[0] + generated[1]:
        records = call_records(timeline)
        for record in records.values():
            if not record.side_effect:
                continue
            for t, _, _ in record.results:
                assert record.committed_t is not None and record.committed_t <= t, (timeline.id, record.call_id)
            # Nothing changes a state-changing call once it has been released.
            assert all(t <= record.committed_t for t in record.modifications if record.committed_t is not None)


def test_every_call_is_settled_before_the_final_answer(generated):
    """Each call issued in a turn is cancelled, or its current version has returned, when the turn's answer comes."""
    for timeline in generated[0] + generated[1]:
        records = call_records(timeline)
        for event in timeline.events:
            if event.kind != "say" or not event.final:
                continue
            for record in records.values():
                if record.issued_t > event.t:
                    continue
                cancelled = record.cancelled_t is not None and record.cancelled_t <= event.t
                answered = any(record.last_change_t <= t <= event.t for t, _, _ in record.results)
                assert cancelled or answered, (timeline.id, record.call_id)


def test_every_ground_truth_call_executes_with_its_final_arguments(generated):
    for timeline in generated[0] + generated[1]:
        executed = Counter(json.dumps([name, args], sort_keys=True) for name, args in executed_calls(timeline))
        truth = Counter(json.dumps([c.name, c.arguments], sort_keys=True) for c in timeline.ground_truth.calls)
        assert executed == truth, timeline.id


def test_final_answer_carries_the_facts(generated):
    for timeline in generated[0]:
        answer = [event.text for event in timeline.events if event.kind == "say" and event.final][-1]
        assert all(fact in answer for fact in timeline.ground_truth.facts), timeline.id


def test_sync_teacher_waits_for_the_end_of_speech(generated):
    for timeline in generated[1]:
        for record in call_records(timeline).values():
            assert not record.speculative and not record.corrected
        # One call in flight at a time.
        spans = sorted((r.issued_t, r.end_t) for r in call_records(timeline).values())
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), timeline.id


def test_speculative_teacher_answers_sooner_than_sync(generated):
    from clocktune.timeline.analysis import response_latencies

    speculative = sorted(x for t in generated[0][:300] for x in response_latencies(t))
    sync = sorted(x for t in generated[1] for x in response_latencies(t))
    assert speculative[len(speculative) // 2] < sync[len(sync) // 2]


def test_generate_is_byte_identical_across_process_counts(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    assert datagen_main(["generate", "--num", "1000", "--seed", "0", "--out", str(one), "--quiet"]) == 0
    args = ["generate", "--num", "1000", "--seed", "0", "--out", str(two), "--num-proc", "2", "--quiet"]
    assert datagen_main(args) == 0
    files = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    assert len([f for f in files if f.suffix == ".jsonl"]) == 2
    for name in files:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name
    stats = json.loads((one / "stats.json").read_text())
    assert stats["dialogues"] == 1000


def test_generate_resumes_missing_shards_and_refuses_other_settings(tmp_path):
    out = tmp_path / "run"
    base = ["generate", "--num", "120", "--seed", "3", "--out", str(out), "--shard-size", "50", "--quiet"]
    assert datagen_main(base) == 0
    shards = sorted((out / "data").glob("*.jsonl"))
    before = [p.read_bytes() for p in shards]
    shards[1].unlink()
    assert datagen_main(base) == 0
    assert [p.read_bytes() for p in shards] == before
    assert datagen_main(base[:-1] + ["--seed", "4", "--quiet"][-1:] + ["--teacher", "sync"]) == 2


def test_parquet_and_jsonl_load_with_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    for fmt in ("jsonl", "parquet"):
        out = tmp_path / fmt
        args = ["generate", "--num", "60", "--out", str(out), "--format", fmt, "--shard-size", "20", "--quiet"]
        assert datagen_main(args) == 0
        builder = "json" if fmt == "jsonl" else "parquet"
        data = datasets.load_dataset(builder, data_files=str(out / "data" / f"*.{fmt}"), split="train")
        assert len(data) == 60
        assert data.features["events"].feature["arguments"].dtype == "string"
        assert datagen_main(["validate", str(out / "data")]) == 0
    jsonl = read_timelines(sorted((tmp_path / "jsonl" / "data").glob("*.jsonl"))[0])
    from clocktune.timeline.io import iter_parquet_rows

    parquet = [item for _, item in iter_parquet_rows(sorted((tmp_path / "parquet" / "data").glob("*.parquet"))[0])]
    assert parquet == jsonl


def test_show_prints_and_draws(tmp_path, capsys):
    out = tmp_path / "d"
    assert datagen_main(["generate", "--num", "10", "--out", str(out), "--quiet"]) == 0
    png = tmp_path / "g.png"
    path = next((out / "data").glob("*.jsonl"))
    assert datagen_main(["show", str(path), "--index", "2", "--png", str(png)]) == 0
    printed = capsys.readouterr().out
    assert "ground truth" in printed and "USER" in printed
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert datagen_main(["show", str(path), "--index", "99"]) == 1


def test_config_errors_name_file_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("speech:\n  words_per_s: fast\nplanner:\n  thresold: 0.5\n")
    with pytest.raises(ValueError) as error:
        load_config(path)
    assert f"{path}:speech.words_per_s" in str(error.value)
    assert f"{path}:planner.thresold" in str(error.value)
    assert load_config("configs/datagen/default.yaml") == GeneratorConfig()


def test_generator_and_format_import_without_torch():
    code = (
        "import sys, data_gen.cli, data_gen.writer, clocktune.timeline, clocktune.clock, clocktune.cli;"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_ground_truth_state_is_what_its_calls_do_to_the_initial_state(generated):
    from data_gen.backends import check_ground_truth_state

    for timeline in generated[0] + generated[1]:
        assert check_ground_truth_state(timeline) == [], timeline.id
    # A state that the calls do not produce is caught, and so is a call the backend cannot serve.
    timeline = next(t for t in generated[0] if t.ground_truth.calls)
    wrong_state = replace(timeline, ground_truth=replace(timeline.ground_truth, final_state={"x": 1}))
    assert [issue.field for issue in check_ground_truth_state(wrong_state)] == ["ground_truth.final_state"]
    bad_call = replace(timeline.ground_truth.calls[0], name="no_such_tool")
    wrong_call = replace(timeline, ground_truth=replace(timeline.ground_truth, calls=[bad_call]))
    assert [issue.field for issue in check_ground_truth_state(wrong_call)] == ["ground_truth.calls.0"]
