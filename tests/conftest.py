import os

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs two workers on two cores: one torch thread each, set before torch starts its thread pool, so
    # that they do not fight over both cores (two-thread steps beside another CPU-bound process ran 2-9x slower).
    os.environ.setdefault("OMP_NUM_THREADS", "1")

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


@pytest.fixture(scope="session")
def generated(tmp_path_factory):
    """1000 speculative-teacher dialogues (seed 0) and 300 sync-teacher ones, generated once per session."""
    from data_gen.config import GeneratorConfig
    from data_gen.dialogues import select_domains
    from data_gen.generate import generate_dialogue

    config = GeneratorConfig()
    domains = select_domains(config)
    speculative = [generate_dialogue(i, 0, config, domains) for i in range(1000)]
    sync_config = GeneratorConfig(teacher="sync")
    sync = [generate_dialogue(i, 0, sync_config, domains) for i in range(300)]
    return speculative, sync


@pytest.fixture
def hub(monkeypatch):
    """A running mock Hub with huggingface_hub pointed at it (tests/test_hub.py says how) and near-zero backoff."""
    from huggingface_hub import constants

    import clocktune.hub as hub_module
    from tests.mock_hub import MockHub

    with MockHub() as mock:
        monkeypatch.setattr(constants, "ENDPOINT", mock.url)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setenv("HF_TOKEN", "hf_test")
        monkeypatch.setattr(hub_module, "RETRY_BASE_DELAY_S", 0.01)
        yield mock


# Hostile inputs must be refused in bounded time and memory (issue 36): generous bounds that a slow machine keeps, far
# below what an input that slipped through takes (an alias bomb: gigabytes; a 1e9 s silence: for ever).
BOUNDED_SECONDS = 60.0
BOUNDED_MEMORY_GROWTH_BYTES = 1024**3


@pytest.fixture
def bounded():
    """Fails a test that took longer than ``BOUNDED_SECONDS`` or raised the process's peak memory by more than
    ``BOUNDED_MEMORY_GROWTH_BYTES`` (``ru_maxrss``, a high-water mark: growth past the peak so far)."""
    import resource
    import time

    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    started = time.monotonic()
    yield
    seconds = time.monotonic() - started
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak_before
    assert seconds <= BOUNDED_SECONDS, f"took {seconds:.1f} s"
    assert growth <= BOUNDED_MEMORY_GROWTH_BYTES, f"peak memory grew by {growth / 1024**2:.0f} MiB"


# The files that take longest, longest first (`pytest --durations=0`, 2026-12-04: 107 s down to 14 s). `make test`
# runs a file per xdist worker at a time in collection order (`--dist loadfile --no-loadscope-reorder`); starting
# with these keeps a long file from being the last one left while the other worker idles (longest first is within
# 4/3 of the best schedule). A file missing here only runs later; a stale entry costs nothing.
LONGEST_FILES = (
    "test_event_order.py",
    "test_demo.py",
    "test_train.py",
    "test_rollout.py",
    "test_on_policy_rounds.py",
    "test_speculative_decoding.py",
    "test_gpu_check.py",
    "test_live_eval.py",
    "test_expert.py",
    "test_masks.py",
)


def pytest_collection_modifyitems(config, items):
    """Runs the longest test files first (a stable sort: each file's tests keep their order)."""
    rank = {name: index for index, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="module")
def tiny_chatml_model():
    """A tiny random Llama over the ChatML test tokenizer, extended with clock tokens (abs_bins), sdpa attention."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from clocktune.encoding import extend_tokenizer, get_codec
    from tests.tiny_models import TINY
    from tests.tiny_tokenizer import tiny_tokenizer

    tokenizer = tiny_tokenizer("chatml")
    extend_tokenizer(tokenizer, get_codec("abs_bins"), "chatml")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=8192, **TINY)).eval()
    model.config._attn_implementation = "sdpa"
    return model, tokenizer


@pytest.fixture(scope="module")
def tiny_four_layer_model():
    """A random 4-layer Llama whose last two layers add little: its first two layers agree with it often, not always."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from clocktune.encoding import extend_tokenizer, get_codec
    from tests.tiny_models import TINY
    from tests.tiny_tokenizer import tiny_tokenizer

    tokenizer = tiny_tokenizer("chatml")
    extend_tokenizer(tokenizer, get_codec("abs_bins"), "chatml")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=8192, **{**TINY, "num_hidden_layers": 4})
    model = LlamaForCausalLM(config).eval()
    model.config._attn_implementation = "sdpa"
    with torch.no_grad():
        for layer in model.model.layers[2:]:
            layer.self_attn.o_proj.weight.mul_(0.3)
            layer.mlp.down_proj.weight.mul_(0.3)
        model.lm_head.weight.mul_(8.0)  # peaky next-token distributions: greedy loops, samples concentrate
    return model, tokenizer
