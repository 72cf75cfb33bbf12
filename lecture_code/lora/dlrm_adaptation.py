"""The case study end to end: adapt a trained DLRM to a day whose click signal moved, with LoRA only.

1. Pretrain a DLRM (``small`` preset) on the default synthetic data (day 0) for a short run.
2. Make a later day (:func:`lecture_code.data.shifted_day.shifted_day`): same traffic, moved label rule. Split
   it into an adaptation set and a holdout. Measure holdout AUC of the day-0 model there: *before*.
3. For each backend (``eager``, ``fused``): a copy of the pretrained model, LoRA on every linear layer of the
   two MLPs (``dense_arch``, ``over_arch``; embeddings and everything else frozen), the same seed, Adam on the
   adapters only for ``finetune_steps`` steps, each step timed. Then holdout AUC on the shifted day (*after*)
   and on day 0 (does adapting forget?). AUCs are computed with the eager backend (the same numbers within
   rounding: :mod:`tests.lora` checks eager against fused; on a CPU the interpreter would only make it slow).

**Which kernel runs.** The fused backend calls :func:`kernels.lora.linear.lora_linear`, whose fast path
(v2/v3: the tensor-descriptor GEMM with the LoRA epilogue) needs K and N to fill 16-byte rows: multiples of 4
in fp32, 8 in bf16/fp16. DLRM's MLPs start and end on odd widths: the bottom MLP reads the 13 dense features
(K = 13), the top MLP reads the interaction's 367 features (K = 367) and ends in one logit (N = 1). Those
three layers take the general path, v1 (the base GEMM by torch + one Triton kernel for the branch, any
shape); the inner layers (64→32, 128→64, …) take the fast path. :func:`fused_paths` lists it per layer. On a
GPU, fp32 at torch's default ``"highest"`` matmul precision would make the fused backend choose v0 (plain
torch: cuBLAS SGEMM beats an FMA Triton GEMM), so the run sets ``"high"`` (TF32) for *both* backends and
restores it after.

**Step time** is the wall-clock median of the fine-tuning steps after ``warmup_steps`` (synchronised on a
GPU). On a CPU the Triton kernels run in the interpreter, so the fused step time there is not a speed: it only
shows that the same code path runs. DLRM's MLPs are tiny (a few thousand to ~50k weights per layer), so on a
GPU a step is launch-bound, and fusing the LoRA branch saves launches rather than bytes.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import statistics
import time
import warnings
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from kernels import runtime
from lecture_code import data as criteo
from lecture_code.data.shifted_day import shifted_day
from lecture_code.environment import device as default_device
from lecture_code.environment import matmul_precision
from lecture_code.lora.apply import apply_lora, lora_modules, parameter_counts, set_backend
from lecture_code.model import DLRM
from lecture_code.training.metrics import evaluate
from lecture_code.training.step import make_train_step

__all__ = [
    "AdaptationConfig",
    "AdaptationReport",
    "BackendRun",
    "adapt",
    "fused_paths",
    "holdout_auc",
    "pretrain",
    "run_adaptation",
]


@dataclass(frozen=True)
class AdaptationConfig:
    """Sizes and knobs of the case study. :meth:`for_device` gives the CPU (tiny) or GPU preset."""

    preset: str = "small"
    pretrain_steps: int = 300
    pretrain_lr: float = 3e-3
    batch_size: int = 512
    day_rows: int = 40_000
    day_seed: int = 1
    holdout_fraction: float = 0.25
    targets: tuple[str, ...] = ("dense_arch.*", "over_arch.*")
    r: int = 8
    alpha: float = 16.0
    finetune_steps: int = 200
    finetune_lr: float = 1e-2
    finetune_batch_size: int = 512
    backends: tuple[str, ...] = ("eager", "fused")
    warmup_steps: int = 3
    seed: int = 0
    matmul_precision: str = "high"  # GPU only: TF32 for fp32 matmuls, for both backends (module docstring)
    progress: bool = True  # a progress bar per training loop on stderr (a CPU run takes tens of seconds)

    @classmethod
    def for_device(cls, device: torch.device, **overrides) -> AdaptationConfig:
        """GPU: the defaults. CPU: a shorter pretraining and fewer, smaller fine-tuning steps (the fused
        backend runs interpreted, about half a second a step): 26 s on a 2-core CPU, the shifted day's AUC
        still rising from about 0.62 to 0.75."""
        if device.type != "cuda":
            overrides = {"pretrain_steps": 150, "finetune_steps": 12, "finetune_batch_size": 128, **overrides}
        return cls(**overrides)


@dataclass
class BackendRun:
    backend: str
    auc_shifted: float  # holdout AUC on the shifted day after adapting
    auc_day0: float  # holdout AUC on day 0 after adapting
    step_ms: float  # median wall-clock ms per fine-tuning step after warm-up
    steps: int


@dataclass
class AdaptationReport:
    config: AdaptationConfig
    device: str
    mode: str  # "gpu" or "cpu-interpreter"
    trainable: int
    total: int
    auc_day0_pretrained: float  # day-0 holdout AUC of the pretrained model
    auc_shifted_before: float  # shifted-day holdout AUC of the pretrained model
    runs: list[BackendRun] = field(default_factory=list)
    paths: list[dict] = field(default_factory=list)  # fused_paths of the adapted model

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def summary(self) -> str:
        lines = [
            f"device: {self.device} ({self.mode})",
            f"adapters on {list(self.config.targets)}, r = {self.config.r}, alpha = {self.config.alpha:g}: "
            f"trainable {self.trainable:,} of {self.total:,} parameters "
            f"({100 * self.trainable / self.total:.2f}%)",
            f"pretrained: day-0 holdout AUC {self.auc_day0_pretrained:.4f}, "
            f"shifted-day holdout AUC {self.auc_shifted_before:.4f} (before)",
        ]
        for run in self.runs:
            lines.append(
                f"{run.backend:>6}: after {run.steps} steps: shifted-day AUC {run.auc_shifted:.4f}, "
                f"day-0 AUC {run.auc_day0:.4f}; {run.step_ms:.2f} ms/step"
            )
        return "\n".join(lines)


def holdout_auc(model: torch.nn.Module, data: criteo.CriteoTensors, batch_size: int = 4096) -> float:
    """AUC of ``model`` on ``data`` (eager backend for adapters; the model's backend is restored)."""
    adapters = lora_modules(model)
    backends = {name: m.backend for name, m in adapters.items()}
    if adapters:
        set_backend(model, "eager")
    try:
        batches = criteo.iter_batches(data, batch_size, drop_last=False, shuffle=False)
        return evaluate(model, batches)["auc"]
    finally:
        for name, backend in backends.items():
            adapters[name].set_backend(backend)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _train(
    model, data: criteo.CriteoTensors, steps: int, batch_size: int, lr: float, seed: int, progress: str = ""
) -> list[float]:
    """``steps`` Adam steps on the trainable parameters over seeded epochs of ``data``; seconds per step.
    ``progress``: a label for a progress bar on stderr, cleared when done ("" for none)."""
    params = [p for p in model.parameters() if p.requires_grad]
    step = make_train_step(model, torch.optim.Adam(params, lr=lr), compile_model=False)
    per_epoch = criteo.num_batches(len(data), batch_size)
    if per_epoch == 0:
        raise ValueError(f"batch size {batch_size} is larger than the {len(data)} rows to train on")
    device = data.label.device
    seconds = []
    for k in tqdm(range(steps), desc=progress, unit="step", leave=False, disable=not progress):
        epoch, start = divmod(k, per_epoch)
        batch = next(criteo.iter_batches(data, batch_size, seed=seed, epoch=epoch, start_batch=start))
        _sync(device)
        t0 = time.perf_counter()
        step(batch)
        _sync(device)
        seconds.append(time.perf_counter() - t0)
    return seconds


def _bar(cfg: AdaptationConfig, label: str) -> str:
    return label if cfg.progress else ""


def pretrain(model: torch.nn.Module, data: criteo.CriteoTensors, cfg: AdaptationConfig) -> torch.nn.Module:
    """Train every parameter of ``model`` on ``data`` for ``cfg.pretrain_steps`` steps (day 0)."""
    torch.manual_seed(cfg.seed)
    _train(model, data, cfg.pretrain_steps, cfg.batch_size, cfg.pretrain_lr, cfg.seed, _bar(cfg, "pretrain"))
    return model


def adapt(pretrained: torch.nn.Module, data: criteo.CriteoTensors, cfg: AdaptationConfig, backend: str):
    """A copy of ``pretrained`` with LoRA on ``cfg.targets`` (everything else frozen), fine-tuned on ``data``
    with ``backend``. Returns ``(model, seconds per step)``; the same seed gives the same adapters."""
    model = copy.deepcopy(pretrained)
    torch.manual_seed(cfg.seed)
    apply_lora(model, cfg.targets, cfg.r, cfg.alpha, backend=backend)
    with (
        warnings.catch_warnings()
    ):  # lora_linear names its general path once per reason: fused_paths lists it
        warnings.filterwarnings("ignore", message="lora_linear: general path", category=RuntimeWarning)
        seconds = _train(
            model, data, cfg.finetune_steps, cfg.finetune_batch_size, cfg.finetune_lr, cfg.seed + 1,
            _bar(cfg, f"adapt ({backend})"),
        )  # fmt: skip
    return model, seconds


def fused_paths(model: torch.nn.Module, rows: int) -> list[dict]:
    """Per adapter: its shape and the kernel the fused backend runs for ``rows`` rows, with the reason."""
    out = []
    for name, m in lora_modules(model).items():
        version, reason = m.fused_path(rows)
        out.append(
            {"module": name, "K": m.in_features, "N": m.out_features, "kernel": version, "why": reason}
        )
    return out


def run_adaptation(
    cfg: AdaptationConfig | None = None, device: torch.device | None = None
) -> AdaptationReport:
    """Pretrain on the default data, shift, adapt with each backend; the report of module docstring."""
    device = device or default_device()
    cfg = cfg or AdaptationConfig.for_device(device)
    folder = criteo.ensure_default_data()
    metadata = criteo.load_metadata(folder)
    day0_train, day0_holdout = criteo.train_holdout_split(
        criteo.load_tensors(folder).to(device), 0.1, cfg.seed
    )
    day = shifted_day(cfg.day_rows, cfg.day_seed).to(device)
    day_train, day_holdout = criteo.train_holdout_split(day, cfg.holdout_fraction, cfg.seed)

    on_gpu = device.type == "cuda"  # the precision setting is for the GPU's matmuls; a CPU run keeps torch's
    with matmul_precision(cfg.matmul_precision) if on_gpu else contextlib.nullcontext():
        torch.manual_seed(cfg.seed)
        model = pretrain(DLRM.from_metadata(metadata, preset=cfg.preset).to(device), day0_train, cfg)
        report = AdaptationReport(
            config=cfg,
            device=torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
            mode=runtime.mode(),
            trainable=0,
            total=0,
            auc_day0_pretrained=holdout_auc(model, day0_holdout),
            auc_shifted_before=holdout_auc(model, day_holdout),
        )
        for backend in cfg.backends:
            adapted, seconds = adapt(model, day_train, cfg, backend)
            counts = parameter_counts(adapted)
            report.trainable, report.total = counts.trainable, counts.total
            timed = seconds[cfg.warmup_steps :] or seconds
            report.runs.append(
                BackendRun(
                    backend=backend,
                    auc_shifted=holdout_auc(adapted, day_holdout),
                    auc_day0=holdout_auc(adapted, day0_holdout),
                    step_ms=1e3 * statistics.median(timed),
                    steps=len(seconds),
                )
            )
            report.paths = fused_paths(adapted, cfg.finetune_batch_size)
    return report
