"""Finding 2: what each id → row hash costs as the vocabulary grows (one call on ``batch`` ids).

The naive ``IndexHash`` compares every id with the whole vocabulary: a ``[B, V]`` boolean matrix, then an
argmax over it: O(B·V) time and 2·B·V bytes. ``VocabularyHash`` binary-searches the sorted vocabulary
(``torch.searchsorted``): O(B·log V). ``ModulusHash`` needs no vocabulary at all: O(B).
``benchmarks/bench_hashing.py`` runs the same sweep with the benchmarks' timer (L2 flushed between calls).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.utils.benchmark as benchmark

from lecture_code.model import IndexHash, ModulusHash, VocabularyHash

__all__ = ["HASHES", "hash_inputs", "make_hash_module", "median_ms", "time_hashes"]

HASHES = ("index (naive)", "vocabulary (searchsorted)", "modulus")


def hash_inputs(vocab_size: int, batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A random sorted vocabulary of ``vocab_size`` 32-bit ids and ``batch`` ids, 80 % of them in it."""
    g = torch.Generator().manual_seed(vocab_size)
    vocab = torch.randint(0, 1 << 32, (2 * vocab_size,), generator=g).unique()[:vocab_size]  # sorted
    picked = vocab[torch.randint(0, vocab_size, (batch,), generator=g)]
    unseen = torch.randint(0, 1 << 32, (batch,), generator=g)
    ids = torch.where(torch.rand(batch, generator=g) < 0.8, picked, unseen)
    return vocab, ids.to(device)


def make_hash_module(name: str, vocab: torch.Tensor) -> torch.nn.Module:
    """The hash called ``name`` (one of :data:`HASHES`) over ``vocab``, with ``len(vocab) + 1`` rows."""
    n = vocab.numel() + 1
    if name == "modulus":
        return ModulusHash(n)
    return (IndexHash if name == "index (naive)" else VocabularyHash)(vocab, n)


def median_ms(fn: Callable[[], object], device: torch.device) -> float:
    """Median milliseconds per ``fn()``: GPU time by ``triton.testing.do_bench`` on a GPU (CUDA events, L2
    flushed between calls), wall time by ``torch.utils.benchmark`` on a CPU."""
    if device.type == "cuda":
        import triton.testing

        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
    fn()  # warm up
    measurement = benchmark.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=0.2)
    return 1e3 * measurement.median


def time_hashes(
    vocab_sizes: Sequence[int],
    batch: int,
    device: torch.device,
    timer: Callable[[Callable[[], object], torch.device], float] = median_ms,
) -> list[dict]:
    """One row per (hash, vocabulary size): ``{"hash", "vocabulary", "batch", "ms"}``."""
    rows = []
    for v in vocab_sizes:
        vocab, ids = hash_inputs(v, batch, device)
        for name in HASHES:
            module = make_hash_module(name, vocab).to(device)
            ms = timer(lambda m=module, x=ids: m(x), device)
            rows.append({"hash": name, "vocabulary": v, "batch": batch, "ms": round(ms, 4)})
    return rows
