"""Device profiles: measured on the device at hand as a policy runs the model, written and read as YAML, and
charged by ``clocktune eval --profile FILE``."""

import json
import math

import pytest
import torch
from tiny_models import TINY
from tiny_tokenizer import tiny_tokenizer
from transformers import LlamaConfig, LlamaForCausalLM

from clocktune.clock import PROFILES, DeviceProfile
from clocktune.runtime.device_profiles import load_device_profile, measure_device_profile, save_device_profile


def _tiny_model(vocab_size: int = 500) -> LlamaForCausalLM:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab_size, max_position_embeddings=4096, **TINY)).eval()
    model.config._attn_implementation = "sdpa"
    return model


def test_measured_profile_reads_many_tokens_per_forward_faster_than_it_writes_one_at_a_time():
    model = _tiny_model()
    profile = measure_device_profile(
        model, "tiny-cpu", context_tokens=64, prefill_tokens=128, prompt_tokens=8, decode_tokens=8, repeats=2
    )
    assert profile.name == "tiny-cpu"
    for rate in (profile.prefill_tokens_per_s, profile.decode_tokens_per_s):
        assert math.isfinite(rate) and rate > 0
    # A forward over 128 new tokens costs far less than 128 single-token forwards on a model this small.
    assert profile.prefill_tokens_per_s > 4 * profile.decode_tokens_per_s
    assert 0.0 <= profile.action_overhead_s < 1.0


def test_profile_files_round_trip_and_bad_ones_are_named(tmp_path):
    path = tmp_path / "measured.yaml"
    profile = DeviceProfile("measured-cpu", 665.8, 24.98, 0.0403)
    save_device_profile(profile, path)
    assert load_device_profile(str(path)) == profile
    assert load_device_profile("phone-135m") == PROFILES["phone-135m"]

    path.write_text("name: x\nprefill_tokens_per_s: fast\ndecode_tokens_per_s: 20\n")
    with pytest.raises(ValueError, match=r"measured\.yaml:prefill_tokens_per_s"):
        load_device_profile(str(path))
    with pytest.raises(ValueError, match="h200-3b"):
        load_device_profile("h300-3b")


def test_eval_charges_the_profile_file_it_is_given(tmp_path, generated):
    from clocktune.cli import main
    from clocktune.timeline.io import write_timelines

    data = tmp_path / "data.jsonl"
    write_timelines(data, generated[0][:30])
    slow = tmp_path / "slow.yaml"
    save_device_profile(DeviceProfile("slow", 100.0, 5.0, 0.2), slow)
    medians = {}
    for name, profile in (("h200", "h200-3b"), ("slow", str(slow))):
        assert main(["eval", "--data", str(data), "--profile", profile, "--out", str(tmp_path / name)]) == 0
        medians[name] = json.loads((tmp_path / name / "summary.json").read_text())["baseline_latency_p50_s"]
    # 5 tokens/s and 0.2 s per action: the turn-based loop's calls and answers take seconds longer to write.
    assert medians["slow"] > medians["h200"] + 1.0
    assert main(["eval", "--data", str(data), "--profile", "h300-3b", "--out", str(tmp_path / "bad")]) == 2


def test_profile_cli_measures_a_checkpoint_and_writes_a_profile_eval_reads(tmp_path, capsys):
    from clocktune.cli import main

    tokenizer = tiny_tokenizer("chatml")
    checkpoint = tmp_path / "checkpoint"
    _tiny_model(len(tokenizer)).save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    out = tmp_path / "profile.yaml"
    argv = ["profile", "--model", str(checkpoint), "--context-tokens", "64", "--name", "tiny", "--out", str(out)]
    assert main(argv) == 0
    profile = load_device_profile(str(out))
    assert profile.name == "tiny" and profile.decode_tokens_per_s > 0
    printed = capsys.readouterr().out
    assert "tiny" in printed and "phone-135m" in printed
