"""A LoRA recipe's checkpoint as others get it from the Hub: only the final adapter, a small one (LoRA weights and the
new clock-token rows), the base model by its Hub id, the training data and live results on the card, and a download
that loads with plain transformers + peft and renders the same ids."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from clocktune.hub import push_checkpoint
from clocktune.model_card import card_info_for
from clocktune.models import EMBEDDED_HUB_ID
from clocktune.render import render
from clocktune.train.record import TRAINING_RECORD, read_training_record
from data_gen.config import GeneratorConfig
from data_gen.generate import generate_dialogue
from data_gen.writer import GenerationJob, run_generation
from tests.test_hub import _card
from tests.test_train import sft_args, tiny_model_dir

SUMMARY = {
    "policy": "speculative",
    "baseline": "sync",
    "dialogues": 50,
    "accuracy": 0.62,
    "latency_p50_s": 1.31,
    "speedup_p50": 1.21,
    "profile": "phone-135m",
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A LoRA run of the recipe on a tiny model, with a checkpoint saved on the way: (model, data, output)."""
    from clocktune.train.sft import run

    root = tmp_path_factory.mktemp("adapter")
    run_generation(GenerationJob(GeneratorConfig(), 8, 5, root / "gen", shard_size=8), progress=False)
    model_dir = tiny_model_dir(root, "llama")
    lora = ["--use_peft", "--lora_r", "4", "--lora_alpha", "8", "--lora_target_modules", "q_proj", "v_proj"]
    args = sft_args(model_dir, root / "gen" / "data", root / "out", *lora)
    args[args.index("--save_strategy") + 1] = "steps"
    run([*args, "--save_steps", "2"])
    return model_dir, root / "gen" / "data", root / "out"


def test_the_adapter_holds_the_lora_weights_and_the_new_rows_only(trained):
    from safetensors import safe_open

    model_dir, _, out = trained
    tokenizer = AutoTokenizer.from_pretrained(out)
    base_vocab = AutoModelForCausalLM.from_pretrained(model_dir).get_input_embeddings().num_embeddings
    with safe_open(out / "adapter_model.safetensors", "pt") as adapter:
        shapes = {name: adapter.get_slice(name).get_shape() for name in adapter.keys()}  # noqa: SIM118
    # No whole embedding or head (PEFT saves them when the vocabulary grew): LoRA matrices and the new rows only.
    assert all("lora_" in name or "trainable_tokens_delta" in name for name in shapes), sorted(shapes)
    (rows,) = [shape for name, shape in shapes.items() if "trainable_tokens_delta" in name]
    assert rows[0] == len(tokenizer) - base_vocab
    # At 135M parameters that is 3.7% of the base model (BENCHMARKS.md); a tiny test model has too few weights for a
    # ratio to mean anything.
    record = read_training_record(out)
    assert record["base_model"] == str(model_dir) and record["train_data"]


def test_a_pushed_adapter_names_its_base_on_the_hub_and_loads_back_with_the_same_ids(hub, trained, tmp_path):
    model_dir, data, out = trained
    # As a run on the embedded model records it: the recipe's name, not the cache folder it was loaded from.
    record = read_training_record(out)
    (out / TRAINING_RECORD).write_text(json.dumps({**record, "base_model": "embedded"}))
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"next_action_accuracy_after": 0.85, "eval": SUMMARY}))
    push_checkpoint(out, "me/rt-lora", card_info=card_info_for(out, None, None, summary))

    files = hub.files("me/rt-lora")
    assert not any(name.startswith("checkpoint-") for name in files), sorted(files)
    assert "adapter_model.safetensors" in files and TRAINING_RECORD in files
    meta, body = _card(files["README.md"])
    assert meta["base_model"] == EMBEDDED_HUB_ID
    assert f"`{data}`" in body  # the training data, named
    (result,) = meta["model-index"][0]["results"]  # one task on one dataset, three metrics
    metrics = {metric["name"]: metric["value"] for metric in result["metrics"]}
    assert metrics == {"live accuracy": 0.62, "response latency p50 (s)": 1.31, "speedup p50 over sync": 1.21}
    assert result["dataset"]["name"] == "50 held-out timelines"
    assert {metric["config"] for metric in result["metrics"]} == {"phone-135m"}
    assert json.loads(files["adapter_config.json"])["base_model_name_or_path"] == EMBEDDED_HUB_ID
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(model_dir)

    # Loading back with plain transformers + peft, the base taken from a local copy (no hub for it here).
    from peft import PeftModel

    pushed = hub.export("me/rt-lora", tmp_path / "download")
    tokenizer = AutoTokenizer.from_pretrained(pushed)
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    base.resize_token_embeddings(len(tokenizer))
    loaded = PeftModel.from_pretrained(base, pushed).eval()
    timeline = generate_dialogue(3, 0, GeneratorConfig())
    local, remote = render(timeline, AutoTokenizer.from_pretrained(out)), render(timeline, tokenizer)
    assert remote.input_ids == local.input_ids
    from peft import AutoPeftModelForCausalLM

    reference = AutoPeftModelForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([remote.input_ids[:256]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, reference(ids).logits, rtol=0, atol=0)
