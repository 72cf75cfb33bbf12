"""Benchmark the three ways to map raw Criteo ids to embedding rows, as the vocabulary grows.

The lecture's second profiling finding: the naive ``IndexHash`` compares each id with the whole vocabulary
(a ``[B, V]`` boolean matrix, then argmax) — O(B·V) time and 2·B·V bytes — while ``VocabularyHash``
(``torch.searchsorted``) is O(B·log V) and ``ModulusHash`` is O(B) with no vocabulary at all.

    python benchmarks/bench_hashing.py            # GPU: V up to 1M, B = 4096
    python benchmarks/bench_hashing.py --quick    # CPU-sized sweep (the default on a CPU)

Prints a table; saves CSV + PNG under benchmarks/results/hashing/, stamped with device, versions, date.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from lecture_code.model import IndexHash, ModulusHash, VocabularyHash  # noqa: E402

try:  # bench_utils lives beside this script
    from benchmarks import _bench_utils as bu
except ImportError:  # run as a script from benchmarks/
    import _bench_utils as bu

HASHES = {"index (naive)": IndexHash, "vocabulary (searchsorted)": VocabularyHash, "modulus": None}


def measure(vocab_size: int, batch: int, device: torch.device) -> list[dict]:
    """Median time of each hash on ``batch`` ids, 80 % of them in a random ``vocab_size`` vocabulary."""
    g = torch.Generator().manual_seed(vocab_size)
    vocab = torch.randint(0, 1 << 32, (2 * vocab_size,), generator=g).unique()[:vocab_size]  # sorted
    picked = vocab[torch.randint(0, vocab_size, (batch,), generator=g)]
    unseen = torch.randint(0, 1 << 32, (batch,), generator=g)
    ids = torch.where(torch.rand(batch, generator=g) < 0.8, picked, unseen).to(device)
    rows = []
    for name, cls in HASHES.items():
        module = (cls(vocab, vocab_size + 1) if cls else ModulusHash(vocab_size + 1)).to(device)
        ms = bu.median_ms(lambda m=module: m(ids), device)
        rows.append({"hash": name, "vocabulary": vocab_size, "batch": batch, "ms": round(ms, 4)})
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="CPU-sized sweep (the default on a CPU)")
    p.add_argument("--results-dir", type=Path, help="where CSV + PNG go (default benchmarks/results)")
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    bu.setup(device)
    quick = args.quick or not bu.on_gpu(device)
    sizes, batch = ([1_000, 10_000, 100_000], 1024) if quick else ([1_000, 10_000, 100_000, 1_000_000], 4096)
    rows = [r for v in sizes for r in measure(v, batch, device)]
    meta = bu.stamp(device)
    bu.print_table(rows, ["hash", "vocabulary", "batch", "ms"])
    csv_path = bu.save(rows, "hashing", "hashing", meta, root=args.results_dir)
    png_path = csv_path.with_suffix(".png")
    plot(rows, png_path, meta)
    print(f"saved {csv_path} and {png_path.name}")


def plot(rows: list[dict], path: Path, meta: dict[str, str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name in HASHES:
        pts = [r for r in rows if r["hash"] == name]
        ax.plot([r["vocabulary"] for r in pts], [r["ms"] for r in pts], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"vocabulary size V (batch B = {rows[0]['batch']})")
    ax.set_ylabel("median time per call (ms)")
    ax.set_title(f"{meta['device']} · torch {meta['torch']} · {meta['date'][:10]}", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
