"""What changes when a model's weights do: the stamp that tells a copy derived from them to be made again.

Why: the engine derives copies from a model's weights (oneDNN-packed linear weights, a quantized drafter), and a
copy must be made again once the weights it came from change; comparing the weights' values at every forward would
read them all. A tensor's storage pointer and in-place version counter move on most changes: a state dict loaded, a
weight replaced, ``param.add_`` under ``no_grad``, torch's for-each optimizers. Not on all: torch's fused AdamW, which
the 🤗 Trainer uses by default (``optim="adamw_torch_fused"``), writes its parameters without moving their version
counters (measured: ``_version`` unchanged by ``step()``), so a GRPO run's rollouts would play the weights of its
first step. The stamp therefore also counts optimizer steps, through torch's global step hook: any optimizer's step
in the process makes every derived copy stale, and the next forward derives it again (a fraction of a second for the
embedded model). A write through ``.data`` outside an optimizer still moves nothing and goes unseen.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

__all__ = ["optimizer_steps", "tensor_stamp", "weights_stamp"]

_steps = 0  # optimizer steps taken in this process since this module was imported


def _count_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    global _steps
    _steps += 1


register_optimizer_step_post_hook(_count_step)


def optimizer_steps() -> int:
    """Optimizer steps taken in this process (by any optimizer) since the engine was imported."""
    return _steps


def tensor_stamp(tensor: torch.Tensor) -> tuple[int, int, int]:
    """What moves when a tensor's values may have: its storage, its in-place version and the optimizer steps taken.

    Args:
        tensor: A weight.

    Returns:
        A tuple that differs after an optimizer step (fused ones included), a state dict loaded or the weight
        replaced.
    """
    return tensor.data_ptr(), tensor._version, _steps


def weights_stamp(model: Any) -> tuple[int, ...]:
    """:func:`tensor_stamp` of a whole model: each parameter's storage and version, and the optimizer steps taken.

    Args:
        model: A torch module.

    Returns:
        A tuple that differs after an optimizer step, a merge or a reload.
    """
    return (_steps, *(value for p in model.parameters() for value in (p.data_ptr(), p._version)))
