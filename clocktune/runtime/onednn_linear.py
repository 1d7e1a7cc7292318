"""The engine's linear layers on a CPU through oneDNN, with weights packed once for it.

Why: a forward's linear layers are most of its time (two thirds of a batch-1 decode step). PyTorch's CPU
``F.linear`` hands the weights as stored to MKL's GEMM; oneDNN's inner product over a weight reordered once into its
own blocked layout (inductor's choice for a frozen float32 linear layer whose row count varies) computes the same
products sooner here.
Measured on the demo's checkpoint (2-core AMD EPYC, docs/benchmarks-history.md): its 50 held-out dialogues played
1.08x faster at batch 1 (two runs) and 1.07x and 1.17x at batch 16, every log the same.

What it costs: a second copy of the linear weights (the model keeps its own for training), so it is on by default
only on a CPU, in float32, for a model whose linear weights take at most :data:`MAX_PACKED_BYTES`; and the results
differ from ``F.linear``'s by float reordering (~1e-6), as any two BLAS kernels' do.

Only the engine's forwards use it: :meth:`PackedLinears.installed` gives each ``nn.Linear`` of the model an instance
``forward`` for the duration of one forward and takes it away after, so training, TRL's log-prob passes and copies
of the model (``deepcopy``) see plain modules. A weight changed (an optimizer step, fused ones included, a state
dict loaded, a weight replaced) moves its stamp (:mod:`runtime.weight_changes`, as for the quantized drafter's
rebuild), and the next forward packs it again; a change through ``.data`` outside an optimizer moves nothing.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Iterator
from typing import Any

import torch

from clocktune.runtime.weight_changes import tensor_stamp

__all__ = ["MAX_PACKED_BYTES", "PackedLinears", "packed_linears"]

# The largest second copy of the linear weights made by default: the embedded model's is 0.5 GB, a 3B model's 12 GB
# (in float32) would double what a CPU machine holds for it.
MAX_PACKED_BYTES = 2 * 1024**3

_SHARED: weakref.WeakKeyDictionary[Any, PackedLinears] = weakref.WeakKeyDictionary()


def _available() -> bool:
    mkldnn = torch.ops.mkldnn
    return torch.backends.mkldnn.is_available() and all(
        hasattr(mkldnn, name) for name in ("_reorder_linear_weight", "_linear_pointwise")
    )


def _packable(module: torch.nn.Module) -> bool:
    if not isinstance(module, torch.nn.Linear):
        return False
    weight = module.weight
    # A plain float32 CPU tensor: not a quantized tensor subclass (torchao's drafters), not a meta or GPU weight.
    return type(weight.data) is torch.Tensor and weight.dtype == torch.float32 and weight.device.type == "cpu"


class PackedLinears:
    """oneDNN-packed copies of a model's linear weights, used by the engine's forwards.

    Args:
        model: The model whose ``nn.Linear`` modules (float32, on the CPU) are packed.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.modules = [module for module in model.modules() if _packable(module)]
        # Per module: (the weight's stamp when packed, the packed weight).
        self._packed: dict[int, tuple[tuple[int, int, int], torch.Tensor]] = {}
        self.packs = 0  # weights packed so far (a count for tests and benchmarks)
        # Each module's forward, made once: installing them is then two dict writes a module (~1 ms a forward
        # through nn.Module's own attribute setting, for the embedded model's 211 layers).
        self._forwards = [(module, functools.partial(self._forward, module)) for module in self.modules]
        self._depth = 0  # installed() blocks open (an engine's forward inside another's installs once)

    def weight(self, module: torch.nn.Linear) -> torch.Tensor:
        """The module's weight packed for oneDNN, packed again if it changed since."""
        weight = module.weight
        stamp = tensor_stamp(weight)
        held = self._packed.get(id(module))
        if held is None or held[0] != stamp:
            held = (stamp, torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1))
            self._packed[id(module)] = held
            self.packs += 1
        return held[1]

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Within the block (no autograd), the model's packable linear layers compute through oneDNN."""
        if self._depth == 0:
            for module, forward in self._forwards:
                module.__dict__["forward"] = forward  # an instance attribute: this module only
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                for module, _ in self._forwards:
                    module.__dict__.pop("forward", None)

    def _forward(self, module: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
        rows = hidden.reshape(-1, hidden.shape[-1])
        bias = module.bias.detach() if module.bias is not None else None
        output = torch.ops.mkldnn._linear_pointwise(rows, self.weight(module), bias, "none", [], "")
        return output.reshape(*hidden.shape[:-1], output.shape[-1])


def packed_linears(model: torch.nn.Module, enabled: bool | None = None) -> PackedLinears | None:
    """The model's packed linear weights, shared by every engine over it, or ``None`` where they are not used.

    Args:
        model: The model.
        enabled: ``None``: on where it is measured to pay and the copy is small (a CPU, float32, linear weights of at
            most :data:`MAX_PACKED_BYTES`); ``True``: on wherever oneDNN can run it; ``False``: off.
    """
    if enabled is False or not _available():
        return None
    shared = _SHARED.get(model)
    if shared is None:
        shared = PackedLinears(model)
        _SHARED[model] = shared
    if not shared.modules:
        return None
    if enabled is None:
        size = sum(module.weight.numel() * module.weight.element_size() for module in shared.modules)
        if size > MAX_PACKED_BYTES:
            return None
    return shared
