"""Finding 3: one training step at each stage of fixing the id → row lookup.

==========================================  ===============================================================
stage                                       what changes
==========================================  ===============================================================
``index hash, vocabularies on the host``    the original: each feature's vocabulary lives in host memory
                                            and is copied to the device in every forward (26 copies a step),
                                            then compared with every id (``[B, V]`` matrix)
``index hash, vocabularies on the device``  the same comparison, but the vocabularies are buffers: moved
                                            once by ``model.to(device)``
``vocabulary lookup (searchsorted)``        one binary search over all 26 vocabularies: O(B·F·log ΣV)
``modulus hash, one per feature``           ``1 + id mod (n_f - 1)``, one ``ModulusHash`` per feature: 26
                                            small rounds of launches (the original's
                                            ``_forward_bad_modulus_hash``)
``modulus hash, all features at once``      the same rows from one ``remainder`` with an ``[F]`` tensor of
                                            table sizes (``BatchedModulusHash``; the original's
                                            ``_forward_modulus_hash``)
==========================================  ===============================================================

Every stage trains the same DLRM (same tables, same init) on the same batches; the first three give the same
rows, the two modulus stages give each other's rows, different from the first three (a different model).
The stages are timed with their repeats interleaved (:func:`~lecture_code.perf.step_timing.time_interleaved`).
"""

from __future__ import annotations

import torch
from torch import nn

from lecture_code.model import BatchedModulusHash, IndexHash, ModulusHash
from lecture_code.model.hashing import index_hash_rows
from lecture_code.perf.step_timing import StepTiming, Variant, time_interleaved
from lecture_code.perf.workload import Workload, make_model, make_step

__all__ = ["STAGES", "HostVocabularyIndexHash", "make_stage_model", "measure_hashing_stages"]

INDEX_ON_HOST = "index hash, vocabularies on the host"
MODULUS_PER_FEATURE = "modulus hash, one per feature"
STAGES = {  # label -> DLRM hashing
    INDEX_ON_HOST: "index",
    "index hash, vocabularies on the device": "index",
    "vocabulary lookup (searchsorted)": "vocabulary",
    MODULUS_PER_FEATURE: "modulus",
    "modulus hash, all features at once": "modulus",
}


class HostVocabularyIndexHash(nn.Module):
    """:class:`IndexHash` with its vocabulary in host memory, copied to the ids' device on every call.

    The vocabulary is a plain attribute, not a buffer, so ``model.to("cuda")`` leaves it behind: this is how
    metadata loaded next to the model (a dict of numpy arrays) ends up being re-sent to the GPU each step.
    """

    def __init__(self, vocabulary: torch.Tensor, num_embeddings: int):
        super().__init__()
        self.num_embeddings = num_embeddings
        self.host_vocabulary = vocabulary.cpu()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return index_hash_rows(ids, self.host_vocabulary.to(ids.device))  # a host -> device copy per call


def make_stage_model(workload: Workload, stage: str, seed: int = 0) -> nn.Module:
    """The DLRM of one of :data:`STAGES`, on the workload's device."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; stages are {list(STAGES)}")
    model = make_model(workload, hashing=STAGES[stage], seed=seed)
    sparse = model.sparse_arch
    if stage == INDEX_ON_HOST:
        assert all(isinstance(h, IndexHash) for h in sparse.hashes)
        sparse.hashes = nn.ModuleList(
            HostVocabularyIndexHash(h.vocabulary, h.num_embeddings) for h in sparse.hashes
        )
    elif stage == MODULUS_PER_FEATURE:  # DLRM's modulus hash is batched: split it into one per feature
        assert isinstance(sparse.hashes, BatchedModulusHash)
        sparse.hashes = nn.ModuleList(ModulusHash(n) for n in sparse.hashes.num_embeddings_per_feature)
    return model


def measure_hashing_stages(
    workload: Workload, steps: int = 20, warmup: int = 3, repeats: int = 3
) -> list[StepTiming]:
    variants = [
        Variant(stage, make_step(make_stage_model(workload, stage)), workload.batches) for stage in STAGES
    ]
    return time_interleaved(variants, workload.device, steps=steps, warmup=warmup, repeats=repeats)
