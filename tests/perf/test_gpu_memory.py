"""A graph's private pool counts whole; the main streams' cuBLAS workspaces are allocated once, up front."""

from __future__ import annotations

import pytest
import torch

from lecture_code.perf.gpu_memory import allocate_shared_workspaces, footprint_bytes
from lecture_code.training.graphs import capture_stream

pytestmark = pytest.mark.gpu
MiB = 2**20


def test_a_graph_pool_counts_whole_though_nothing_in_it_is_allocated():
    device = torch.device("cuda")
    x = torch.randn(1024, 1024, device=device)
    torch.cuda.synchronize()
    allocated, footprint = torch.cuda.memory_allocated(), footprint_bytes(device)
    graph, stream = torch.cuda.CUDAGraph(), capture_stream(device)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.graph(graph, stream=stream):
        total = (x * 2).sum()  # the 4 MiB product lives in the graph's pool, freed before capture ends
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(total, (x * 2).sum())
    assert torch.cuda.memory_allocated() - allocated < MiB  # allocated: only the small result
    assert footprint_bytes(device) - footprint >= 4 * MiB  # reserved for the replays: counted


def test_after_the_shared_workspaces_a_gemm_on_either_main_stream_allocates_nothing():
    device = torch.device("cuda")
    allocate_shared_workspaces(device)
    a, b = torch.randn(64, 64, device=device), torch.randn(64, device=device)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for stream in (torch.cuda.current_stream(), capture_stream(device)):
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            y = torch.nn.functional.linear(a, a, b) + a @ a
        torch.cuda.current_stream().wait_stream(stream)
        torch.testing.assert_close(y, a @ a.t() + b + a @ a)
        del y
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before
