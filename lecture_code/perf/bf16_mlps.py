"""Mixed precision for the SGD-in-backward step: the two MLPs' GEMMs in bf16, everything else fp32.

The fp32 step's goal of 2× the two-tricks step is out of reach at fp32: its MLP GEMMs alone take about
0.33 ms on cuBLAS (H100, batch 2048). bf16 tensor cores run them at a fraction of that. What changes, and what
does not (:func:`bf16_mlps_with_sgd_in_backward`):

- **bf16**: the MLP layers' forward GEMM (``F.linear``), the dX GEMM of their backward and the dW GEMM of
  their update, and the activations between the layers (ReLU on bf16). Each product accumulates in fp32
  inside cuBLAS; its result is rounded to bf16 (8-bit mantissa).
- **fp32**: the master weights and biases (the ``nn.Linear`` parameters, state dict unchanged) and their SGD
  update (``W ← W − lr · dW`` with dW rounded to bf16, as autocast's weight gradients are; ``Σ g`` summed in
  fp32 for the bias); the embedding tables and their SGD (the fused backward); the interaction; the loss.

How, rather than ``torch.autocast``: the layers apply SGD inside their own backward
(:mod:`.mlp_sgd_in_backward`), a custom autograd Function that autocast would not cast for (its backward
would meet a bf16 gradient and an fp32 weight), and autocast's cast cache must be off under CUDA-graph
capture. So the casts are explicit: each layer keeps a bf16 copy of its weight and bias, refreshed from the
fp32 masters by one ``torch._foreach_copy_`` at the start of every forward (a forward pre-hook on the model:
captured in the graph, and right after the graph's warm-up restores the masters); a layer casts its input to
bf16 (a no-op but at each MLP's first layer), and a forward hook on each MLP casts its output back to fp32
(the fused interaction and the loss take fp32). Autograd casts the gradients back at those two points.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from lecture_code.perf.mlp_sgd_in_backward import sgd_in_backward

__all__ = ["MLP_DTYPE", "bf16_mlps_with_sgd_in_backward", "float32_outputs"]

MLP_DTYPE = torch.bfloat16
"""The dtype of the MLPs' GEMMs and activations in the mixed-precision step."""


def _to_float32(module: nn.Module, args, output: torch.Tensor) -> torch.Tensor:
    return output.float()


def float32_outputs(module: nn.Module) -> None:
    """Cast ``module``'s output to fp32 (a forward hook; differentiable: its gradient comes back in bf16)."""
    module.register_forward_hook(_to_float32)


def bf16_mlps_with_sgd_in_backward(model: nn.Module, lr: float, streams: int = 2) -> Callable[[], None]:
    """Make ``model``'s two MLPs (``dense_arch``, ``over_arch``: its only ``nn.Linear``) compute in bf16 with
    SGD in their backward (:func:`~lecture_code.perf.mlp_sgd_in_backward.sgd_in_backward`, fp32 masters,
    ``streams`` side streams on a GPU), their outputs cast back to fp32. Returns ``join``, to call after
    each ``loss.backward()``."""
    join = sgd_in_backward(model, lr, streams, compute_dtype=MLP_DTYPE)
    for mlp in (model.dense_arch, model.over_arch):
        float32_outputs(mlp)
    return join
