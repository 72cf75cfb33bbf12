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

**Mixed precision** (``compute_dtype``, e.g. ``torch.bfloat16``: :mod:`lecture_code.perf.bf16_mlps`). The
parameters stay fp32, the master weights, and so does their update; the GEMMs run on copies in
``compute_dtype`` (``weight_copy``, ``bias_copy``: plain attributes, outside the state dict), which a forward
pre-hook on the wrapped module refreshes from the masters at the start of every forward, all in one
``torch._foreach_copy_``. A layer casts its input to ``compute_dtype`` (a no-op after the first layer) and
returns its output in it; its backward returns dX in the input's dtype. The update is then ``dW = gᵀ x`` in
``compute_dtype`` (fp32 accumulation inside the GEMM, the result rounded, as autocast's weight gradients are)
added into the fp32 W (``W.add_(dW, alpha=−lr)``: two kernels where fp32 has one ``addmm_``), and ``Σ g``
summed into fp32 for the bias.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from lecture_code.internals import foreach_copy_

__all__ = ["LinearSGDInBackward", "sgd_in_backward"]


def _bias_sgd(bias: torch.Tensor, grad: torch.Tensor, lr: float) -> None:
    bias.sub_(grad.sum(0, dtype=bias.dtype), alpha=lr)  # a bf16 gradient summed into fp32


# One reduction kernel that writes b (eager: a sum, then a sub); dynamic: one compilation for every width
# (its callers pass ``bias.detach()``: dynamo keeps a Parameter's shape static and would compile per layer).
_bias_sgd_compiled = torch.compile(_bias_sgd, dynamic=True)


class _LinearSGD(torch.autograd.Function):
    """Forward ``F.linear``; backward returns dX and applies SGD to the layer's W and b (no gradients)."""

    @staticmethod
    def forward(ctx, x, weight, bias, layer):
        weight, bias = layer.matmul_operands()  # the parameters, or their copies in the compute dtype
        ctx.input_dtype = x.dtype
        x = x.to(weight.dtype)  # a no-op but at a mixed-precision MLP's first layer
        ctx.save_for_backward(x)
        ctx.layer = layer
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        layer = ctx.layer
        weight = layer.matmul_operands()[0]
        dx = (grad @ weight).to(ctx.input_dtype) if ctx.needs_input_grad[0] else None  # before the update
        layer.apply_sgd(grad.reshape(-1, grad.shape[-1]), x.reshape(-1, x.shape[-1]))
        return dx, None, None, None


class LinearSGDInBackward(nn.Module):
    """An ``nn.Linear``'s parameters whose backward applies SGD (``lr``) to them: on ``stream`` beside the
    current one (a GPU), or on the current stream if None. Its parameters must require grad (that is what
    makes autograd run the backward). ``compute_dtype``: the GEMMs' dtype when it is not the parameters'
    (module docstring: mixed precision), on copies that :func:`sgd_in_backward`'s pre-hook refreshes."""

    def __init__(
        self,
        linear: nn.Linear,
        lr: float,
        stream: torch.cuda.Stream | None = None,
        compute_dtype: torch.dtype | None = None,
    ):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.lr = float(lr)
        self.stream = stream
        low = compute_dtype is not None and compute_dtype != linear.weight.dtype
        self.weight_copy = linear.weight.detach().to(compute_dtype) if low else None
        self.bias_copy = None if not low or linear.bias is None else linear.bias.detach().to(compute_dtype)

    def matmul_operands(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The weight and bias the GEMMs read: the parameters, or their copies in the compute dtype."""
        if self.weight_copy is None:
            return self.weight, self.bias
        return self.weight_copy, self.bias_copy

    def copies_and_masters(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``(copy, parameter)`` pairs to refresh before a forward (none at the parameters' own dtype)."""
        if self.weight_copy is None:
            return []
        pairs = [(self.weight_copy, self.weight.detach())]
        return pairs + ([] if self.bias is None else [(self.bias_copy, self.bias.detach())])

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
        if grad.dtype == self.weight.dtype:
            self.weight.addmm_(grad.t(), x, alpha=-self.lr)
        else:  # dW in the compute dtype (fp32 accumulation inside the GEMM), the update in fp32
            self.weight.add_(grad.t() @ x, alpha=-self.lr)
        if self.bias is not None:
            bias_sgd(self.bias.detach(), grad, self.lr)  # the same storage, updated in place

    def join(self) -> None:
        """Make the current stream wait for this layer's updates (a no-op without a stream)."""
        if self.stream is not None:
            torch.cuda.current_stream(self.weight.device).wait_stream(self.stream)

    def extra_repr(self) -> str:
        out_features, in_features = self.weight.shape
        low = "" if self.weight_copy is None else f", compute_dtype={self.weight_copy.dtype}"
        return f"in_features={in_features}, out_features={out_features}, lr={self.lr}{low}"


def sgd_in_backward(
    module: nn.Module, lr: float, streams: int = 2, compute_dtype: torch.dtype | None = None
) -> Callable[[], None]:
    """Replace every ``nn.Linear`` inside ``module`` by a :class:`LinearSGDInBackward` (in place), the i-th
    on side stream ``i % streams`` on a GPU; return ``join``, to call after each ``loss.backward()`` and
    before anything reads the weights. ``compute_dtype`` (mixed precision, module docstring): the layers'
    GEMMs in that dtype, their copies refreshed by a forward pre-hook on ``module`` (so only a forward of
    ``module`` itself refreshes them)."""
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
        layer = LinearSGDInBackward(child, lr, side[i % len(side)], compute_dtype)
        setattr(parent, name, layer)
        layers.append(layer)
    pairs = [pair for layer in layers for pair in layer.copies_and_masters()]
    if pairs:
        copies, masters = (list(t) for t in zip(*pairs, strict=True))

        @torch.no_grad()
        def refresh_copies(*_) -> None:  # one multi-tensor kernel for all the layers' copies
            foreach_copy_(copies, masters)

        module.register_forward_pre_hook(refresh_copies)

    def join() -> None:
        for layer in layers[: len(side)]:  # the first layer on each side stream
            layer.join()

    return join
