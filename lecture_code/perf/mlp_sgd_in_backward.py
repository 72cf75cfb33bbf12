"""The MLPs' SGD inside their backward, off the critical path: each layer's update on a side stream.

After the fused kernels and one CUDA graph, the fp32 DLRM step (Kaggle preset, batch 2048) is a chain of small
cuBLAS GEMMs that one after another leave most of the GPU idle. The backward of a linear layer
``y = x Wᵀ + b`` with output gradient g makes three things: ``dX = g W``, which the layer below needs next
(the chain every step waits for), and ``dW = gᵀ x``, ``db = Σ g``, which only the optimizer needs. So, for
plain SGD, as the table-batched embedding does for the tables:

- **SGD in the backward.** ``W ← W − lr·gᵀx`` is ONE GEMM, ``W.addmm_(gᵀ, x, alpha=−lr)`` (cuBLAS adds the
  product into W: no dW tensor, no optimizer pass), and ``b ← b − lr·Σg`` one compiled reduction (on a GPU).
- **Beside the chain.** A layer's backward enqueues dX on the current stream first (dX reads W before the
  update writes it), forks a side stream there, and enqueues the update on it: the updates run beside the dX
  GEMMs of the layers below, on the SMs those leave idle. Consecutive layers alternate over ``streams`` side
  streams (two by default), so each update also runs beside the next layer's.
- **One join.** :func:`sgd_in_backward` returns ``join``, which the step calls after ``loss.backward()``
  (every side stream merged back into the current one); a CUDA graph captures the forks and the join.

Measured on an H100 (``.gpu``-style probes, 2026-11-24, fp32, Kaggle preset, batch 2048, one CUDA graph per
step; the committed numbers are the benchmark's): against the compiled MLPs and their compiled optimizer step
(0.40 ms/step), the updates on one side stream shared by all layers gave 0.38; with the loss compiled as well,
one stream per MLP 0.357 (0.344 with the hash compiled too), one stream per layer 0.346. Each stream costs
a cuBLAS workspace of 32 MiB (PyTorch keeps one per stream, never freed), so the count was measured too, with
the benchmark row's loss and hash compiled (2026-11-24, uniform / zipf ids, memory the step keeps on top of
the tables): one stream per layer 0.3345 / 0.3358 ms and 225 MiB, two alternating 0.3341 / 0.3352 ms and 65
MiB, one per MLP 0.3498 / 0.3499 ms and 65 MiB, one for all 0.361 / 0.358 ms. The weights after one step
match the compiled-MLP step's to 5·10⁻⁷ (updates of 2·10⁻²).

Plain SGD only (no momentum or weight decay: their state would need a pass of its own), and ``lr`` is a
number fixed when a graph is captured (``alpha`` is recorded with the launch). The wrapped layers keep the
``nn.Linear``'s parameters, so state-dict keys do not change; their ``.grad`` stays ``None``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["LinearSGDInBackward", "sgd_in_backward"]


def _bias_sgd(bias: torch.Tensor, grad: torch.Tensor, lr: float) -> None:
    bias.sub_(grad.sum(0), alpha=lr)


# One reduction kernel that writes b (eager: a sum, then a sub); dynamic: one compilation for every width
# (its callers pass ``bias.detach()``: dynamo keeps a Parameter's shape static and would compile per layer).
_bias_sgd_compiled = torch.compile(_bias_sgd, dynamic=True)


class _LinearSGD(torch.autograd.Function):
    """Forward ``F.linear``; backward returns dX and applies SGD to the layer's W and b (no gradients)."""

    @staticmethod
    def forward(ctx, x, weight, bias, layer):
        ctx.save_for_backward(x)
        ctx.layer = layer
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        layer = ctx.layer
        dx = grad @ layer.weight if ctx.needs_input_grad[0] else None  # enqueued before the update
        layer.apply_sgd(grad.reshape(-1, grad.shape[-1]), x.reshape(-1, x.shape[-1]))
        return dx, None, None, None


class LinearSGDInBackward(nn.Module):
    """An ``nn.Linear``'s parameters whose backward applies SGD (``lr``) to them: on ``stream`` beside the
    current one (a GPU), or on the current stream if None. Its parameters must require grad (that is what
    makes autograd run the backward)."""

    def __init__(self, linear: nn.Linear, lr: float, stream: torch.cuda.Stream | None = None):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.lr = float(lr)
        self.stream = stream

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _LinearSGD.apply(x, self.weight, self.bias, self)

    @torch.no_grad()
    def apply_sgd(self, grad: torch.Tensor, x: torch.Tensor) -> None:
        bias_sgd = _bias_sgd_compiled if grad.is_cuda else _bias_sgd
        if self.stream is None:
            self._sgd(grad, x, bias_sgd)
            return
        self.stream.wait_stream(torch.cuda.current_stream(grad.device))
        with torch.cuda.stream(self.stream):
            self._sgd(grad, x, bias_sgd)
        grad.record_stream(self.stream)  # freed by autograd on the current stream, still read on this one
        x.record_stream(self.stream)

    def _sgd(self, grad, x, bias_sgd) -> None:
        self.weight.addmm_(grad.t(), x, alpha=-self.lr)
        if self.bias is not None:
            bias_sgd(self.bias.detach(), grad, self.lr)  # the same storage, updated in place

    def join(self) -> None:
        """Make the current stream wait for this layer's updates (a no-op without a stream)."""
        if self.stream is not None:
            torch.cuda.current_stream(self.weight.device).wait_stream(self.stream)

    def extra_repr(self) -> str:
        out_features, in_features = self.weight.shape
        return f"in_features={in_features}, out_features={out_features}, lr={self.lr}"


def sgd_in_backward(module: nn.Module, lr: float, streams: int = 2) -> Callable[[], None]:
    """Replace every ``nn.Linear`` inside ``module`` by a :class:`LinearSGDInBackward` (in place), the i-th
    on side stream ``i % streams`` on a GPU; return ``join``, to call after each ``loss.backward()`` and
    before anything reads the weights."""
    if streams < 1:
        raise ValueError(f"sgd_in_backward: streams must be at least 1, got {streams}")
    linears = [
        (parent, name, child)
        for parent in module.modules()
        for name, child in parent.named_children()
        if isinstance(child, nn.Linear)
    ]
    if not linears:
        raise ValueError(f"sgd_in_backward: no nn.Linear inside {type(module).__name__}")
    weight = linears[0][2].weight
    side = [torch.cuda.Stream(weight.device) for _ in range(streams)] if weight.is_cuda else [None]
    layers = []
    for i, (parent, name, child) in enumerate(linears):
        layer = LinearSGDInBackward(child, lr, side[i % len(side)])
        setattr(parent, name, layer)
        layers.append(layer)

    def join() -> None:
        for layer in layers[: len(side)]:  # the first layer on each side stream
            layer.join()

    return join
