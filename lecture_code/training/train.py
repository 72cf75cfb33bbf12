"""Train DLRM on Criteo-format data: the loop behind ``python -m lecture_code.training``.

The loop keeps the GPU busy: the loss is accumulated on the device and read back (a host sync) only every
``log_every`` steps — a ``.item()`` per step is the first finding of notebook 02. Logloss and AUC are computed
on a held-out split; the constant predictor (always the positive rate) is the baseline to beat.
The model returns logits and the loss is ``BCEWithLogitsLoss``; probabilities come from
``DLRM.predict_proba``, which applies the sigmoid exactly once.

Outputs under ``--run-dir`` (git-ignored ``runs/``): ``checkpoint.pt`` (``--resume`` continues exactly
where it stopped: data order is a function of (seed, epoch), so the step counter says which batch is next),
TensorBoard scalars, and with ``--profile`` a profiler trace of a few steps.

Progress messages (resume, holdout metrics) go to ``train``'s ``log`` callable: by default loguru in a
terminal and plain stdout lines inside a Jupyter kernel (:mod:`.logs` says why).

``backend`` picks how the model runs (``eager``, ``compile``, ``fused``: :mod:`lecture_code.model.dlrm`);
``optimizer`` the update rule of the dense parameters and of the tables (:mod:`.optimizers`), with ``lr``
for both; with ``fused`` the tables' update happens inside backward and the torch optimizer sees only
``model.dense_parameters()``. ``cuda_graph`` replays each step from one CUDA graph (:mod:`.graphs`; GPU only).

Under ``torchrun --nproc-per-node N`` the same loop trains data-parallel (:mod:`.distributed`): each rank
its own shard of the data, DDP, rank 0 alone writing; ``batch_size`` is then per rank. With ``shard_tables``
(fused backend; automatic when its tables outgrow a GPU's free memory) the tables are sharded over the ranks
instead of replicated, each rank allocating only its shards (:mod:`.sharded_training`).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from lecture_code import data as criteo
from lecture_code.data.schema import CRITEO_CARDINALITIES, criteo_table_rows
from lecture_code.model import BACKENDS, DLRM, PRESETS
from lecture_code.training import distributed, sharded_training
from lecture_code.training.checkpoint import load_checkpoint, save_checkpoint
from lecture_code.training.data_parallel import make_fused_data_parallel
from lecture_code.training.distributed import DistInfo
from lecture_code.training.graphs import make_graphed_train_step
from lecture_code.training.logs import default_log
from lecture_code.training.metrics import evaluate
from lecture_code.training.optimizers import (
    OPTIMIZERS,
    embedding_optimizer_state,
    load_embedding_optimizer_state,
    make_optimizers,
)
from lecture_code.training.step import make_train_step

TABLES = ("data", *CRITEO_CARDINALITIES)  # "data": the data's own vocabularies; or Criteo's real sizes


@dataclass
class TrainConfig:
    preset: str = "small"
    data_dir: str | None = None  # None: the embedded synthetic default (generated on first use)
    tables: str = "data"  # "data": rows per table from the data; "kaggle" | "terabyte": Criteo's (modulus)
    steps: int = 300  # total optimizer steps; training crosses epochs as needed
    batch_size: int = 512  # per rank under torchrun: one step trains on world_size * batch_size rows
    lr: float = 3e-3
    interaction: str = "dot"
    hashing: str = "vocabulary"
    holdout_fraction: float = 0.1
    seed: int = 0
    backend: str = "eager"  # "eager" | "compile" | "fused" (lecture_code.model.BACKENDS)
    optimizer: str = "adam"  # "adam" | "sgd" | "rowwise_adagrad" (fused: not adam); lr for dense and tables
    cuda_graph: bool = False  # replay each step from one CUDA graph (GPU only)
    shard_tables: bool = False  # under torchrun, fused: tables sharded over the ranks (sharded_training)
    row_wise_above_mb: float | None = None  # with shard_tables: tables above this many MiB split by rows
    profile: bool = False
    device: str | None = None
    log_every: int = 20
    eval_every: int = 0  # 0: evaluate only at the end
    checkpoint_every: int = 100
    checkpoint: bool = True  # False: no checkpoint at all (e.g. tables too large to write for a timing run)
    run_dir: str = "runs/dlrm"
    resume: bool = False
    progress: bool = True


@dataclass
class TrainResult:
    steps: list[int] = field(default_factory=list)  # step at which each logged loss was taken
    losses: list[float] = field(default_factory=list)  # mean training loss over the last log_every steps
    evals: list[dict] = field(default_factory=list)  # {"step", "logloss", "auc", "baseline_logloss", ...}
    checkpoint: Path | None = None

    @property
    def final(self) -> dict:
        return self.evals[-1] if self.evals else {}


def check_config(cfg: TrainConfig, world_size: int = 1) -> None:
    """Reject combinations that cannot run (``world_size``: ranks under torchrun), before any data is read."""
    if cfg.backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {cfg.backend!r}")
    if cfg.optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {cfg.optimizer!r}")
    if cfg.backend == "fused" and cfg.optimizer == "adam":
        raise ValueError(
            "backend 'fused' updates the tables inside backward with 'sgd' or 'rowwise_adagrad' (Adam's "
            "per-element state would be a pass over every table each step): pass --optimizer sgd or "
            "--optimizer rowwise_adagrad"
        )
    if cfg.tables not in TABLES:
        raise ValueError(f"tables must be one of {TABLES}, got {cfg.tables!r}")
    if cfg.tables != "data" and cfg.hashing != "modulus":
        raise ValueError(
            f"--tables {cfg.tables}: Criteo's table sizes are not the data's vocabularies, ids take their "
            f"rows modulo the table size; pass --hashing modulus, got --hashing {cfg.hashing}"
        )
    if cfg.cuda_graph and cfg.backend == "compile":
        raise ValueError("--cuda-graph captures the eager or fused step; for compile use its own cudagraphs")
    if cfg.shard_tables and cfg.backend != "fused":
        raise ValueError(
            f"--shard-tables shards the fused backend's table-batched embedding, got --backend "
            f"{cfg.backend}: pass --backend fused (with --optimizer sgd or rowwise_adagrad)"
        )
    distributed.check_distributed_config(cfg.backend, cfg.cuda_graph, world_size, cfg.shard_tables)


def table_sizes(cfg: TrainConfig, metadata) -> tuple[int, ...]:
    """Rows of each table: the data's (``tables="data"``) or Criteo's real cardinalities + 1 (row 0 kept
    for unseen ids, as the data's own), so the 1TB model's 177.9M rows train on any Criteo-format data."""
    if cfg.tables == "data":
        return tuple(metadata.num_embeddings_per_feature)
    return criteo_table_rows(cfg.tables)


def _outgrow_one_gpu(cfg: TrainConfig, sizes: tuple[int, ...], device: torch.device) -> bool:
    """Collective: whether the fused backend's tables (fp32, + Adagrad's row state) exceed a rank's budget
    (:func:`.sharded_training.rank_budget`); then they are sharded as with ``--shard-tables``."""
    if cfg.backend != "fused":
        return False
    dim = PRESETS[cfg.preset]["embedding_dim"]
    need = sum(sizes) * (4 * dim + (4 if cfg.optimizer == "rowwise_adagrad" else 0))
    budget = sharded_training.rank_budget(device)
    if budget is None or need <= budget:  # None: CPU ranks, no limit
        return False
    if cfg.cuda_graph:
        raise ValueError(
            f"the tables ({need / 1e9:.1f} GB) outgrow one GPU (budget {budget / 1e9:.1f} GB) and must be "
            "sharded, whose step is not captured: drop --cuda-graph"
        )
    return True


def build(cfg: TrainConfig, info: DistInfo | None = None):
    """Data splits, model and its optimizers ``(dense, tables or None)`` for a config.

    ``info`` (under torchrun): the splits are this rank's shards, the device ``cuda:LOCAL_RANK`` or cpu;
    with ``shard_tables``, or when the fused tables outgrow one GPU, the model holds only this rank's
    shards of the tables (a collective)."""
    info = info or DistInfo()
    check_config(cfg, info.world_size)
    data_dir = Path(cfg.data_dir) if cfg.data_dir else criteo.ensure_default_data()
    metadata = criteo.load_metadata(data_dir)
    device = distributed.rank_device(info, cfg.device)
    if info.enabled:  # this rank's rows only (lecture_code.data.shards)
        shard = criteo.load_shard(data_dir, cfg.holdout_fraction, cfg.seed, info.rank, info.world_size)
        train_split, holdout_split = shard.train.to(device), shard.holdout.to(device)
    else:
        tensors = criteo.load_tensors(data_dir).to(device)  # the whole split fits in memory; one copy
        train_split, holdout_split = criteo.train_holdout_split(tensors, cfg.holdout_fraction, cfg.seed)
    torch.manual_seed(cfg.seed)
    fused_optimizer = cfg.optimizer if cfg.backend == "fused" else "sgd"  # the others ignore it
    sizes = table_sizes(cfg, metadata)
    sharded = info.enabled and (cfg.shard_tables or _outgrow_one_gpu(cfg, sizes, device))
    model = DLRM.from_metadata(
        SimpleNamespace(num_embeddings_per_feature=sizes, vocabularies=metadata.vocabularies),
        preset=cfg.preset, interaction=cfg.interaction, hashing=cfg.hashing, backend=cfg.backend,
        embedding_optimizer=fused_optimizer, embedding_lr=cfg.lr, table_device="meta" if sharded else None,
    )  # fmt: skip
    if sharded:  # the tables were shapes only: every rank the same plan, each allocates and draws its rows
        plan = sharded_training.plan_for_training(model, device, cfg.row_wise_above_mb)
        sharded_training.shard_tables(model, plan, device=device)
    model = model.to(device)
    optimizers = make_optimizers(model, cfg.optimizer, cfg.lr)
    return train_split, holdout_split, model, optimizers, device


class _NoWriter:
    """TensorBoard's ``SummaryWriter`` for the ranks that do not write (all but rank 0)."""

    def add_scalar(self, *args, **kwargs) -> None:
        pass

    def close(self) -> None:
        pass


