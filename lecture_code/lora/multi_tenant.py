"""Multi-tenant scoring on DLRM: one LoRA adapter per market on the over-arch, a mixed batch in one pass.

A recommendation service fine-tunes one adapter per market (or advertiser) on the top MLP and keeps one
frozen base model. A batch of requests mixes markets; a request whose market has no adapter (id −1) is
scored by the base model. Two ways to serve it:

- **one mixed pass** (:func:`score_mixed`): the shared bottom of the model (dense arch, embeddings,
  interaction) once for the whole batch, then each over-arch linear as ``y = h Wᵀ + b`` for every row
  followed by :func:`kernels.multi_lora.shrink_expand.add_multi_lora`, which adds ``s_m · (h A_mᵀ) B_mᵀ`` to
  the rows of market m and leaves the −1 rows untouched. The token→adapter grouping
  (:func:`kernels.multi_lora.metadata.
  build_meta`) is built once per batch and reused by every over-arch layer.
- **one pass per market** (:func:`score_per_market`, the reference): every market's adapter merged into a
  copy of the model (``W + s·B A``, :meth:`lecture_code.lora.LoRALinear.merge`), the batch split by market
  (a ``nonzero`` per market: a host sync on a GPU), each part scored by its own merged model, the base
  model for the −1 rows, the logits scattered back.

Both give the same logits up to rounding (merging changes the order of the sums); the −1 rows of the mixed
pass are bitwise the base model's. :func:`time_serving` times both. Notation: B requests, L markets
(stacked adapters), r the rank; over-arch linear i maps ``K_i`` to ``N_i`` features.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from kernels import runtime
from kernels.multi_lora.metadata import MultiLoRAMeta, build_meta
from kernels.multi_lora.shrink_expand import add_multi_lora
from lecture_code import bench
from lecture_code.lora.apply import apply_lora, linear_names, lora_modules, merge_lora
from lecture_code.model import DLRM, DLRMConfig

__all__ = [
    "MarketAdapters",
    "ServingTiming",
    "TenantSetup",
    "make_setup",
    "merged_models",
    "over_arch_linears",
    "random_market_adapters",
    "random_requests",
    "score_mixed",
    "score_per_market",
    "time_serving",
]

FN = "score_mixed"


def over_arch_linears(model: DLRM) -> dict[str, nn.Linear]:
    """The over-arch's ``nn.Linear`` layers by qualified name (``over_arch.model.0``, …), in order."""
    found = {n: model.get_submodule(n) for n in linear_names(model) if n.startswith("over_arch.")}
    if not found:
        raise ValueError(
            "over_arch_linears: the model's over-arch has no nn.Linear (is it a LoRA-wrapped copy?)"
        )
    return found


@dataclass(frozen=True)
class MarketAdapters:
    """L adapters (one per market) for every over-arch linear, stacked as :func:`add_multi_lora` wants them.

    ``lora_a[i]`` [L, r, K_i] and ``lora_b[i]`` [L, N_i, r] for the i-th linear of ``layers``; ``scale``
    [L] fp32, one s = α / r per market. Market m's adapter for layer i is ``(lora_a[i][m], lora_b[i][m])``
    in :class:`~lecture_code.lora.LoRALinear`'s layout (A [r, K], B [N, r]).
    """

    layers: tuple[str, ...]
    lora_a: tuple[torch.Tensor, ...]
    lora_b: tuple[torch.Tensor, ...]
    scale: torch.Tensor

    @property
    def num_markets(self) -> int:
        return self.scale.shape[0]

    @property
    def rank(self) -> int:
        return self.lora_a[0].shape[1]


def random_market_adapters(
    model: DLRM, num_markets: int, r: int, alpha: float | None = None, seed: int = 0
) -> MarketAdapters:
    """Adapters for ``num_markets`` markets on every over-arch linear, as if trained: A as PEFT initialises
    it (U(−1/√K, 1/√K)), B random (N(0, 1/r), where a fresh adapter's B would be 0 and change nothing), one
    scale per market (α / r times a per-market factor in [0.5, 1.5), so scales differ). Made on the CPU
    from ``seed`` and moved to the model's device and dtype: the same adapters on every machine."""
    if num_markets < 1 or r < 1:
        raise ValueError(f"random_market_adapters: num_markets={num_markets} and r={r} must be ≥ 1")
    g = torch.Generator().manual_seed(seed)
    linears = over_arch_linears(model)
    weight = next(iter(linears.values())).weight
    like = {"device": weight.device, "dtype": weight.dtype}
    a, b = [], []
    for lin in linears.values():
        n, k = lin.weight.shape
        a.append(((torch.rand(num_markets, r, k, generator=g) * 2 - 1) / math.sqrt(k)).to(**like))
        b.append((torch.randn(num_markets, n, r, generator=g) / math.sqrt(r)).to(**like))
    alpha = float(r if alpha is None else alpha)
    scale = (alpha / r) * (0.5 + torch.rand(num_markets, generator=g))
    return MarketAdapters(tuple(linears), tuple(a), tuple(b), scale.to(weight.device))


