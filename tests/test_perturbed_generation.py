"""Generation with noise in the teacher's actions (``perturb``): wrong actions as context, the expert's recovery as
targets, the ground truth of the unperturbed task."""

import json
from collections import Counter
from dataclasses import replace

import pytest
from tiny_tokenizer import tiny_tokenizer

from clocktune.encoding import extend_tokenizer
from clocktune.render import IGNORE_INDEX, render
from clocktune.timeline import read_timelines, validate_timeline
from data_gen.cli import main as datagen_main
from data_gen.config import GeneratorConfig, PerturbConfig, config_to_dict, held_out_config
from data_gen.generate import generate_dialogue
from data_gen.importers.chat.importer import import_chat

PERTURBED = replace(GeneratorConfig(), perturb=PerturbConfig(dialogues=1.0))


def test_a_perturbed_dialogue_keeps_the_unperturbed_ground_truth_and_lists_its_wrong_actions_as_context_only():
    kinds: Counter[str] = Counter()
    for index in range(400):
        plain, perturbed = generate_dialogue(index, 0, GeneratorConfig()), generate_dialogue(index, 0, PERTURBED)
        assert perturbed.ground_truth == plain.ground_truth, perturbed.id
        assert validate_timeline(perturbed) == [], perturbed.id
        assert plain.context_only == []
        events = {event.id: event for event in perturbed.events}
        kinds.update(events[event_id].kind for event_id in perturbed.context_only)
        if perturbed.context_only:  # the wrong action changed what happened after it
            assert perturbed.events != plain.events, perturbed.id
    # Each of the three default kinds shows: a wait for a missed call, calls for wrong tools and arguments.
    assert kinds["wait"] >= 20 and kinds["tool_call"] >= 100, kinds
    assert sum(kinds.values()) >= 200, kinds  # budget 1 at rate 0.5 a call: more than half of the dialogues


def test_the_wrong_actions_carry_no_loss_and_the_recovery_after_them_does():
    tokenizer = tiny_tokenizer("chatml")
    extend_tokenizer(tokenizer, "abs_bins", "chatml")
    checked = 0
    for index in range(60):
        timeline = generate_dialogue(index, 0, PERTURBED)
        if not timeline.context_only:
            continue
        rendering = render(timeline, tokenizer)
        trained = {
            timeline.events[event].id
            for event, label in zip(rendering.event_index, rendering.labels, strict=True)
            if label != IGNORE_INDEX
        }
        wrong = set(timeline.context_only)
        assert not trained & wrong, timeline.id
        agent = [e.id for e in timeline.events if e.id in trained or e.id in wrong]
        for event_id in wrong:  # the agent's next action, the expert's first step back, is a target
            following = agent[agent.index(event_id) + 1 :]
            assert following and following[0] in trained, (timeline.id, event_id)
        checked += 1
    assert checked >= 30


def test_perturbed_generation_is_byte_identical_across_process_counts(tmp_path):
    config = tmp_path / "perturbed.yaml"
    config.write_text("perturb:\n  dialogues: 0.5\n")
    outputs = []
    for num_proc in ("1", "2"):
        out = tmp_path / f"proc{num_proc}"
        args = ["generate", "--config", str(config), "--num", "300", "--out", str(out), "--num-proc", num_proc]
        assert datagen_main([*args, "--quiet"]) == 0
        outputs.append(out)
    shards = sorted(p.relative_to(outputs[0]) for p in (outputs[0] / "data").glob("*.jsonl"))
    assert shards
    for shard in shards:
        assert (outputs[0] / shard).read_bytes() == (outputs[1] / shard).read_bytes(), shard
    timelines = [t for shard in shards for t in read_timelines(outputs[0] / shard)]
    assert len(timelines) == 300
    perturbed = sum(bool(t.context_only) for t in timelines)
    assert 50 <= perturbed <= 150  # half drawn, ~0.6 of those perturbed
    stats = json.loads((outputs[0] / "stats.json").read_text())
    assert stats["frac_perturbed"] == round(perturbed / 300, 4)


def test_a_config_without_noise_keeps_the_settings_stamp_it_had_before_perturb_existed():
    assert "perturb" not in config_to_dict(GeneratorConfig())
    assert config_to_dict(PERTURBED)["perturb"]["dialogues"] == 1.0


def test_import_chat_refuses_noise_because_its_ground_truth_is_every_call_the_dialogue_ran(tmp_path):
    with pytest.raises(ValueError, match="perturb.dialogues must be 0 for import-chat"):
        import_chat(tmp_path / "conversations.jsonl", tmp_path / "out", config=PERTURBED)


def test_held_out_dialogues_are_generated_without_the_training_noise():
    held_out = held_out_config(PERTURBED)
    assert held_out.perturb == PerturbConfig() and replace(held_out, perturb=PERTURBED.perturb) == PERTURBED
    assert generate_dialogue(3, 1, held_out) == generate_dialogue(3, 1, GeneratorConfig())
