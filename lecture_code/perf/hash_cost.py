"""Finding 2: what each id → row hash costs as the vocabulary grows (one call on ``batch`` ids).

The naive ``IndexHash`` compares every id with the whole vocabulary: a ``[B, V]`` boolean matrix, then an
argmax over it: O(B·V) time and 2·B·V bytes. ``VocabularyHash`` binary-searches the sorted vocabulary
(``torch.searchsorted``): O(B·log V). ``ModulusHash`` needs no vocabulary at all: O(B).
``benchmarks/bench_hashing.py`` runs the same sweep; both time with :func:`lecture_code.bench.median_ms`, the
one timer of benchmarks and notebooks (device time on a GPU, L2 flushed between calls).

:func:`time_all_features` times what a DLRM forward actually calls: all ``F`` features of a ``[B, F]`` batch,
either with one hash module per feature (``F`` rounds of launches) or with one batched module
(:class:`~lecture_code.model.BatchedModulusHash`, :class:`~lecture_code.model.BatchedVocabularyHash`). Next to
the device time it reports the host time per call (:func:`lecture_code.bench.host_us`, GPU only) and the
number of ATen ops one call runs (:func:`count_aten_ops`) and, on a GPU, the kernels it launches: what a
launch-bound step pays for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.profiler import ProfilerActivity, profile

from lecture_code.bench import host_us, median_ms
from lecture_code.model import (
    BatchedModulusHash,
    BatchedVocabularyHash,
    IndexHash,
    ModulusHash,
    VocabularyHash,
)
from lecture_code.profiling.quiet import quiet_profiler
from lecture_code.profiling.trace_analysis import LAUNCH_CALLS

__all__ = [
    "ALL_FEATURE_HASHES",
    "HASHES",
    "all_feature_hashes",
    "ALLOCATION_OPS",
    "aten_ops_per_call",
    "count_aten_ops",
    "count_launches",
    "kernel_launches_per_call",
    "hash_inputs",
    "make_hash_module",
    "time_all_features",
    "time_hashes",
]

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


ALL_FEATURE_HASHES = (
    "modulus, one module per feature",
    "modulus, all features at once",
    "vocabulary, one module per feature",
    "vocabulary, all features at once",
)


def all_feature_hashes(metadata) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """{name: ``fn(sparse [B, F]) -> rows [B, F]``} for :data:`ALL_FEATURE_HASHES`, over ``metadata``'s
    tables (``num_embeddings_per_feature``, ``vocabularies``), as modules on the CPU (move with ``.to``)."""
    tables = tuple(metadata.num_embeddings_per_feature)
    vocabularies = list(metadata.vocabularies)
    return {
        ALL_FEATURE_HASHES[0]: _PerFeature([ModulusHash(n) for n in tables]),
        ALL_FEATURE_HASHES[1]: BatchedModulusHash(tables),
        ALL_FEATURE_HASHES[2]: _PerFeature(
            [VocabularyHash(v, n) for v, n in zip(vocabularies, tables, strict=True)]
        ),
        ALL_FEATURE_HASHES[3]: BatchedVocabularyHash(vocabularies, tables),
    }


class _PerFeature(torch.nn.Module):
    """``F`` one-feature hashes over a ``[B, F]`` batch, as ``SparseArch`` runs them: column by column."""

    def __init__(self, hashes):
        super().__init__()
        self.hashes = torch.nn.ModuleList(hashes)

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        columns = sparse.t().contiguous()  # [F, B]
        return torch.stack([h(columns[f]) for f, h in enumerate(self.hashes)], dim=1)


# Ops that only allocate (or resize) an output: no work of their own, no kernel.
ALLOCATION_OPS = frozenset(
    {
        "aten::empty",
        "aten::empty_strided",
        "aten::empty_like",
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::resize_",
    }
)


def _calls_an_aten_op(event) -> bool:
    """Whether ``event`` calls, directly or through non-ATen children, an ATen op that is no allocation."""
    return any(
        (c.name.startswith("aten::") and c.name not in ALLOCATION_OPS) or _calls_an_aten_op(c)
        for c in event.cpu_children
    )


def count_aten_ops(events) -> int:
    """The ATen ops that do the work among profiler ``events`` (``prof.events()``: objects with ``name`` and
    ``cpu_children``): ``aten::`` ops that call no other ATen op but allocations, leaving out the
    :data:`ALLOCATION_OPS` themselves (``aten::add`` allocating its output with ``aten::empty`` counts once).

    Children that are not ATen ops do not make an op a caller: on a GPU every op that launches a kernel
    has a ``cudaLaunchKernel`` child (``cudaMemcpyAsync`` for a copy), and counting only ops with no child
    at all would leave just the allocations (``empty_strided``, ``resize_``) that launch nothing."""
    return sum(
        1
        for e in events
        if e.name.startswith("aten::") and e.name not in ALLOCATION_OPS and not _calls_an_aten_op(e)
    )


def count_launches(events) -> int:
    """Kernel launches (:data:`~lecture_code.profiling.trace_analysis.LAUNCH_CALLS`) among ``events``."""
    return sum(1 for e in events if e.name in LAUNCH_CALLS)


def aten_ops_per_call(fn: Callable[[], object]) -> int:
    """ATen ops one ``fn()`` runs that do the work (:func:`count_aten_ops`), from a CPU-activity profile."""
    with quiet_profiler(), profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return count_aten_ops(prof.events())


def kernel_launches_per_call(fn: Callable[[], object], device: torch.device) -> int | None:
    """Kernels one ``fn()`` launches on ``device`` (``None`` off a GPU: a CPU op launches nothing)."""
    if device.type != "cuda":
        return None
    with quiet_profiler(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize(device)
    return count_launches(prof.events())


def time_all_features(metadata, sparse: torch.Tensor, timer=median_ms, host_timer=host_us) -> list[dict]:
    """One row per :data:`ALL_FEATURE_HASHES` entry on ``sparse`` ``[B, F]`` (on its device):
    ``{"hash", "batch", "features", "ms", "host_us", "aten_ops", "launches"}`` (``host_us`` and the kernel
    ``launches`` are ``None`` on a CPU)."""
    device = sparse.device
    rows = []
    for name, module in all_feature_hashes(metadata).items():
        module = module.to(device)
        fn = lambda m=module: m(sparse)  # noqa: E731
        host = host_timer(fn, device)
        rows.append(
            {
                "hash": name,
                "batch": int(sparse.shape[0]),
                "features": int(sparse.shape[1]),
                "ms": round(timer(fn, device), 4),
                "host_us": None if host is None else round(host, 1),
                "aten_ops": aten_ops_per_call(fn),
                "launches": kernel_launches_per_call(fn, device),
            }
        )
    return rows
