"""The DLRM training step, fusion by fusion: each implementation of RESULTS.md's table, built and measured
alike.

One SGD step (``lr``), the modulus hash (any id fits any table), the given preset and tables. Versions, in the
order the lecture applies them (each a named builder, validated against eager in the tests):

- ``eager, sparse grads``: ``nn.Embedding(sparse=True)``: 26 gathers, sparse gradients, SGD on them.
- ``eager, dense grads``: ``nn.Embedding`` as in :class:`~lecture_code.model.DLRM`: a dense ``[n_f, D]``
  gradient per table, SGD over every row of every table.
- ``compile, dense grads``: the same through ``torch.compile`` (``backend="compile"``).
- ``packed + index_add_``: the two simple tricks: the 26 tables as ONE packed buffer (one gather, no
  ``stack``), and exact SGD on the touched rows by ``weight.index_add_(0, rows, grad, alpha=-lr)`` inside the
  backward (:class:`PackedSGDSparseArch`): no dense gradient, no pass over the tables.
- ``packed + index_add_, CUDA graph``: that step captured once and replayed.
- ``fused``: ``backend="fused"``: the table-batched embedding with SGD in its backward + the fused dot
  interaction (:mod:`lecture_code.model.fused`).
- ``fused, CUDA graph`` and ``fused + compiled MLPs, CUDA graph``: replayed from one graph; the last also
  runs the two MLPs and their SGD step through ``torch.compile`` (the choice :mod:`lecture_code.model.fused`
  leaves eager).
- ``fused + compiled MLPs, atomic SGD, CUDA graph``: the same, the tables' SGD by atomic adds instead of sort
  + segment sums (``TableBatchedEmbedding(deterministic=False)``: one kernel; notebook 05's profile counts 16
  GPU events fewer per step; a repeated row's last bits depend on the adds' order, as ``index_add_``'s).
- ``fused + compiled MLPs, atomic SGD, TF32, CUDA graph``: the same, its MLP matmuls on TF32 tensor cores
  (built and captured under ``torch.set_float32_matmul_precision("high")``, restored after): not a fusion but
  a precision change (a 10-bit mantissa for the products, fp32 sums), the setting most fp32 training runs on
  a GPU use. Every other row keeps torch's default, ``"highest"`` (fp32 FMA matmuls).
  Why no fp32-accurate row on tensor cores (3xTF32: each product from three TF32 products,
  ``tl.dot(input_precision="tf32x3")``): plain Triton GEMMs on the step's 20 MLP GEMM shapes (batch 2048,
  each timed alone, best of 5–8 tiles, H100, 2026-11-24) sum to 362 µs against cuBLAS fp32's 333, with
  fp32-like errors (largest relative error 1–4·10⁻⁷, cuBLAS fp32 up to 8·10⁻⁷, TF32 3·10⁻⁴–10⁻³); TF32
  cuBLAS 233, Triton TF32 250. At these sizes a GEMM takes 6–45 µs, much of it latency, and three TF32
  products cost about what one FMA product does (``.gpu``-style probe, not a committed benchmark).
- ``fused + MLP SGD in backward, atomic SGD, CUDA graph`` (and its ``TF32`` twin): instead of the compiled
  MLPs and optimizer step, each MLP layer applies SGD to itself inside its backward, ``W.addmm_(gᵀ, x,
  alpha=−lr)`` on a side stream (two, alternating between consecutive layers), beside the chain of dX GEMMs
  (:mod:`lecture_code.perf.mlp_sgd_in_backward`); the loss (forward and backward: about 15 tiny kernels
  eager) and the modulus hash (six) compiled; the step joins the streams after backward.
- ``fused + MLP SGD in backward, atomic SGD, bf16 MLPs, CUDA graph``: that step in mixed precision: the
  MLPs' GEMMs and activations in bf16, on bf16 copies of the fp32 master weights refreshed once per step; the
  updates, the tables and their SGD, the interaction and the loss in fp32
  (:mod:`lecture_code.perf.bf16_mlps` says how, and why not ``torch.autocast``). Its holdout AUC is checked
  against fp32 eager's over a training run (:mod:`lecture_code.perf.auc_trajectory`; the benchmark's
  ``auc_gap`` column).

:func:`measure` times them interleaved (:func:`~lecture_code.perf.step_timing.time_interleaved`: wall time
per step in a loop that never syncs, its spread over repeats) and, separately, GPU time and host time with
the GPU held asleep while the host enqueues (:mod:`lecture_code.perf.step_host_time`: the events around one
step measure only the GPU's work; the host's work has two upper bounds, its clock over a loop issued while the
GPU still sleeps and its clock over the timed loop until the last step call returned, and ``host_ms`` is the
smaller, ``host_clean`` whether it can hold a wait); ``syncs_per_step`` counts the calls of one step that make
the host wait for the GPU, ``sync_sites`` names their lines. A CUDA graph's step is one launch.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from lecture_code.data import Batch
from lecture_code.environment import matmul_precision
from lecture_code.model import DLRM, DLRMConfig
from lecture_code.model import fused as _fused  # noqa: F401  (define the Triton kernels outside `with device`)
from lecture_code.perf.bf16_mlps import bf16_mlps_with_sgd_in_backward
from lecture_code.perf.gpu_memory import allocate_shared_workspaces, footprint_bytes
from lecture_code.perf.mlp_sgd_in_backward import sgd_in_backward
from lecture_code.perf.step_host_time import (
    hidden_step,
    host_bound,
    host_ms_per_step,
    sync_sites,
)
from lecture_code.perf.step_timing import Variant, time_interleaved
from lecture_code.training import make_graphed_train_step, make_optimizers, make_train_step

__all__ = [
    "IMPLEMENTATIONS",
    "PackedSGDSparseArch",
    "StepMeasurement",
    "StepResult",
    "build_step",
    "load_results",
    "make_batches",
    "measure",
]

IMPLEMENTATIONS = (
    "eager, sparse grads",
    "eager, dense grads",
    "compile, dense grads",
    "packed + index_add_",
    "packed + index_add_, CUDA graph",
    "fused",
    "fused, CUDA graph",
    "fused + compiled MLPs, CUDA graph",
    "fused + compiled MLPs, atomic SGD, CUDA graph",
    "fused + MLP SGD in backward, atomic SGD, CUDA graph",
    "fused + compiled MLPs, atomic SGD, TF32, CUDA graph",
    "fused + MLP SGD in backward, atomic SGD, TF32, CUDA graph",
    "fused + MLP SGD in backward, atomic SGD, bf16 MLPs, CUDA graph",
)
GPU_ONLY = {name for name in IMPLEMENTATIONS if "CUDA graph" in name}
COMPILES = {name for name in IMPLEMENTATIONS if "compile" in name}


class _GatherIndexAddSGD(torch.autograd.Function):
    """Forward: ``weight[rows]``. Backward: ``weight[rows] -= lr · grad`` summed per row (``index_add_``)."""

    @staticmethod
    def forward(ctx, trigger, weight, rows, lr):
        ctx.save_for_backward(weight, rows, lr)
        return weight[rows]  # [B, F, D]: one gather for all tables

    @staticmethod
    def backward(ctx, grad):
        weight, rows, lr = ctx.saved_tensors
        # index_add_ sums repeated rows (atomics on a GPU); alpha must be a number: scale the gradient by -lr
        weight.index_add_(0, rows.reshape(-1), grad.reshape(-1, weight.shape[1]) * -lr)
        return None, None, None, None


class PackedSGDSparseArch(nn.Module):
    """The two tricks in eager PyTorch: one packed table, exact SGD on the touched rows in backward.

    Same layout as the fused backend (``weight [R, D]``, ``table_offsets [F+1]``), same checkpoint keys as the
    eager ``SparseArch`` (built from one: :meth:`from_sparse_arch`), but plain torch ops: a gather, and an
    ``index_add_`` of ``-lr · grad`` into the weight (non-deterministic summation order on a GPU)."""

    def __init__(self, hashes: nn.Module, weights: Sequence[torch.Tensor], lr: float):
        super().__init__()
        self.hashes = hashes
        sizes = torch.tensor([w.shape[0] for w in weights])
        self.register_buffer("weight", torch.cat([w.detach() for w in weights]))
        self.register_buffer(
            "row_base", torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]]).to(self.weight.device)
        )
        self.register_buffer("lr", torch.full((), float(lr), device=self.weight.device))

    @classmethod
    def from_sparse_arch(cls, sparse_arch, lr: float) -> PackedSGDSparseArch:
        return cls(sparse_arch.hashes, [t.weight for t in sparse_arch.embeddings], lr)

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        """Raw ids ``[B, F]`` → ``[B, F, D]``."""
        rows = self.hashes(sparse) + self.row_base  # [B, F] global rows
        if not (self.training and torch.is_grad_enabled()):
            return self.weight[rows]
        trigger = torch.zeros(
            0, device=self.weight.device, requires_grad=True
        )  # makes autograd call backward
        return _GatherIndexAddSGD.apply(trigger, self.weight, rows, self.lr)


def _model(name: str, config: DLRMConfig, device: torch.device, lr: float) -> DLRM:
    with device:  # factories allocate and initialise on the device (2 GiB of Kaggle tables: no CPU detour)
        if name.startswith("fused"):
            model = DLRM(config, backend="fused", embedding_optimizer="sgd", embedding_lr=lr)
            model.sparse_arch.deterministic = "atomic SGD" not in name
            return model
        model = DLRM(config, backend="compile" if name.startswith("compile") else "eager")
        if name.startswith("packed"):
            model.sparse_arch = PackedSGDSparseArch.from_sparse_arch(model.sparse_arch, lr)
        if name == "eager, sparse grads":
            for table in model.sparse_arch.embeddings:
                table.sparse = True
        return model


def build_step(name: str, config: DLRMConfig, device: torch.device, example: Batch, lr: float = 0.1):
    """``(train_step, model)`` of implementation ``name`` (one of :data:`IMPLEMENTATIONS`)."""
    if "TF32" in name:  # the graph records the kernels chosen at capture: the setting is needed only here
        with matmul_precision("high"):
            return _build_step(name, config, device, example, lr)
    return _build_step(name, config, device, example, lr)


def _build_step(name: str, config: DLRMConfig, device: torch.device, example: Batch, lr: float):
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {name!r}; choose from {IMPLEMENTATIONS}")
    if name in GPU_ONLY and device.type != "cuda":
        raise RuntimeError(f"{name!r} needs a GPU")
    if config.hashing != "modulus":
        raise ValueError("the step benchmark uses hashing='modulus' (any id fits any table)")
    model = _model(name, config, device, lr)
    if name.startswith("packed"):  # the tables are buffers updated in backward: SGD on the MLPs only
        opts = (torch.optim.SGD(model.dense_parameters(), lr=lr), None)
    else:
        opts = make_optimizers(model, "sgd", lr)
    if "MLP SGD in backward" in name:  # no torch optimizer at all: every update runs inside backward
        # the two MLPs' layers (the model's only nn.Linear); bf16 GEMMs on copies of fp32 masters
        join = bf16_mlps_with_sgd_in_backward(model, lr) if "bf16" in name else sgd_in_backward(model, lr)
        model.sparse_arch.hashes.compile()  # six elementwise kernels → one, at the head of the forward
        loss_fn = torch.compile(nn.functional.binary_cross_entropy_with_logits)
        step = make_graphed_train_step(model, (None, None), example, loss_fn=loss_fn, after_backward=join)
        return step, model
    if "compiled MLPs" in name:
        model.dense_arch.compile()
        model.over_arch.compile()
        _compile_step(opts[0])
    if "CUDA graph" in name:
        return make_graphed_train_step(model, opts, example), model
    return make_train_step(model, opts), model


def _compile_step(optimizer: torch.optim.Optimizer) -> None:
    """Run ``optimizer.step`` through ``torch.compile`` (the same update, inductor's kernel).

    torch's foreach SGD is one ``multi_tensor_apply_kernel``, which gives each 64k-element chunk of a
    tensor one block: the Kaggle MLPs' 476k parameters in 14 tensors make a launch of a few dozen blocks at
    most, each walking its chunk serially (17 µs per call in an H100 profile). Inductor's kernel spreads the
    update over the GPU: on the H100 the atomic-SGD graph steps went from 0.419 to 0.406 ms (fp32) and from
    0.308 to 0.290 ms (TF32) with it (2026-11-23)."""
    step = optimizer.step
    optimizer.step = torch.compile(lambda: step())


def make_batches(
    config: DLRMConfig, batch_size: int, n: int, device: torch.device, ids: str = "uniform", seed: int = 0
) -> list[Batch]:
    """``n`` random batches. ``ids``: ``"uniform"`` ranks in ``[0, n_f)``, or ``"zipf"``: rank ``k`` of
    table ``f`` with probability ∝ ``1/k^1.1`` (inverse CDF, floored): hot rows repeat, like real ids. Raw ids
    are the ranks; the modulus hash maps ``k`` to row ``1 + k mod (n_f−1)`` (so row 1 gets two ranks)."""
    if ids not in ("uniform", "zipf"):
        raise ValueError(f"ids must be 'uniform' or 'zipf', got {ids!r}")
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.tensor(config.num_embeddings_per_feature, dtype=torch.float64)
    out = []
    for _ in range(n):
        u = torch.rand(batch_size, config.num_sparse, generator=gen, dtype=torch.float64)
        if ids == "uniform":
            ranks = (u * sizes).floor()
        else:
            s = 1.1
            top = sizes.clamp(min=2) ** (1 - s)
            ranks = (((top - 1) * u + 1) ** (1 / (1 - s))).floor() - 1
        dense = torch.log1p(torch.rand(batch_size, config.num_dense, generator=gen) * 100)
        label = (torch.rand(batch_size, generator=gen) < 0.25).float()
        out.append(Batch(dense, ranks.long(), label).to(device))
    return out


@dataclass
class StepResult:
    implementation: str
    ids: str
    ms_per_step: float  # median wall time per step in a loop (no sync per step)
    ms_min: float
    ms_max: float
    gpu_ms: float | None  # the GPU's time for one step, host hidden (GPU only)
    # host_ms: an upper bound on the host's work per step, the smaller of two loop clocks (GPU asleep, the
    # timed loop's issue clock: step_host_time.host_bound; on a CPU the whole step). CSVs of 2026-11-24 held
    # the clock around ONE step, those of 2026-11-28 the asleep clock alone: both read above ms_per_step in
    # every row without a CUDA graph
    host_ms: float
    samples_per_s: float
    state_mib: float | None  # what it keeps on the GPU: weights, grads, optimizer, graph pool (see measure)
    peak_mib: float | None  # state + the most one step holds on top
    error: str = ""


@dataclass
class StepMeasurement(StepResult):
    """A :class:`StepResult` with the host's side of the step: what :func:`measure` returns and the benchmark
    writes. (A subclass, so code that builds a ``StepResult`` from every one of its fields keeps reading
    CSVs written before these columns existed.)"""

    # calls in one step that made the host wait for the GPU (step_host_time.sync_sites)
    syncs_per_step: float = math.nan
    host_clean: bool | None = None  # True: host_ms's clock can hold no wait for the GPU (host_bound)
    # host_ms's clock: "asleep" (host_ms_per_step) or "issue" (the timed loop's, StepTiming.issue_ms)
    host_timer: str = ""
    # the lines of one step that made the host wait, "; "-separated (step_host_time.sync_sites)
    sync_sites: str = ""
    # largest |holdout AUC − fp32 eager's| over a training run of auc_steps steps (auc_trajectory; the same
    # on both id rows: the run trains on the synthetic Criteo data); NaN and 0: not checked
    auc_gap: float = math.nan
    auc_steps: int = 0


def load_results(records: Sequence[dict]) -> list[StepMeasurement]:
    """Rows of a benchmark CSV (``DataFrame.to_dict("records")``) as :class:`StepMeasurement`: empty cells of
    the optional columns become ``None``, columns an older CSV lacks take their defaults."""
    names = list(StepMeasurement.__dataclass_fields__)
    optional = {"gpu_ms", "state_mib", "peak_mib", "host_clean"}
    out = []
    for r in records:
        kw = {k: r[k] for k in names if k in r}
        for k in optional & kw.keys():
            if isinstance(kw[k], float) and math.isnan(kw[k]):
                kw[k] = None
        for k in ("error", "host_timer", "sync_sites"):
            if isinstance(kw.get(k), float):  # an empty cell read as NaN: no error, no clock named
                kw[k] = ""
        out.append(StepMeasurement(**kw))
    return out


def measure(
    names: Sequence[str],
    config: DLRMConfig,
    device: torch.device,
    batches: dict[str, list[Batch]],
    *,
    steps: int = 20,
    warmup: int = 3,
    repeats: int = 5,
    hidden_reps: int = 5,
    host_steps: int | None = None,
    deadline: float | None = None,
    log: Callable[[str], object] = print,
) -> list[StepMeasurement]:
    """Build each implementation once, then per id distribution time them all interleaved. Implementations
    that fail to build or run become rows with ``error`` set (the message), not a crash; past ``deadline``
    (``time.monotonic()``) the remaining ones are skipped, with that as their error.

    Per row and id distribution, ``hidden_reps`` times (interleaved), from :mod:`.step_host_time`: the GPU's
    time of one step (``hidden_step``) and the host's time per step over ``host_steps`` steps, GPU asleep
    (``host_ms_per_step``; default 8 on a GPU, ``steps`` on a CPU), medians; on a GPU ``host_ms`` is the
    smaller of that and the timed loop's own issue clock (``host_bound``; ``StepTiming.issue_ms``),
    ``host_clean`` whether it can hold no wait (for the asleep clock: every try was clean).
    ``syncs_per_step`` and ``sync_sites`` from one step (``sync_sites``).

    Memory (GPU, :mod:`lecture_code.perf.gpu_memory`): ``state_mib`` is what building and warming a row adds
    to ``footprint_bytes`` (a graph's pool counted whole), after ``allocate_shared_workspaces`` (so the main
    stream's cuBLAS workspaces are charged to no row: each row has one main stream; side streams' workspaces
    are charged to their row); ``peak_mib`` adds the most one step allocates on top (the memory profiler;
    0 for a graph replay)."""
    gpu = device.type == "cuda"
    if gpu:
        allocate_shared_workspaces(device)
    first = next(iter(batches.values()))[0]
    built: dict[str, tuple[Callable, float | None]] = {}
    errors: dict[str, str] = {}
    for name in names:
        if deadline is not None and time.monotonic() > deadline:
            errors[name] = "skipped: past the time limit"
            continue
        t0 = time.monotonic()
        try:
            before = footprint_bytes(device) if gpu else 0
            step, _ = build_step(name, config, device, first)
            for _ in range(max(warmup, 1)):
                step(first)  # compile, optimizer state, graph pool: all resident from here on
            if gpu:
                torch.cuda.synchronize(device)
            state = (footprint_bytes(device) - before) / 2**20 if gpu else None
            built[name] = (step, state)
            log(f"built {name!r} in {time.monotonic() - t0:.1f} s")
        except Exception as exc:  # noqa: BLE001 — a benchmark reports what failed and goes on
            errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            log(f"{name!r} failed: {errors[name]}")
    results = []
    for ids, bs in batches.items():
        live = [n for n in names if n in built]
        variants = [Variant(n, built[n][0], bs) for n in live]
        timings = (
            time_interleaved(variants, device, steps=steps, warmup=warmup, repeats=repeats) if live else []
        )
        n_host = host_steps or (8 if gpu else max(steps, 1))
        hidden: dict[str, list[float]] = {n: [] for n in live}
        host: dict[str, list[tuple[float, bool]]] = {n: [] for n in live}
        for r in range(hidden_reps):  # interleaved too
            for n, t in zip(live, timings, strict=True):
                hidden[n].append(hidden_step(built[n][0], bs[r % len(bs)], device, t.ms_per_step)[0])
                host[n].append(host_ms_per_step(built[n][0], bs, device, t.ms_per_step, n_host))
        for n, t in zip(live, timings, strict=True):
            transient = t.peak_step_mib if gpu else None
            state = built[n][1]
            gpu_ms = statistics.median(hidden[n]) if gpu else None
            sites = sync_sites(built[n][0], bs[0], device)
            syncs = len(sites)
            asleep = (statistics.median(h[0] for h in host[n]), all(h[1] for h in host[n]))
            host_ms, clean, timer = host_bound(asleep, t.issue_ms if gpu else math.nan, gpu_ms, syncs)
            results.append(
                StepMeasurement(
                    n, ids, t.ms_per_step, t.ms_min, t.ms_max, gpu_ms, host_ms,
                    1e3 * bs[0].label.shape[0] / t.ms_per_step, state,
                    None if state is None else state + transient,
                    syncs_per_step=syncs, sync_sites="; ".join(dict.fromkeys(sites)), host_clean=clean,
                    host_timer=timer,
                )
            )  # fmt: skip
        for n in names:
            if n in errors:
                nan = float("nan")
                results.append(StepMeasurement(n, ids, nan, nan, nan, None, nan, nan, None, None, errors[n]))
    return results
