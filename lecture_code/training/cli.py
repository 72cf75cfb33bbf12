"""The training command line: ``python -m lecture_code.training --preset small --steps 300``.

Flags map one to one onto :class:`~lecture_code.training.train.TrainConfig`; the loop is
:func:`~lecture_code.training.train.train`. Logs go to stderr through loguru, above the progress bar.

Data-parallel on several GPUs (or CPU processes): the same flags under ``torchrun``
(:mod:`lecture_code.training.distributed`); only rank 0 prints.

    torchrun --standalone --nproc-per-node 2 -m lecture_code.training --preset kaggle --data data/kaggle

Tables sharded over the ranks instead of replicated (fused backend):

    torchrun --standalone --nproc-per-node 4 -m lecture_code.training --backend fused --optimizer sgd \
        --shard-tables --row-wise-above-mb 256

The 1TB model (MLPerf's sizes: 177.9M rows, D = 128, 91 GB of tables) on 4 GPUs, on the synthetic default:

    torchrun --standalone --nproc-per-node 4 -m lecture_code.training --preset terabyte --tables terabyte \
        --hashing modulus --backend fused --optimizer sgd --shard-tables --no-checkpoint
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from loguru import logger
from tqdm import tqdm

from lecture_code.model import PRESETS
from lecture_code.training.distributed import from_environment
from lecture_code.training.train import TABLES, TrainConfig, train


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    defaults = TrainConfig()
    p = argparse.ArgumentParser(
        description="Train DLRM on Criteo-format data.", prog="python -m lecture_code.training"
    )
    p.add_argument("--preset", choices=tuple(PRESETS), default=defaults.preset)
    p.add_argument("--data", dest="data_dir", help="preprocessed Criteo folder (default: synthetic sample)")
    p.add_argument(
        "--tables", choices=TABLES, default=defaults.tables,
        help="rows per table: the data's, or Criteo Kaggle's / 1TB's real sizes (with --hashing modulus)",
    )  # fmt: skip
    p.add_argument("--steps", type=int, default=defaults.steps)
    p.add_argument(
        "--batch-size", type=int, default=defaults.batch_size, help="rows per step (per rank under torchrun)"
    )
    p.add_argument("--lr", type=float, default=defaults.lr)
    p.add_argument("--interaction", choices=["dot", "outer"], default=defaults.interaction)
    p.add_argument("--hashing", choices=["vocabulary", "index", "modulus"], default=defaults.hashing)
    p.add_argument("--holdout-fraction", type=float, default=defaults.holdout_fraction)
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--backend", choices=["eager", "compile", "fused"], default=defaults.backend)
    p.add_argument(
        "--compile", dest="backend", action="store_const", const="compile", help="same as --backend compile"
    )
    p.add_argument("--optimizer", choices=["adam", "sgd", "rowwise_adagrad"], default=defaults.optimizer)
    p.add_argument(
        "--cuda-graph", action=argparse.BooleanOptionalAction, default=defaults.cuda_graph,
        help="replay each training step from one CUDA graph (GPU only; eager or fused backend)",
    )  # fmt: skip
    p.add_argument(
        "--shard-tables", action="store_true",
        help="under torchrun with --backend fused: each rank holds a share of the tables (model parallel)",
    )  # fmt: skip
    p.add_argument(
        "--row-wise-above-mb", type=float, default=defaults.row_wise_above_mb,
        help="with --shard-tables: tables above this many MiB are split by rows over every rank",
    )  # fmt: skip
    p.add_argument("--profile", action=argparse.BooleanOptionalAction, default=defaults.profile)
    p.add_argument("--device", help="cpu, cuda, cuda:1 … (default: cuda when present)")
    p.add_argument("--log-every", type=int, default=defaults.log_every)
    p.add_argument("--eval-every", type=int, default=defaults.eval_every)
    p.add_argument("--checkpoint-every", type=int, default=defaults.checkpoint_every)
    p.add_argument(
        "--checkpoint", action=argparse.BooleanOptionalAction, default=defaults.checkpoint,
        help="--no-checkpoint: write none (the 1TB tables at D = 128 are 91 GB)",
    )  # fmt: skip
    p.add_argument("--run-dir", default=defaults.run_dir)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    return TrainConfig(**vars(p.parse_args(argv)))


def main(argv: list[str] | None = None) -> None:
    cfg = parse_args(argv)
    logger.remove()
    if from_environment().is_main:  # under torchrun, rank 0 alone prints
        logger.add(lambda msg: tqdm.write(msg, end="", file=sys.stderr), format="{time:HH:mm:ss} | {message}")
    logger.info(f"config: {asdict(cfg)}")
    result = train(cfg, log=logger.info)
    logger.info(f"final holdout metrics: {result.final}; checkpoint: {result.checkpoint}")