def train(cfg: TrainConfig, log: Callable[[str], object] | None = None) -> TrainResult:
    """Run the loop of ``cfg``; ``log`` receives each progress message (default: :func:`default_log`).

    Under torchrun (``WORLD_SIZE > 1``) every rank calls this; it makes the process group (NCCL on GPUs,
    gloo on CPUs), trains data-parallel and returns the same metrics on every rank (:mod:`.distributed`)."""
    info = distributed.from_environment()
    check_config(cfg, info.world_size)
    device = distributed.rank_device(info, cfg.device)
    with distributed.process_group(info, device):
        return _train(cfg, log or default_log(), info)


def _train(cfg: TrainConfig, log: Callable[[str], object], info: DistInfo) -> TrainResult:
    train_split, holdout_split, model, (optimizer, embedding_opt), device = build(cfg, info)
    if not info.is_main:
        log = _quiet
    run_dir = Path(cfg.run_dir)
    checkpoint_path = run_dir / "checkpoint.pt"
    step = 0
    if cfg.resume:
        if not checkpoint_path.exists():
            raise FileNotFoundError(f"--resume: no checkpoint at {checkpoint_path}")
        state = load_checkpoint(checkpoint_path, model=model, optimizer=optimizer, map_location=device)
        load_embedding_optimizer_state(model, embedding_opt, state.get("embedding_optimizer"))
        step = state["step"]
        log(f"resumed from {checkpoint_path} at step {step}")
        saved_world = state["config"].get("world_size", 1)
        if saved_world != info.world_size:
            log(
                f"the checkpoint was written at world size {saved_world}, this run has {info.world_size}: "
                f"the data order from here is world size {info.world_size}'s "
                f"({info.world_size} x {cfg.batch_size} rows per step)"
            )
    step_model, after_backward = model, None
    sharded = sharded_training.is_sharded(model)
    if cfg.shard_tables and not info.enabled:
        log("--shard-tables: one process holds every table (nothing to shard without torchrun)")
    if sharded:  # tables sharded over the ranks by build (model parallel), the MLPs data-parallel
        why = "" if cfg.shard_tables else " (automatic: the tables outgrow one GPU)"
        log(f"{model.sparse_arch.plan}{why}")
        after_backward = sharded_training.replicate_mlps(model)
    elif info.enabled and cfg.backend == "fused":  # tables replicated, only touched rows exchanged
        after_backward = make_fused_data_parallel(model)
    elif info.enabled:
        step_model = distributed.wrap_model(model, device)
    if cfg.cuda_graph:
        example = next(iter(criteo.iter_batches(train_split, cfg.batch_size, seed=cfg.seed)))
        train_step = make_graphed_train_step(
            model, [optimizer, embedding_opt], example, after_backward=after_backward
        )
    else:
        train_step = make_train_step(step_model, [optimizer, embedding_opt], after_backward=after_backward)

    def checkpoint():
        # sharded: the full tables gathered on rank 0 (a collective), the unsharded model's layout
        gathered = sharded_training.checkpoint_state(model) if sharded else None
        if info.is_main:
            model_state, table_state = gathered or (None, embedding_optimizer_state(model, embedding_opt))
            save_checkpoint(
                checkpoint_path, model=model, optimizer=optimizer, step=step,
                config={**asdict(cfg), "world_size": info.world_size},
                embedding_optimizer=table_state, model_state=model_state,
            )  # fmt: skip
        distributed.barrier()  # the file is complete before any rank goes on (or reads it)
        return checkpoint_path

    per_epoch = criteo.num_batches(len(train_split), cfg.batch_size)
    if info.enabled:  # every rank the same number of steps per epoch: the smallest shard's
        per_epoch = distributed.min_over_ranks(per_epoch, device)
    if per_epoch == 0:
        raise ValueError(f"batch size {cfg.batch_size} is larger than the training split")
    writer = SummaryWriter(str(run_dir / "tensorboard")) if info.is_main else _NoWriter()
    result = TrainResult()

    def run_eval() -> None:
        batches = criteo.iter_batches(holdout_split, cfg.batch_size, drop_last=False, shuffle=False)
        if sharded:  # every rank the same number of lookups (each is a collective)
            metrics = {"step": step, **sharded_training.evaluate_sharded(model, batches, device)}
        elif info.enabled:  # logloss and AUC over every rank's holdout rows
            metrics = {"step": step, **distributed.evaluate_all_ranks(model, batches, device)}
        else:
            metrics = {"step": step, **evaluate(model, batches)}
        result.evals.append(metrics)
        for key in ("logloss", "auc"):
            writer.add_scalar(f"holdout/{key}", metrics[key], step)
        log(
            f"step {step}: holdout logloss {metrics['logloss']:.4f} "
            f"(constant predictor {metrics['baseline_logloss']:.4f}), AUC {metrics['auc']:.4f}"
        )

    profiling = cfg.profile and info.is_main
    if profiling:  # imported here: the profiler's plotting (matplotlib, pandas) costs every rank a second
        from lecture_code.profiling.profiler import step_profiler
    profiler = step_profiler(run_dir / "profile") if profiling else contextlib.nullcontext()
    running = torch.zeros((), device=device)
    progress = cfg.progress and info.is_main
    bar = tqdm(total=cfg.steps, initial=step, disable=not progress, desc="train", unit="step")
    with profiler as prof:
        while step < cfg.steps:
            epoch, start = divmod(step, per_epoch)
            batches = criteo.iter_batches(
                train_split, cfg.batch_size, seed=cfg.seed, epoch=epoch, start_batch=start
            )
            for batch in itertools.islice(
                batches, per_epoch - start
            ):  # a larger shard's extra batch: not run
                running += train_step(batch)
                step += 1
                bar.update(1)
                if prof is not None:
                    prof.step()
                if step % cfg.log_every == 0:
                    mean = distributed.mean_over_ranks(running) if info.enabled else running
                    loss = (mean / cfg.log_every).item()  # one host sync per log_every steps
                    running.zero_()
                    result.steps.append(step)
                    result.losses.append(loss)
                    writer.add_scalar("train/loss", loss, step)
                    bar.set_postfix(loss=f"{loss:.4f}")
                if cfg.eval_every and step % cfg.eval_every == 0:
                    run_eval()
                if cfg.checkpoint and cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                    checkpoint()
                if step >= cfg.steps:
                    break
    bar.close()
    if not result.evals or result.evals[-1]["step"] != step:
        run_eval()
    result.checkpoint = checkpoint() if cfg.checkpoint else None
    writer.close()
    return result


def _quiet(message: str) -> None:
    """The log of every rank but 0."""
