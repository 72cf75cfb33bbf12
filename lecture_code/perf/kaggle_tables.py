"""The same step with the data's small tables and with the Kaggle tables (2 GiB of embeddings).

The embedded synthetic data keeps only the ids it has seen, so its 26 tables are small (tens of MB with
their gradients) and the step is dominated by launching kernels. Criteo Kaggle's tables
(:data:`lecture_code.data.KAGGLE_CARDINALITIES`, 33.8M rows in all) hold 2 GiB of fp32 weights at D = 16.
``nn.Embedding`` makes a *dense* gradient (every row, zeros where the batch did not look), and Adam updates
every row of every table every step: each step reads and writes several copies of 2 GiB (weights,
gradients, two moments), whatever the batch. That is memory-bandwidth work that grows with the tables, not
with the batch or the number of launches.

Both variants use the modulus hash (``BatchedModulusHash``: it maps any id into a table of any size), the
same preset and the same batches; only the table sizes differ. Timed with repeats interleaved; each also
gets a light profile (:mod:`.step_anatomy`) for GPU busy time and its top kernels. ``cap`` limits every
table to ``cap + 1`` rows (tests and CPU runs: the full tables and their Adam state need ~9 GB).
"""

from __future__ import annotations

from pathlib import Path

from lecture_code.data import KAGGLE_CARDINALITIES
from lecture_code.perf.step_anatomy import anatomy_row
from lecture_code.perf.step_timing import Variant, time_interleaved
from lecture_code.perf.workload import Workload, make_model, make_step, profile_training_steps
from lecture_code.profiling.trace_analysis import (
    short_kernel_name,
    step_breakdown,
    top_kernels,
    top_ops,
    window_gpu_work,
)

__all__ = ["DATA_TABLES", "KAGGLE_TABLES", "MIN_PASSES", "kaggle_tables", "measure_table_sizes"]

DATA_TABLES = "the data's tables"
KAGGLE_TABLES = "Kaggle tables"

MIN_PASSES = 8
"""Passes over the embedding bytes that one step makes at the very least with a dense gradient and Adam: the
backward writes the zero-filled dense gradient (1); a fused Adam reads weights, gradient and both moments (4)
and writes weights and both moments (3). PyTorch's default (``foreach``) Adam makes more passes than that."""


def kaggle_tables(cap: int | None = None) -> tuple[int, ...]:
    """Rows per table: each Kaggle cardinality (at most ``cap``) plus row 0 for missing ids."""
    return tuple(1 + (c if cap is None else min(c, cap)) for c in KAGGLE_CARDINALITIES)


def measure_table_sizes(
    workload: Workload,
    trace_dir: str | Path,
    cap: int | None = None,
    steps: int = 20,
    warmup: int = 3,
    repeats: int = 3,
    top: int = 6,
) -> tuple[list[dict], object]:
    """Rows for :data:`DATA_TABLES` and :data:`KAGGLE_TABLES`, and the Kaggle variant's trace events.

    Each row: :func:`~lecture_code.perf.step_anatomy.anatomy_row` plus ``table_rows``, ``embedding_mb``
    (fp32 weights of all tables; the dense gradient and each Adam moment are as large again) and
    ``top`` (GPU kernels by time on a GPU, host ops by self time on a CPU: ``name, calls, share_pct``).
    """
    models = {
        DATA_TABLES: make_model(workload, hashing="modulus"),
        KAGGLE_TABLES: make_model(workload, hashing="modulus", tables=kaggle_tables(cap)),
    }
    steps_of = {label: make_step(model) for label, model in models.items()}
    variants = [Variant(label, step, workload.batches) for label, step in steps_of.items()]
    timings = time_interleaved(variants, workload.device, steps=steps, warmup=warmup, repeats=repeats)
    rows, kaggle_events = [], None
    for (label, model), timing in zip(models.items(), timings, strict=True):
        folder = Path(trace_dir) / ("kaggle" if label == KAGGLE_TABLES else "data")
        prof, events = profile_training_steps(workload, folder, detail=False, step=steps_of[label])
        breakdown = step_breakdown(events)
        gpu = breakdown["gpu_busy_ms"] is not None  # rank the kernels the profiled steps launched
        ranked = top_kernels(window_gpu_work(events), n=top) if gpu else top_ops(prof, n=top)
        tables = [t.num_embeddings for t in model.sparse_arch.embeddings]
        rows.append(
            {
                **anatomy_row(timing, breakdown),
                "table_rows": sum(tables),
                "embedding_mb": round(sum(tables) * model.config.embedding_dim * 4 / 2**20, 1),
                "top": [
                    {
                        "name": short_kernel_name(r.name),
                        "calls": int(r.calls),
                        "share_pct": round(r.share_pct, 1),
                    }
                    for r in ranked.itertuples()
                ],
            }
        )
        if label == KAGGLE_TABLES:
            kaggle_events = events
    return rows, kaggle_events
