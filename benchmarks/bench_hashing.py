"""Benchmark the three ways to map raw Criteo ids to embedding rows, as the vocabulary grows.

The lecture's second profiling finding: the naive ``IndexHash`` compares each id with the whole vocabulary
(a ``[B, V]`` boolean matrix, then argmax) — O(B·V) time and 2·B·V bytes — while ``VocabularyHash``
(``torch.searchsorted``) is O(B·log V) and ``ModulusHash`` is O(B) with no vocabulary at all.

    python -m benchmarks.bench_hashing            # GPU: V up to 1M, B = 4096
    python -m benchmarks.bench_hashing --quick    # CPU-sized sweep (the default on a CPU)

Prints a table; saves CSV + PNG under benchmarks/results/hashing/, stamped with device, versions, date.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from lecture_code import bench as bu
from lecture_code.perf.charts import hash_cost_chart
from lecture_code.perf.hash_cost import time_hashes


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="CPU-sized sweep (the default on a CPU)")
    p.add_argument("--results-dir", type=Path, help="where CSV + PNG go (default benchmarks/results)")
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    bu.setup(device)
    quick = args.quick or not bu.on_gpu(device)
    sizes, batch = ([1_000, 10_000, 100_000], 1024) if quick else ([1_000, 10_000, 100_000, 1_000_000], 4096)
    rows = time_hashes(sizes, batch, device, timer=bu.median_ms)
    meta = bu.stamp(device)
    bu.print_table(rows, ["hash", "vocabulary", "batch", "ms"])
    csv_path = bu.save(rows, "hashing", "hashing", meta, root=args.results_dir)
    png_path = csv_path.with_suffix(".png")
    hash_cost_chart(rows, png_path, f"{meta['device']} · torch {meta['torch']} · {meta['date'][:10]}")
    print(f"saved {csv_path} and {png_path.name}")


if __name__ == "__main__":
    main()
