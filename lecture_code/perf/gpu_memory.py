"""GPU memory as a benchmark should count it: graph pools whole, shared cuBLAS workspaces charged to no one.

Two things :func:`torch.cuda.memory_allocated` gets wrong for comparing training steps:

- a CUDA graph's private pool is *reserved*, not allocated, between replays, yet no other tensor can use it:
  a graph step's activations would count as nothing. :func:`footprint_bytes` counts private pools whole;
- PyTorch gives every stream that runs a GEMM a cuBLAS workspace and never frees it: measured row by row in
  one process, the first row to use the default stream (or the graphs' capture stream) pays for every row
  after it. :func:`allocate_shared_workspaces` allocates those before any row.
"""

from __future__ import annotations

import torch
from torch import nn

from lecture_code.training.graphs import capture_stream

__all__ = ["allocate_shared_workspaces", "footprint_bytes"]


def footprint_bytes(device: torch.device) -> int:
    """Bytes allocated in PyTorch's shared pool plus every byte reserved by a private pool: a CUDA graph keeps
    its pool for its replays, reserved (not allocated) between them, where no other tensor can use it."""
    index = torch.cuda.current_device() if device.index is None else device.index
    return sum(
        seg["total_size"] if tuple(seg["segment_pool_id"]) != (0, 0) else seg["allocated_size"]
        for seg in torch.cuda.memory_snapshot()
        if seg["device"] == index
    )


def allocate_shared_workspaces(device: torch.device) -> None:
    """Give the default stream and the graphs' capture stream their cuBLAS workspaces now. PyTorch keeps one
    per stream (cuBLAS's and cuBLASLt's, 32 MiB each on an H100) and never frees them: whichever row ran the
    first GEMM on either stream would otherwise be charged for what every row after it shares."""
    a, b = torch.ones(8, 8, device=device), torch.ones(8, device=device)
    for stream in (torch.cuda.current_stream(device), capture_stream(device)):
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            nn.functional.linear(a, a, b), a @ a  # cuBLASLt (a bias epilogue) and cuBLAS
    torch.cuda.synchronize(device)
