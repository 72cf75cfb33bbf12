"""Training DLRM: the loop, its command line, checkpoints and holdout metrics.

- :mod:`.train`: :class:`TrainConfig`, :func:`train` (the loop), :func:`build`;
- :mod:`.step`: :func:`make_train_step`, the one step the loop runs and :mod:`.graphs` captures;
- :mod:`.cli`: ``python -m lecture_code.training --preset small --steps 300`` (flags = ``TrainConfig``);
- :mod:`.distributed`: the same under ``torchrun --nproc-per-node N``: data-parallel (DDP), rank 0 writes;
- :mod:`.sharding_plan`, :mod:`.sharded_embedding`, :mod:`.sharded_training`: ``--shard-tables``, the tables
  sharded over the ranks (model parallel, TorchRec's layout; each rank allocates only its shards), the MLPs
  data-parallel; :mod:`.sharding_report`: each rank's bytes at Criteo's real sizes, no GPU needed;
- :mod:`.launch`: ``N`` local ranks started as ``torchrun`` would, from Python (tests, benchmarks);
- :mod:`.optimizers`: the dense and table optimizers of each ``--optimizer`` (eager row-wise Adagrad too);
- :mod:`.graphs`: one training step captured as one CUDA graph and replayed (GPU only);
- :mod:`.checkpoint`: save/load model + optimizer + step, atomically; loading never runs code from the file;
- :mod:`.metrics`: holdout logloss and AUC against the constant predictor;
- :mod:`.logs`: where progress messages go (loguru in a terminal, plain stdout lines in a notebook).
"""

from lecture_code.training.checkpoint import (
    UnsafeCheckpointError,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from lecture_code.training.graphs import make_graphed_train_step
from lecture_code.training.logs import default_log, in_jupyter_kernel
from lecture_code.training.metrics import evaluate
from lecture_code.training.optimizers import OPTIMIZERS, RowWiseAdagrad, make_optimizers
from lecture_code.training.step import make_train_step
from lecture_code.training.train import TrainConfig, TrainResult, build, train

__all__ = [
    "OPTIMIZERS",
    "RowWiseAdagrad",
    "TrainConfig",
    "TrainResult",
    "UnsafeCheckpointError",
    "build",
    "default_log",
    "evaluate",
    "in_jupyter_kernel",
    "load_checkpoint",
    "make_graphed_train_step",
    "make_optimizers",
    "make_train_step",
    "read_checkpoint",
    "save_checkpoint",
    "train",
]
