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
``modulus hash``                            ``1 + id mod (n - 1)``: no vocabulary, collisions allowed
==========================================  ===============================================================

Every stage trains the same DLRM (same tables, same init) on the same batches; the first three give the same
rows, the modulus hash gives different ones (it is a different model, as the lecture says).
"""

from __future__ import annotations

import torch
from torch import nn

from lecture_code.model import IndexHash
from lecture_code.model.hashing import index_hash_rows
from lecture_code.perf.step_timing import StepTiming, time_train_steps
from lecture_code.perf.workload import Workload, make_model, make_step

__all__ = ["STAGES", "HostVocabularyIndexHash", "make_stage_model", "measure_hashing_stages"]

STAGES = {  # label -> (DLRM hashing, vocabularies kept on the host)
    "index hash, vocabularies on the host": ("index", True),
    "index hash, vocabularies on the device": ("index", False),
    "vocabulary lookup (searchsorted)": ("vocabulary", False),
    "modulus hash": ("modulus", False),
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
    hashing, on_host = STAGES[stage]
    model = make_model(workload, hashing=hashing, seed=seed)
    if on_host:
        hashes = model.sparse_arch.hashes
        assert all(isinstance(h, IndexHash) for h in hashes)
        model.sparse_arch.hashes = nn.ModuleList(
            HostVocabularyIndexHash(h.vocabulary, h.num_embeddings) for h in hashes
        )
    return model


def measure_hashing_stages(
    workload: Workload, steps: int = 20, warmup: int = 3, repeats: int = 3
) -> list[StepTiming]:
    return [
        time_train_steps(
            make_step(make_stage_model(workload, stage)),
            workload.batches,
            workload.device,
            label=stage,
            steps=steps,
            warmup=warmup,
            repeats=repeats,
        )
        for stage in STAGES
    ]
