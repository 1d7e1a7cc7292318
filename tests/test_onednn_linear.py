"""The engine's linear layers through oneDNN's packed weights: the plain layers' logits, weights packed again when they
change, and a model left plain outside the engine's forwards."""

import copy
import math

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from clocktune.runtime import onednn_linear
from clocktune.runtime.engine import Engine, Forward
from clocktune.runtime.onednn_linear import packed_linears
from clocktune.runtime.weight_changes import weights_stamp
from tests.tiny_models import TINY

# oneDNN ships in PyTorch's CPU builds for x86 and ARM; where it does not, the engine runs F.linear and these tests
# have nothing to test.
pytestmark = pytest.mark.skipif(packed_linears(torch.nn.Linear(2, 2)) is None, reason="no oneDNN in this torch")


def tiny_model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, max_position_embeddings=512, **TINY)).eval()
    model.config._attn_implementation = "sdpa"
    return model


def logits(model, ids: list[int], onednn: bool | None = None) -> torch.Tensor:
    # A new engine each time: an engine keeps its system prompt's keys and values, computed with the weights then.
    session = Engine(model, onednn=onednn).open((1, 2, 3))
    return session.forward(Forward(ids, [0.0] * len(ids), [math.inf] * (3 + len(ids)), rows=len(ids)))


def test_the_engines_packed_linear_layers_give_the_plain_layers_logits_and_leave_the_model_plain_after():
    model = tiny_model()
    linears = Engine(model).linears
    assert linears is not None and Engine(model, onednn=False).linears is None
    ids = [5, 9, 14, 30, 2]
    assert torch.allclose(logits(model, ids), logits(model, ids, onednn=False), atol=1e-5)
    linear_layers = [module for module in model.modules() if isinstance(module, torch.nn.Linear)]
    assert linears.packs == len(linear_layers) == 2 * 7 + 1  # every projection and the head, once
    logits(model, ids)
    assert linears.packs == len(linear_layers)  # unchanged weights are not packed again
    # Outside the engine's forward the modules are plain again: no instance forward left, and a copy works.
    assert all("forward" not in vars(module) for module in linear_layers)
    assert torch.equal(copy.deepcopy(model)(torch.tensor([ids])).logits, model(torch.tensor([ids])).logits)
    # Every engine over the same model shares the packed weights.
    assert Engine(model, batch_size=4).linears is linears


def test_a_weight_changed_by_an_optimizer_step_is_packed_again_before_the_next_forward():
    model = tiny_model()
    ids = [7, 8, 9]
    before = logits(model, ids)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model.train()
    model(torch.tensor([ids]), labels=torch.tensor([ids])).loss.backward()
    optimizer.step()
    model.eval()
    after = logits(model, ids)
    assert not torch.allclose(before, after, atol=1e-3)  # the step moved the logits ...
    assert torch.allclose(after, logits(model, ids, onednn=False), atol=1e-5)  # ... and the packed layers follow


def test_a_fused_adamw_step_which_moves_no_version_counter_is_followed_by_the_packed_layers_and_the_drafters_stamp():
    # The 🤗 Trainer's default optimizer (adamw_torch_fused) writes the weights without moving their version counters:
    # a stamp of storage and version alone kept the packed weights of before the step (a GRPO run's rollouts played
    # its first weights throughout).
    model = tiny_model()
    ids = [7, 8, 9]
    before = logits(model, ids)
    stamp = weights_stamp(model)
    versions = [parameter._version for parameter in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
    model.train()
    model(torch.tensor([ids]), labels=torch.tensor([ids])).loss.backward()
    optimizer.step()
    model.eval()
    assert [parameter._version for parameter in model.parameters()] == versions  # what the stamp must not rely on
    assert weights_stamp(model) != stamp  # a quantized drafter derives its copy again
    after = logits(model, ids)
    assert not torch.allclose(before, after, atol=1e-3)
    assert torch.allclose(after, logits(model, ids, onednn=False), atol=1e-5)


def test_a_lora_model_computes_its_adapters_through_the_packed_layers_and_follows_their_training():
    model = get_peft_model(tiny_model(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    for name, parameter in model.named_parameters():
        if "lora_B" in name:  # non-zero, so that the adapter changes the logits
            torch.nn.init.normal_(parameter, std=0.5)
    ids = [3, 4, 5, 6]
    with_adapter = logits(model, ids)
    assert torch.allclose(with_adapter, logits(model, ids, onednn=False), atol=1e-5)
    with model.disable_adapter():
        assert not torch.allclose(logits(model, ids), with_adapter, atol=1e-3)  # the adapter is in the logits
    lora_b = next(parameter for name, parameter in model.named_parameters() if "lora_B" in name)
    with torch.no_grad():
        lora_b.add_(1.0)
    trained = logits(model, ids)
    assert not torch.allclose(trained, with_adapter, atol=1e-3)
    assert torch.allclose(trained, logits(model, ids, onednn=False), atol=1e-5)


def test_packing_is_off_by_default_for_a_model_whose_second_copy_would_be_large(monkeypatch):
    # The limit lowered to 1 KiB rather than a 2 GiB weight allocated: a 16 x 16 layer's 1,024 bytes fit, 17 x 16 not.
    monkeypatch.setattr(onednn_linear, "MAX_PACKED_BYTES", 1024)
    assert packed_linears(torch.nn.Linear(16, 16)) is not None
    big = torch.nn.Linear(16, 17)
    assert packed_linears(big) is None and packed_linears(big, enabled=True) is not None
    assert packed_linears(torch.nn.Linear(4, 4).to(torch.bfloat16)) is None  # float32 only
