"""Pure-torch references: the one definition of "correct" used by tests, benchmarks and notebooks."""

from __future__ import annotations

import torch


def vector_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """out = x + y (same shape, same dtype)."""
    return x + y


def bias_relu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """relu(x + bias), ``bias`` ``[N]`` broadcast over the rows of ``x`` ``[..., N]``; eager PyTorch."""
    return torch.relu(x + bias)


ACTIVATIONS = {
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "gelu_tanh": lambda z: torch.nn.functional.gelu(z, approximate="tanh"),
    "silu": torch.nn.functional.silu,
}


def add_mul_act(
    x: torch.Tensor, bias: torch.Tensor, y: torch.Tensor, alpha: float, activation: str
) -> torch.Tensor:
    """act(x + bias + alpha·y), ``act`` one of :data:`ACTIVATIONS`; eager PyTorch in the input dtype."""
    return ACTIVATIONS[activation](x + bias + alpha * y)


def fused_mlp(
    x: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
    final_activation: str = "sigmoid",
) -> torch.Tensor:
    """act(relu(x W1ᵀ + b1) W2ᵀ + b2): x ``[..., K]``, W1 ``[H, K]``, W2 ``[N, H]`` → ``[..., N]``.

    ``final_activation`` is ``"sigmoid"``, ``"relu"`` or ``"none"``. The hidden activations are materialised
    in the input dtype, as two ``nn.Linear`` layers would do.
    """
    h = torch.relu(torch.nn.functional.linear(x, w1, b1))
    z = torch.nn.functional.linear(h, w2, b2)
    if final_activation == "none":
        return z
    return ACTIVATIONS[final_activation](z)


