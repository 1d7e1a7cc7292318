"""A recipe's ``push_to_hub``: the entry points upload what training saved, as ``clocktune push`` would.

The train layer saves and never pushes. ``ClockSFTConfig`` and ``ClockGRPOConfig`` keep the recipe's ``push_to_hub``
in ``push_output_to_hub`` and leave ``push_to_hub`` off, so that the Trainer pushes nothing of its own: with it on, a
Trainer creates the repo when it is built and uploads at every checkpoint and at ``save_model``, LoRA adapters where
clocktune saves the policy merged onto the checkpoint it started from (``clocktune.train.policy_save``). After
training, ``clocktune train``, ``recipes/sft.py`` and ``recipes/grpo.py`` hand the parsed arguments to
:func:`push_trained`, which uploads ``output_dir`` with :func:`clocktune.hub.push_checkpoint`. It lives here, above
the train layer, because the Hub's code imports the training record (``clocktune.model_card``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["push_trained"]


def push_trained(training_args: Any, eval_summary: str | Path | None = None) -> str | None:
    """Uploads ``output_dir`` after training when the recipe set ``push_to_hub``; on the main process only.

    What goes up is what ``clocktune push --checkpoint OUTPUT_DIR`` uploads: the allow-listed files (the saved model
    or adapter, its tokenizer, the training record; no ``checkpoint-*`` folder or trainer state) and a model card
    naming the base model and data from the record. The repo is ``hub_model_id``, or ``output_dir``'s name when it
    is unset, as transformers names it; a name without a namespace goes to the token's user.
    ``hub_private_repo``, ``hub_revision`` (a branch, created from ``main`` when missing) and ``hub_token`` apply;
    ``hub_strategy`` does not, as this is the one push.

    Args:
        training_args: The parsed ``ClockSFTConfig`` or ``ClockGRPOConfig`` (the second item ``run`` returns).
        eval_summary: A ``summary.json`` whose live results go on the card (``clocktune demo``'s); ``None``: none.

    Returns:
        The URL of the commit, or ``None`` when nothing was pushed (not asked for, or not the main process).

    Raises:
        ValueError: When ``output_dir`` holds a file that may not be uploaded (see ``clocktune.hub``).
        HubPushError: When the Hub refuses the push or cannot be reached.
    """
    if not training_args.push_output_to_hub:
        return None
    from accelerate import PartialState

    if not PartialState().is_main_process:
        return None
    from clocktune.hub import check_checkpoint, push_checkpoint
    from clocktune.model_card import card_info_for

    output_dir = training_args.output_dir
    check_checkpoint(output_dir)  # links leaving the folder, FIFOs, devices: refused before the card reads them
    url = push_checkpoint(
        output_dir,
        training_args.hub_model_id or Path(output_dir).absolute().name,
        private=training_args.hub_private_repo,
        card_info=card_info_for(output_dir, eval_summary_path=eval_summary),
        revision=training_args.hub_revision,
        token=training_args.hub_token,
    )
    print(f"pushed {output_dir} to {url}")
    return url
