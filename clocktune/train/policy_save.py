"""Saving a trained policy so that it loads alone, when training started from a LoRA adapter.

A clocktune checkpoint is often a LoRA adapter (the demo's SFT saves one). Training that starts from it loads it
merged into its base (:func:`clocktune.runtime.policy_factories.load_policy_model`) and puts a fresh LoRA on top. That
fresh adapter, saved as it is, would name the merged model's own origin, the raw base, as its base: loaded, it would
lack the first adapter's weights without any error. So the final save merges the fresh adapter onto the starting
checkpoint and saves a full model instead. GRPO always does; SFT does when it started from an adapter.

Every save that another step loads (the final policy, an on-policy round's model) goes through :func:`save_whole`:
under FSDP with sharded checkpoints (``configs/accelerate/fsdp2.yaml``, as TRL's own FSDP2 config), the Trainer's
``save_model`` writes nothing at all unless the plugin's state dict type is ``FULL_STATE_DICT`` (transformers'
``Trainer.save_model``), so the run would end without a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def save_policy(trainer: Any, output_dir: str, merge_onto: str | None, **load_kwargs: Any) -> None:
    """Saves the trained policy to ``output_dir``; merged, as a full model, when ``merge_onto`` is given.

    The trainer saves first, gathering the weights when FSDP2 or ZeRO-3 shards them (:func:`save_whole`). If that wrote
    an adapter and ``merge_onto`` names the checkpoint training started from, the main process loads the adapter
    onto that checkpoint, merges, and replaces the adapter's files by the merged model's. Every process waits for it.

    Args:
        trainer: A ``transformers.Trainer`` (SFT's or GRPO's) after training.
        output_dir: Where the policy goes.
        merge_onto: The checkpoint training started from (``model_name_or_path``), or ``None`` to keep an adapter
            as the trainer saved it.
        load_kwargs: Passed to :func:`~clocktune.runtime.policy_factories.load_policy_model` when loading
            ``merge_onto`` (``dtype``, ``attn_implementation``), so that the merged model keeps the training's dtype.
    """
    from clocktune.runtime.policy_factories import is_adapter, load_policy_model

    save_whole(trainer, output_dir)
    if merge_onto is not None and trainer.accelerator.is_main_process and is_adapter(output_dir):
        from peft import PeftModel

        base, _ = load_policy_model(merge_onto, **load_kwargs)
        merged = PeftModel.from_pretrained(base, output_dir).merge_and_unload()
        for stale in (Path(output_dir, "adapter_config.json"), Path(output_dir, "adapter_model.safetensors")):
            stale.unlink(missing_ok=True)
        merged.save_pretrained(output_dir)
    trainer.accelerator.wait_for_everyone()


def save_whole(trainer: Any, output_dir: str) -> None:
    """``trainer.save_model(output_dir)``, gathering FSDP's shards into one model that ``from_pretrained`` loads.

    Under FSDP the Trainer saves only with the plugin's state dict type at ``FULL_STATE_DICT``; with
    ``SHARDED_STATE_DICT`` (the checkpoints' type of ``fsdp2.yaml``, cheaper for resuming) it saves nothing. The type
    is set to full for this save only, with full-state configs (offloaded to CPU, gathered on rank 0), and the
    plugin's own settings come back afterwards: the accelerator state is shared, and an on-policy round's trainer
    after this save still writes sharded checkpoints. ZeRO-3 gathers by itself (``zero3_save_16bit_model: true`` in
    ``zero3.yaml``). Every process calls it: the gather is collective.

    Args:
        trainer: A ``transformers.Trainer`` after training.
        output_dir: Where the model goes.
    """
    plugin = trainer.accelerator.state.fsdp_plugin if getattr(trainer, "is_fsdp_enabled", False) else None
    if plugin is None:
        trainer.save_model(output_dir)
        return
    saved = (plugin.state_dict_type, plugin.state_dict_config, plugin.optim_state_dict_config)
    # set_state_dict_type keeps configs already set, and a sharded config does not gather on rank 0: clear them.
    plugin.state_dict_config = plugin.optim_state_dict_config = None
    plugin.set_state_dict_type("FULL_STATE_DICT")
    try:
        trainer.save_model(output_dir)
    finally:
        plugin.state_dict_type, plugin.state_dict_config, plugin.optim_state_dict_config = saved