def _check_batch(model, adapters: MarketAdapters, dense, sparse, adapter_ids) -> None:
    if not isinstance(adapter_ids, torch.Tensor) or adapter_ids.dim() != 1:
        raise ValueError(
            f"{FN}: adapter_ids must be a 1-D tensor [B], got {getattr(adapter_ids, 'shape', None)}"
        )
    if adapter_ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(
            f"{FN}: adapter_ids has dtype {adapter_ids.dtype}; use int32 or int64 (−1 = no adapter)"
        )
    B = adapter_ids.shape[0]
    if dense.dim() != 2 or sparse.dim() != 2 or dense.shape[0] != B or sparse.shape[0] != B:
        raise ValueError(
            f"{FN}: dense [B, 13], sparse [B, F] and adapter_ids [B] must share B; got {tuple(dense.shape)}, "
            f"{tuple(sparse.shape)}, {tuple(adapter_ids.shape)}"
        )
    device = model.over_arch.model[0].weight.device
    for name, t in (("dense", dense), ("sparse", sparse), ("adapter_ids", adapter_ids)):
        if t.device != device:
            raise ValueError(f"{FN}: {name} is on {t.device}, the model on {device}")
    linears = over_arch_linears(model)
    if tuple(linears) != adapters.layers:
        raise ValueError(f"{FN}: the adapters are for layers {list(adapters.layers)}, the model's over-arch "
                         f"has {list(linears)}")  # fmt: skip
    for (name, lin), a, b in zip(linears.items(), adapters.lora_a, adapters.lora_b, strict=True):
        if a.shape[2] != lin.in_features or b.shape[1] != lin.out_features:
            raise ValueError(
                f"{FN}: {name} maps {lin.in_features} → {lin.out_features} features, but its adapters are "
                f"A {tuple(a.shape)}, B {tuple(b.shape)} ([L, r, K], [L, N, r]): adapters for another model?"
            )


@torch.no_grad()
def score_mixed(
    model: DLRM,
    adapters: MarketAdapters,
    dense: torch.Tensor,
    sparse: torch.Tensor,
    adapter_ids: torch.Tensor,
    meta: MultiLoRAMeta | None = None,
) -> torch.Tensor:
    """Logits [B] of a mixed batch in one pass: request b scored by the base model plus market
    ``adapter_ids[b]``'s adapter on every over-arch linear (−1: the base model alone).

    ``dense`` [B, 13] float, ``sparse`` [B, F] raw ids, ``adapter_ids`` [B] int32/int64 in [−1, L); ``meta``:
    :func:`build_meta` of ``adapter_ids`` (built here when None; on a CPU it also rejects ids outside
    [−1, L) with the index of the first one). The base model is used as is (eager modules, frozen).
    """
    _check_batch(model, adapters, dense, sparse, adapter_ids)
    if meta is None:
        meta = build_meta(adapter_ids, adapters.num_markets)
    h = model.inter_arch(model.dense_arch(dense), model.sparse_arch(sparse))  # [B, I]
    layers = list(over_arch_linears(model).values())
    for i, lin in enumerate(layers):
        y = F.linear(h, lin.weight, lin.bias)  # every row: the base layer
        add_multi_lora(y, h, adapters.lora_a[i], adapters.lora_b[i], adapter_ids, adapters.scale, meta=meta)
        h = torch.relu(y) if i < len(layers) - 1 else y
    return h.squeeze(-1)


def merged_models(model: DLRM, adapters: MarketAdapters) -> list[DLRM]:
    """One copy of ``model`` per market with that market's adapter merged into its over-arch weights
    (:func:`lecture_code.lora.apply_lora`, the adapter's A, B and scale copied in, then
    :func:`~lecture_code.lora.merge_lora`: ``W + s·B A``). What a service keeps when it merges instead."""
    out = []
    for m in range(adapters.num_markets):
        merged = apply_lora(copy.deepcopy(model), list(adapters.layers), r=adapters.rank)
        layers = lora_modules(merged)
        with torch.no_grad():
            for i, name in enumerate(adapters.layers):
                layers[name].lora_a.copy_(adapters.lora_a[i][m])
                layers[name].lora_b.copy_(adapters.lora_b[i][m])
                layers[name].scale = float(adapters.scale[m])
        out.append(merge_lora(merged).eval())
    return out


