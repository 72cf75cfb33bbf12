"""One training step as one CUDA graph: capture forward + backward + optimizer once, then replay it.

A DLRM step at batch 2048 launches a few hundred small kernels; the GPU finishes each before the host has
launched the next (notebook 02). A CUDA graph records the launches once and replays them all with one call,
so the host cost per step becomes one ``cudaGraphLaunch``. What that needs from the step:

- static shapes (the loop drops the last partial batch) and static addresses: every batch is *copied* into
  the same input buffers (``static.dense.copy_(batch.dense)``, …) before the replay;
- no host sync and no host work inside (no ``.item()``, no id check: the fused backend runs its
  table-batched embedding with ``check_ids=False``; a learning rate lives in a device tensor);
- optimizers that step on the device without reading host state: SGD and Adagrad as they are, Adam with
  ``capturable=True`` (set here);
- a warm-up on a side stream before capture (lazy state: optimizer buffers, cuBLAS workspaces, Triton
  compilations). Warm-up steps train, so the model and optimizer state are saved before and written back
  after, in place (the graph records addresses): the first replay is then the first step, bit for bit
  what the uncaptured step would have done (tested on a GPU). The saved copy goes to host memory: a copy on
  the GPU would double the tables' memory while the step is built (2 GiB more with the Kaggle tables).
- the warm-up runs on the stream the graph is captured on, one per device for every graph built here.
  PyTorch keeps cuBLAS workspaces per stream (cuBLAS's and cuBLASLt's, 32 MiB each on an H100, from its
  caching allocator, never freed): warm-up and capture on one stream share them, where a fresh warm-up
  stream per graph added its own for every graph built.

The gradients become graph-owned buffers (``zero_grad(set_to_none=True)`` before capture, so the captured
backward allocates them in the graph's pool); the returned loss is a static tensor overwritten by each replay.

A graph holds addresses, not tensors: it does not keep the weights it reads and writes alive. So the returned
step holds the model and the optimizers (``step.model``, ``step.optimizers``). Without that, a caller that
kept only the step (``step, _ = build(...)``) had its model's memory returned to PyTorch's caching allocator
while replays still wrote to it, and the next model built in the process was handed the same blocks: two
graph steps in one process then corrupted each other (seen on an H100 as an illegal memory access).

Collectives in a graph (the data-parallel fused step, :mod:`.data_parallel`). NCCL collectives are captured
like kernels once their communicator exists (the warm-up runs them first). Two things differ:

- the capture is ``capture_error_mode="thread_local"`` when a process group exists, as in PyTorch's own tests
  of captured NCCL collectives: PyTorch's NCCL watchdog thread may query CUDA events while this thread
  captures, which the default ``"global"`` mode forbids to every thread of the process (the two-GPU runs
  below used ``"thread_local"``; ``"global"`` was not tried there);
- a process that still holds its graph step when it calls ``destroy_process_group`` never returns from it
  (seen on two H200s, NCCL 2.28.9: capture, replays and the bitwise check against the uncaptured step all
  finished; both ranks then waited in ``destroy_process_group`` until killed, with the graphs alive). Our
  reading of why: NCCL keeps a plan for each captured collective until the graph that holds it is destroyed,
  and destroying the communicator waits for them. With the graphs destroyed first both ranks exit
  (``tests/train/test_fused_data_parallel.py``): :func:`release_graphs` destroys every graph built here, and
  :func:`lecture_code.training.distributed.process_group` calls it before it destroys the group.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from lecture_code.training.step import make_train_step

__all__ = ["capture_stream", "make_graphed_train_step", "release_graphs"]


def _optimizers(optimizer) -> list[torch.optim.Optimizer]:
    items = optimizer if isinstance(optimizer, Sequence) else [optimizer]
    return [o for o in items if o is not None]


def _state_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    return [*model.parameters(), *model.buffers()]


def _to_host(t: torch.Tensor) -> torch.Tensor:
    return t.to("cpu", copy=True)  # synchronous: the warm-up must not overwrite t before it is copied


_capture_streams: dict[torch.device, torch.cuda.Stream] = {}
_live_graphs: weakref.WeakSet = weakref.WeakSet()  # every graph built here and not yet collected


def release_graphs() -> int:
    """Wait for the GPU, then destroy every graph :func:`make_graphed_train_step` built (their steps can no
    longer replay). Returns how many. Call it before ``destroy_process_group`` (module docstring says why)."""
    graphs = list(_live_graphs)
    if graphs:
        torch.cuda.synchronize()
    for graph in graphs:
        graph.reset()
        _live_graphs.discard(graph)
    return len(graphs)


def capture_stream(device: torch.device) -> torch.cuda.Stream:
    """The stream every graph on ``device`` is warmed up and captured on (created once)."""
    device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
    if device not in _capture_streams:
        _capture_streams[device] = torch.cuda.Stream(device)
    return _capture_streams[device]


def make_graphed_train_step(
    model: torch.nn.Module, optimizer, example_batch, warmup: int = 2, *, loss_fn=None, after_backward=None
) -> Callable[[object], torch.Tensor]:
    """``step(batch) -> loss``: the loop's step (:func:`~lecture_code.training.make_train_step`) replayed
    from one CUDA graph. ``optimizer``: one optimizer or a sequence (``None`` entries skipped);
    ``example_batch``: a batch of the size every later batch has (``dense``, ``sparse``, ``label``);
    ``loss_fn``, ``after_backward``: as in :func:`~lecture_code.training.make_train_step`.
    Raises on a model that is not on a GPU."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        raise RuntimeError(f"a CUDA graph step needs the model on a GPU; it is on {device}")
    opts = _optimizers(optimizer)
    for opt in opts:
        if isinstance(opt, torch.optim.Adam):
            for group in opt.param_groups:
                group["capturable"] = True
    loss_fn = loss_fn or torch.nn.functional.binary_cross_entropy_with_logits
    step = make_train_step(model, opts, compile_model=False, loss_fn=loss_fn, after_backward=after_backward)
    static = type(example_batch)(*(t.clone() for t in example_batch))

    saved_model = [_to_host(t.detach()) for t in _state_tensors(model)]
    saved_opt = [
        {p: {k: _to_host(v) if torch.is_tensor(v) else v for k, v in opt.state[p].items()} for p in opt.state}
        for opt in opts
    ]
    side = capture_stream(device)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step(static)
    torch.cuda.current_stream().wait_stream(side)
    with torch.no_grad():  # undo the warm-up's training, in place (the graph will record these addresses)
        for t, s in zip(_state_tensors(model), saved_model, strict=True):
            t.copy_(s)
        for opt, before in zip(opts, saved_opt, strict=True):
            for p, state in opt.state.items():
                for k, v in state.items():
                    if not torch.is_tensor(v):
                        state[k] = before.get(p, {}).get(k, v)
                    elif p in before:
                        v.copy_(before[p][k])
                    else:
                        v.zero_()  # state created by the warm-up: zero is the fresh state (Adam, SGD)

    for opt in opts:
        opt.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    _live_graphs.add(graph)
    mode = "thread_local" if dist.is_available() and dist.is_initialized() else "global"
    with torch.cuda.graph(graph, stream=side, capture_error_mode=mode):
        static_loss = _captured_step(model, opts, static, loss_fn, after_backward)

    def graphed_step(batch) -> torch.Tensor:
        for dst, src in zip(static, batch, strict=True):
            dst.copy_(src, non_blocking=True)
        graph.replay()
        return static_loss

    graphed_step.graph = graph  # type: ignore[attr-defined]
    graphed_step.static_batch = static  # type: ignore[attr-defined]
    graphed_step.model, graphed_step.optimizers = model, opts  # type: ignore[attr-defined]  (kept alive)
    return graphed_step


def _captured_step(model, opts, batch, loss_fn, after_backward) -> torch.Tensor:
    """The step without ``zero_grad``: captured gradients are written, not accumulated, by each replay."""
    loss = loss_fn(model(batch.dense, batch.sparse), batch.label)
    loss.backward()
    if after_backward is not None:
        after_backward()  # e.g. joins the streams the backward forked: a capture must end on one stream
    for opt in opts:
        opt.step()
    return loss.detach()
