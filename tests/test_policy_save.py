"""Saving a trained policy whole: under FSDP with sharded checkpoints, transformers' Trainer.save_model writes nothing
unless the plugin's state dict type is full, so every save another step loads goes through ``save_whole``.

FSDP does not run on this CPU-only machine (accelerate takes a CPU launch for plain multi-process), so the tests run
transformers' own ``Trainer.save_model`` on a stand-in trainer that holds accelerate's real FSDP2 plugin."""

from pathlib import Path
from types import SimpleNamespace

import torch
from accelerate.utils import FullyShardedDataParallelPlugin
from torch.distributed.fsdp import StateDictType
from transformers import Trainer

from clocktune.train.policy_save import save_whole


def stand_in_trainer(fsdp: bool, seen: list) -> SimpleNamespace:
    """What ``Trainer.save_model`` reads of a trainer, with accelerate's plugin as ``fsdp2.yaml`` configures it."""
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, state_dict_type="SHARDED_STATE_DICT") if fsdp else None
    model = torch.nn.Linear(2, 2)

    def get_state_dict(module):
        # accelerate gathers according to the plugin's settings at the moment of the call: record them
        seen.append((plugin.state_dict_type, plugin.state_dict_config.rank0_only))
        return module.state_dict()

    def write(output_dir, state_dict=None):
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        torch.save(state_dict if state_dict is not None else model.state_dict(), Path(output_dir, "model.pt"))

    trainer = SimpleNamespace(
        is_fsdp_enabled=fsdp,
        is_deepspeed_enabled=False,
        accelerator=SimpleNamespace(state=SimpleNamespace(fsdp_plugin=plugin), get_state_dict=get_state_dict),
        model=model,
        args=SimpleNamespace(push_to_hub=False),
        _save=write,
    )
    trainer.save_model = lambda output_dir: Trainer.save_model(trainer, output_dir)
    return trainer


def test_the_trainers_own_save_under_fsdp_with_sharded_checkpoints_writes_no_model(tmp_path):
    seen: list = []
    trainer = stand_in_trainer(True, seen)
    trainer.save_model(str(tmp_path / "out"))
    assert not (tmp_path / "out").exists() and seen == []  # the failure save_whole exists for


def test_save_whole_under_fsdp_gathers_a_full_model_on_rank_0_and_puts_the_sharded_settings_back(tmp_path):
    seen: list = []
    trainer = stand_in_trainer(True, seen)
    plugin = trainer.accelerator.state.fsdp_plugin
    before = (plugin.state_dict_type, plugin.state_dict_config, plugin.optim_state_dict_config)
    save_whole(trainer, str(tmp_path / "out"))
    assert seen == [(StateDictType.FULL_STATE_DICT, True)]
    saved = torch.load(tmp_path / "out" / "model.pt")
    assert saved.keys() == trainer.model.state_dict().keys()
    # The accelerator state is shared: a later trainer (the next on-policy round) checkpoints sharded again.
    assert (plugin.state_dict_type, plugin.state_dict_config, plugin.optim_state_dict_config) == before


def test_save_whole_without_fsdp_is_the_trainers_own_save(tmp_path):
    seen: list = []
    trainer = stand_in_trainer(False, seen)
    save_whole(trainer, str(tmp_path / "out"))
    assert (tmp_path / "out" / "model.pt").exists() and seen == []