@torch.no_grad()
def score_per_market(
    model: DLRM,
    merged: list[DLRM],
    dense: torch.Tensor,
    sparse: torch.Tensor,
    adapter_ids: torch.Tensor,
) -> torch.Tensor:
    """Logits [B], one pass per market: the rows of market m (``nonzero``) through ``merged[m]``, the −1 rows
    through ``model``, scattered back into batch order. The reference for :func:`score_mixed`."""
    out = torch.empty(adapter_ids.shape[0], device=dense.device, dtype=dense.dtype)
    for m, net in enumerate([model, *merged], start=-1):
        rows = (adapter_ids == m).nonzero().squeeze(1)
        if rows.numel():
            out[rows] = net(dense[rows], sparse[rows])
    return out


@dataclass(frozen=True)
class TenantSetup:
    """A base DLRM, its market adapters and one batch of mixed requests (see :func:`make_setup`)."""

    model: DLRM
    adapters: MarketAdapters
    dense: torch.Tensor
    sparse: torch.Tensor
    adapter_ids: torch.Tensor


def random_requests(
    config: DLRMConfig, batch: int, num_markets: int, device: torch.device, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dense [B, 13], sparse [B, F], adapter_ids [B])`` made on the CPU from ``seed``: log-count-like dense
    features, raw sparse ids, and markets drawn uniformly from [−1, L) (about 1 in L + 1 requests from a
    market without an adapter), in no particular order."""
    g = torch.Generator().manual_seed(seed)
    dense = torch.log1p(torch.rand(batch, config.num_dense, generator=g) * 100)
    sparse = torch.randint(0, 1 << 20, (batch, config.num_sparse), generator=g)
    ids = torch.randint(-1, num_markets, (batch,), generator=g)
    return dense.to(device), sparse.to(device), ids.to(device)


def make_setup(
    batch: int | None = None,
    num_markets: int = 8,
    r: int = 8,
    preset: str | None = None,
    device: torch.device | None = None,
    seed: int = 0,
) -> TenantSetup:
    """A random base DLRM (``modulus`` hashing, 26 tables of 1000 rows), ``num_markets`` adapters of rank
    ``r`` and ``batch`` requests. Defaults follow the runtime mode: the ``small`` preset (top MLP
    367-128-64-1) and ``kernels.runtime.sizes().batch_size`` requests on a CPU (the kernels run in the
    interpreter), the ``kaggle`` preset (top MLP 367-512-256-1) and the full batch size on a GPU."""
    device = device or runtime.default_device()
    gpu = device.type == "cuda"
    batch = runtime.sizes().batch_size if batch is None else batch
    preset = preset or ("kaggle" if gpu else "small")
    torch.manual_seed(seed)
    config = DLRMConfig.preset(preset, (1000,) * 26, hashing="modulus")
    model = DLRM(config).to(device).eval().requires_grad_(False)
    adapters = random_market_adapters(model, num_markets, r, seed=seed + 1)
    return TenantSetup(model, adapters, *random_requests(config, batch, num_markets, device, seed + 2))


@dataclass(frozen=True)
class ServingTiming:
    """Median ms of one mixed pass (metadata built in the call) and of one pass per market, same batch."""

    device: str
    batch: int
    markets: int
    mixed_ms: float
    per_market_ms: float

    @property
    def speedup(self) -> float:
        return self.per_market_ms / self.mixed_ms

    def __str__(self) -> str:
        return (
            f"{self.batch} requests, {self.markets} markets on {self.device}: one mixed pass "
            f"{self.mixed_ms:.3f} ms, one pass per market {self.per_market_ms:.3f} ms "
            f"(per-market / mixed = {self.speedup:.2f}x)"
        )


def time_serving(setup: TenantSetup, merged: list[DLRM] | None = None, cpu_reps: int = 3) -> ServingTiming:
    """Time :func:`score_mixed` (``build_meta`` included: once per batch) against :func:`score_per_market`
    with :func:`lecture_code.bench.median_ms` (device time on a GPU; wall clock on a CPU, where the
    mixed pass's kernels run in Triton's interpreter and the timing only shows that the code runs)."""
    s = setup
    merged = merged_models(s.model, s.adapters) if merged is None else merged
    device = s.dense.device
    mixed = bench.median_ms(
        lambda: score_mixed(s.model, s.adapters, s.dense, s.sparse, s.adapter_ids), device, cpu_reps
    )
    loop = bench.median_ms(
        lambda: score_per_market(s.model, merged, s.dense, s.sparse, s.adapter_ids), device, cpu_reps
    )
    name = bench.stamp(device)["device"]
    return ServingTiming(name, s.dense.shape[0], s.adapters.num_markets, mixed, loop)