def lora_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    scale: float,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """LoRA linear ``x Wᵀ + b + s·(x Aᵀ) Bᵀ``: x ``[..., K]``, W ``[N, K]``, A ``[r, K]``, B ``[N, r]``
    → ``[..., N]``.

    Eager PyTorch in the input dtype (t = x Aᵀ rounded to it, as PEFT computes it); differentiable in
    everything. Tests call it on float64 copies for the exact answer.
    """
    return torch.nn.functional.linear(x, weight, bias) + scale * ((x @ lora_a.t()) @ lora_b.t())


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b``: a ``[M, K]``, b ``[K, N]`` → ``[M, N]`` (``torch.mm``, cuBLAS on a GPU); the GEMM steps'
    reference. Tests call it on float64 copies for the exact answer."""
    return torch.mm(a, b)


def matmul_lowrank(
    a: torch.Tensor, b: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor, scale: float
) -> torch.Tensor:
    """``a @ b + s·(a Aᵀ) Bᵀ``: a ``[M, K]``, b ``[K, N]``, lora_a (A) ``[r, K]``, lora_b (B) ``[N, r]`` →
    ``[M, N]``; :func:`lora_linear` without a bias, b standing for Wᵀ. Eager PyTorch in the input dtype."""
    return torch.mm(a, b) + scale * ((a @ lora_a.t()) @ lora_b.t())


class _LoRAUnslothOrder(torch.autograd.Function):
    """The best plain-PyTorch order (after unsloth's ``LoRA_MLP``): base GEMM, then
    ``out.addmm_(t, Bᵀ, alpha=s)`` in place; hand-written backward ``dX = dY W + s (dY B) A``,
    ``dA = s (dY B)ᵀ x``, ``dB = s dYᵀ t``, saving x and t = x Aᵀ."""

    @staticmethod
    def forward(ctx, x, weight, lora_a, lora_b, scale, bias):
        x2 = x.reshape(-1, x.shape[-1])
        out = torch.nn.functional.linear(x2, weight, bias)
        t = x2 @ lora_a.t()
        out.addmm_(t, lora_b.t(), alpha=scale)
        ctx.save_for_backward(x2, weight, lora_a, lora_b, t)
        ctx.scale = scale
        return out.view(*x.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad):
        x2, weight, lora_a, lora_b, t = ctx.saved_tensors
        s = ctx.scale
        dy = grad.reshape(-1, grad.shape[-1])
        u = dy @ lora_b
        dx = (dy @ weight).addmm_(u, lora_a, alpha=s)
        da = (u.t() @ x2).mul_(s)
        db = (dy.t() @ t).mul_(s)
        return dx.view(grad.shape[:-1] + (x2.shape[1],)), None, da, db, None, None


def lora_linear_unsloth_order(x, weight, lora_a, lora_b, scale, bias=None):
    """:func:`lora_linear` in unsloth's order (weight and bias frozen: no gradient for them)."""
    return _LoRAUnslothOrder.apply(x, weight, lora_a, lora_b, scale, bias)


def embedding_tbe(
    weight: torch.Tensor,
    table_offsets: torch.Tensor,
    ids: torch.Tensor,
    offsets: torch.Tensor | None = None,
    pooling: str = "sum",
) -> torch.Tensor:
    """Table-batched pooled lookup → ``[B, F, D]``: packed ``weight [R, D]``, ``table_offsets`` int64
    ``[F+1]``, local ``ids [B, F]`` / ``[B, F, L]``, or flat ``[nnz]`` with ``offsets [B·F+1]``
    (bag ``b·F + f``).

    ``F.embedding_bag`` over the global rows (differentiable in ``weight``: its ``.grad`` is the dense
    gradient an outer optimizer would use). Empty bags give zeros.
    """
    F, D = table_offsets.numel() - 1, weight.shape[1]
    if offsets is None:
        B = ids.shape[0]
        flat = ids.reshape(B * F, -1)  # [B·F, L]: one row per bag
        rows = flat + table_offsets[:-1].repeat(B)[:, None]
        out = torch.nn.functional.embedding_bag(rows, weight, mode=pooling)
        return out.view(B, F, D)
    B = (offsets.numel() - 1) // F
    lengths = offsets[1:] - offsets[:-1]
    feature = torch.repeat_interleave(torch.arange(B * F, device=ids.device) % F, lengths)
    rows = ids + table_offsets[feature]
    out = torch.nn.functional.embedding_bag(rows, weight, offsets, mode=pooling, include_last_offset=True)
    return out.view(B, F, D)


def rowwise_adagrad_step(
    weight: torch.Tensor, state: torch.Tensor, grad: torch.Tensor, lr: float, eps: float
) -> None:
    """FBGEMM's exact row-wise Adagrad, in place, on the rows whose dense gradient ``grad [R, D]`` is nonzero
    (a touched row with a zero gradient would not change either): ``state_r += mean_D(g_r²)``,
    ``w_r -= lr · g_r / (sqrt(state_r) + eps)``. fp32 math."""
    touched = (grad != 0).any(dim=1)
    g = grad[touched].float()
    state[touched] += (g * g).mean(dim=1)
    update = lr * g / (state[touched].sqrt() + eps)[:, None]
    weight[touched] = (weight[touched].float() - update).to(weight.dtype)


def interaction_dot(dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
    """DLRM's dot interaction: dense ``[B, D]``, sparse ``[B, Fs, D]`` → ``[B, D + F(F-1)/2]`` (F = Fs + 1).

    ``T = [dense; sparse]`` ``[B, F, D]``, ``Z = T Tᵀ``, the strict lower triangle ``Z[i, j], i > j`` in
    row-major order (``torch.tril_indices(F, F, -1)``, DLRM's ``li, lj``), after ``dense``. Eager PyTorch.
    """
    t = torch.cat([dense.unsqueeze(1), sparse], dim=1)
    n = t.shape[1]
    i, j = torch.tril_indices(n, n, offset=-1, device=t.device)
    z = torch.bmm(t, t.transpose(1, 2))
    return torch.cat([dense, z[:, i, j]], dim=1)


def _lora_slices(lora_a, lora_b) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``[(A_s [L, r, K], B_s [L, N_s, r]), ...]`` from one stack each or sequences of stacks (slices)."""
    if isinstance(lora_a, torch.Tensor):
        return [(lora_a, lora_b)]
    return list(zip(lora_a, lora_b, strict=True))


def multi_lora(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a,
    lora_b,
    adapter_ids: torch.Tensor,
    scale: float | torch.Tensor,
) -> torch.Tensor:
    """Many adapters in one batch, out of place: ``y[t] + scale[id] · x[t] A[id]ᵀ B[id]ᵀ`` for tokens with an
    adapter, ``y[t]`` (a copy) for ``id = −1``.

    x ``[T, K]``, y ``[T, N]``; ``lora_a`` ``[L, r, K]`` and ``lora_b`` ``[L, N, r]``, or sequences of such
    stacks (slices: Q, K, V), slice s writing columns ``off_s : off_s + N_s`` of y in order; ``scale`` a
    float or an ``[L]`` tensor. Per token: each token's own adapter matrices are gathered (``A[ids]``
    ``[T', r, K]``) and applied with a batched matmul, in the input dtype (``x Aᵀ`` rounded to it, as a torch
    LoRA layer computes it). Tests call it on float64 copies for the exact answer.
    """
    out = y.clone()
    tok = (adapter_ids >= 0).nonzero().squeeze(1)
    ids = adapter_ids[tok].long()
    s = scale[ids].to(x.dtype)[:, None] if isinstance(scale, torch.Tensor) else scale
    xs = x[tok].unsqueeze(1)  # [T', 1, K]
    off = 0
    for a, b in _lora_slices(lora_a, lora_b):
        t = torch.bmm(xs, a[ids].transpose(1, 2))  # [T', 1, r]
        delta = torch.bmm(t, b[ids].transpose(1, 2)).squeeze(1)  # [T', N_s]
        out[tok, off : off + b.shape[1]] += s * delta
        off += b.shape[1]
    return out


def multi_lora_loop_(y, x, lora_a, lora_b, adapter_ids, scale):
    """Baseline: one pass per adapter, in place on y (what a layer with a dict of adapters does).

    For each adapter l: its tokens (``nonzero``, a host sync per adapter), ``x[tok] Aᵀ`` then ``· Bᵀ`` by
    cuBLAS, ``index_add_`` into y. L · (1 sync + ~6 kernels: ``==``, ``nonzero``, the gather ``x[tok]``, two
    matmuls, ``index_add_``) per call, whatever the batch.
    """
    L = (lora_a if isinstance(lora_a, torch.Tensor) else lora_a[0]).shape[0]
    for i in range(L):
        tok = (adapter_ids == i).nonzero().squeeze(1)
        if tok.numel() == 0:
            continue
        xs = x[tok]
        s = scale[i].item() if isinstance(scale, torch.Tensor) else scale
        off = 0
        for a, b in _lora_slices(lora_a, lora_b):
            delta = (xs @ a[i].t()) @ b[i].t()
            y[:, off : off + b.shape[1]].index_add_(0, tok, delta, alpha=s)
            off += b.shape[1]
    return y


def multi_lora_gather_bmm_(y, x, lora_a, lora_b, adapter_ids, scale):
    """Baseline without a host sync: gather every token's A and B (``A[ids]`` ``[T, r, K]``: T copies of
    the weights, T·r·(K + N) elements written and read again), two ``bmm``, a mask for the −1 tokens, add.
    In place on y; rows with −1 get ``+ 0``."""
    valid = adapter_ids >= 0
    ids = adapter_ids.clamp(min=0).long()
    s = scale[ids].to(x.dtype) if isinstance(scale, torch.Tensor) else scale
    s = (valid.to(x.dtype) * s)[:, None]
    xs = x.unsqueeze(1)
    off = 0
    for a, b in _lora_slices(lora_a, lora_b):
        delta = torch.bmm(torch.bmm(xs, a[ids].transpose(1, 2)), b[ids].transpose(1, 2)).squeeze(1)
        y[:, off : off + b.shape[1]].addcmul_(delta, s)
        off += b.shape[1]
    return y
