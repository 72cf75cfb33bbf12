"""Train DLRM on Criteo-format data: ``python -m lecture_code.train --preset small --steps 300``.

The loop keeps the GPU busy: the loss is accumulated on the device and read back (a host sync) only every
``log_every`` steps — a ``.item()`` per step is the first finding of notebook 02. Logloss and AUC are computed
on a held-out split; the constant predictor (always the positive rate) is the baseline to beat.
The model returns logits and the loss is ``BCEWithLogitsLoss``; probabilities come from
``DLRM.predict_proba``, which applies the sigmoid exactly once.

Outputs under ``--run-dir`` (git-ignored ``runs/``): ``checkpoint.pt`` (``--resume`` continues exactly
where it stopped: data order is a function of (seed, epoch), so the step counter says which batch is next),
TensorBoard scalars, and with ``--profile`` a profiler trace of a few steps.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from loguru import logger
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from lecture_code import data as criteo
from lecture_code.checkpoint import load_checkpoint, save_checkpoint
from lecture_code.environment import device as default_device
from lecture_code.metrics import evaluate
from lecture_code.model import DLRM
from lecture_code.profiling import step_profiler


@dataclass
class TrainConfig:
    preset: str = "small"
    data_dir: str | None = None  # None: the embedded synthetic default (generated on first use)
    steps: int = 300  # total optimizer steps; training crosses epochs as needed
    batch_size: int = 512
    lr: float = 3e-3
    interaction: str = "dot"
    hashing: str = "vocabulary"
    holdout_fraction: float = 0.1
    seed: int = 0
    compile: bool = False
    profile: bool = False
    device: str | None = None
    log_every: int = 20
    eval_every: int = 0  # 0: evaluate only at the end
    checkpoint_every: int = 100
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


def build(cfg: TrainConfig):
    """Data splits, model and optimizer for a config."""
    data_dir = Path(cfg.data_dir) if cfg.data_dir else criteo.ensure_default_data()
    metadata = criteo.load_metadata(data_dir)
    device = torch.device(cfg.device) if cfg.device else default_device()
    tensors = criteo.load_tensors(data_dir).to(device)  # the whole split fits in memory; one copy
    train_split, holdout_split = criteo.train_holdout_split(tensors, cfg.holdout_fraction, cfg.seed)
    torch.manual_seed(cfg.seed)
    model = DLRM.from_metadata(
        metadata, preset=cfg.preset, interaction=cfg.interaction, hashing=cfg.hashing
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    return train_split, holdout_split, model, optimizer, device


def make_train_step(model, optimizer, compile_model: bool):
    loss_fn = torch.nn.BCEWithLogitsLoss()

    def forward_loss(dense, sparse, label):
        return loss_fn(model(dense, sparse), label)

    forward = torch.compile(forward_loss) if compile_model else forward_loss

    def train_step(batch) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = forward(batch.dense, batch.sparse, batch.label)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return train_step


def train(cfg: TrainConfig) -> TrainResult:
    train_split, holdout_split, model, optimizer, device = build(cfg)
    run_dir = Path(cfg.run_dir)
    checkpoint_path = run_dir / "checkpoint.pt"
    step = 0
    if cfg.resume:
        if not checkpoint_path.exists():
            raise FileNotFoundError(f"--resume: no checkpoint at {checkpoint_path}")
        step = load_checkpoint(checkpoint_path, model=model, optimizer=optimizer, map_location=device)["step"]
        logger.info(f"resumed from {checkpoint_path} at step {step}")
    train_step = make_train_step(model, optimizer, cfg.compile)
    per_epoch = criteo.num_batches(len(train_split), cfg.batch_size)
    if per_epoch == 0:
        raise ValueError(f"batch size {cfg.batch_size} is larger than the training split")
    writer = SummaryWriter(str(run_dir / "tensorboard"))
    result = TrainResult()

    def run_eval() -> None:
        batches = criteo.iter_batches(holdout_split, cfg.batch_size, drop_last=False, shuffle=False)
        metrics = {"step": step, **evaluate(model, batches)}
        result.evals.append(metrics)
        for key in ("logloss", "auc"):
            writer.add_scalar(f"holdout/{key}", metrics[key], step)
        logger.info(
            f"step {step}: holdout logloss {metrics['logloss']:.4f} "
            f"(constant predictor {metrics['baseline_logloss']:.4f}), AUC {metrics['auc']:.4f}"
        )

    profiler = step_profiler(run_dir / "profile") if cfg.profile else contextlib.nullcontext()
    running = torch.zeros((), device=device)
    bar = tqdm(total=cfg.steps, initial=step, disable=not cfg.progress, desc="train", unit="step")
    with profiler as prof:
        while step < cfg.steps:
            epoch, start = divmod(step, per_epoch)
            batches = criteo.iter_batches(
                train_split, cfg.batch_size, seed=cfg.seed, epoch=epoch, start_batch=start
            )
            for batch in batches:
                running += train_step(batch)
                step += 1
                bar.update(1)
                if prof is not None:
                    prof.step()
                if step % cfg.log_every == 0:
                    loss = (running / cfg.log_every).item()  # one host sync per log_every steps
                    running.zero_()
                    result.steps.append(step)
                    result.losses.append(loss)
                    writer.add_scalar("train/loss", loss, step)
                    bar.set_postfix(loss=f"{loss:.4f}")
                if cfg.eval_every and step % cfg.eval_every == 0:
                    run_eval()
                if cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                    save_checkpoint(
                        checkpoint_path, model=model, optimizer=optimizer, step=step, config=asdict(cfg)
                    )
                if step >= cfg.steps:
                    break
    bar.close()
    if not result.evals or result.evals[-1]["step"] != step:
        run_eval()
    result.checkpoint = save_checkpoint(
        checkpoint_path, model=model, optimizer=optimizer, step=step, config=asdict(cfg)
    )
    writer.close()
    return result


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    defaults = TrainConfig()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="python -m lecture_code.train")
    p.add_argument("--preset", choices=["small", "kaggle"], default=defaults.preset)
    p.add_argument("--data", dest="data_dir", help="preprocessed Criteo folder (default: synthetic sample)")
    p.add_argument("--steps", type=int, default=defaults.steps)
    p.add_argument("--batch-size", type=int, default=defaults.batch_size)
    p.add_argument("--lr", type=float, default=defaults.lr)
    p.add_argument("--interaction", choices=["dot", "outer"], default=defaults.interaction)
    p.add_argument("--hashing", choices=["vocabulary", "index", "modulus"], default=defaults.hashing)
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=defaults.compile)
    p.add_argument("--profile", action=argparse.BooleanOptionalAction, default=defaults.profile)
    p.add_argument("--device", help="cpu, cuda, cuda:1 … (default: cuda when present)")
    p.add_argument("--log-every", type=int, default=defaults.log_every)
    p.add_argument("--eval-every", type=int, default=defaults.eval_every)
    p.add_argument("--checkpoint-every", type=int, default=defaults.checkpoint_every)
    p.add_argument("--run-dir", default=defaults.run_dir)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    return TrainConfig(**vars(p.parse_args(argv)))


def main(argv: list[str] | None = None) -> None:
    cfg = parse_args(argv)
    logger.remove()
    logger.add(lambda msg: tqdm.write(msg, end="", file=sys.stderr), format="{time:HH:mm:ss} | {message}")
    logger.info(f"config: {asdict(cfg)}")
    result = train(cfg)
    logger.info(f"final holdout metrics: {result.final}; checkpoint: {result.checkpoint}")


if __name__ == "__main__":
    main()
