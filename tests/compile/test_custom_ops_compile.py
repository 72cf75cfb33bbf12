"""torch.compile(fullgraph=True) over models that use the fused kernels: one graph, results equal to eager.

The kernels are ``fused_kernels::`` ops (:mod:`kernels.library`), so dynamo records each call as one node
instead of tracing into the launchers. ``fullgraph=True`` turns any graph break into an error, and a counting
backend asserts that exactly one graph was compiled (one for the forward; AOTAutograd makes the backward from
it). Models: (a) an MLP wrapped by ``apply_lora(..., backend="fused")``, trained one step; (b) the fused DLRM
(``DLRM(..., backend="fused")``), trained one step, its tables updated inside the compiled backward by the
TBE's optimizer; (c) a multi-LoRA serving layer (``add_multi_lora`` in place into a base linear's output).

On a CPU the backend is ``"aot_eager"`` (dynamo + AOTAutograd, the ops run eagerly, in Triton's interpreter):
inductor would work around the ops too, but its C++ compile costs seconds per graph on a 2-core CI machine,
and what these tests check (tracing, fake functions, autograd formulas, declared mutations) is the same. On a
GPU (``gpu``-marked tests) inductor compiles for real, with ``mode="reduce-overhead"`` (CUDA graphs) for (a)
and (c).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import kernels
from kernels.multi_lora.metadata import build_meta
from kernels.multi_lora.shrink_expand import add_multi_lora
from lecture_code.lora import apply_lora
from lecture_code.model import DLRM, DLRMConfig

DEVICE = kernels.default_device()


class CountingBackend:
    """A torch.compile backend that counts the graphs dynamo hands it, then runs ``inner`` on them."""

    def __init__(self, inner: str = "aot_eager"):
        self.inner, self.graphs = inner, 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        from torch._dynamo.backends.registry import lookup_backend

        return lookup_backend(self.inner)(gm, example_inputs)


def _lora_mlp(seed: int, device=DEVICE) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 12)).to(device)
    apply_lora(model, ["0", "2"], r=4, alpha=8, backend="fused")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_b" in name:
                p.normal_()  # a fresh B is zero: make the branch count
    return model


def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _check_lora_step(compiled_fn, model, eager, x):
    out = compiled_fn(x)
    want = eager(x)
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
    out.square().sum().backward()
    want.square().sum().backward()
    got, ref = _grads(model), _grads(eager)
    assert set(got) == set(ref) and len(got) == 4, sorted(got)  # lora_a, lora_b of both layers
    for name in ref:
        torch.testing.assert_close(got[name], ref[name], atol=1e-4, rtol=1e-4, msg=name)
    return out


def test_apply_lora_fused_compiles_to_one_graph(seed):
    model = _lora_mlp(seed)
    eager = copy.deepcopy(model)
    x = torch.randn(2, 5, 16, device=DEVICE)  # 3-D: the wrapper flattens rows before the op
    backend = CountingBackend()
    _check_lora_step(torch.compile(model, backend=backend, fullgraph=True), model, eager, x)
    assert backend.graphs == 1


def test_a_version_asked_for_reaches_the_op_under_compile(seed, monkeypatch):
    # while tracing, lora_linear cannot choose (no addresses): the op chooses at run time from this version
    import kernels.lora.linear as linear

    seen = []
    real = linear._chosen
    monkeypatch.setattr(linear, "_chosen", lambda x2, w, b, version, stacklevel: seen.append(version) or real(
        x2, w, b, version, stacklevel))  # fmt: skip
    x, w = torch.randn(6, 16, device=DEVICE), torch.randn(12, 16, device=DEVICE)
    a, b = torch.randn(4, 16, device=DEVICE), torch.randn(12, 4, device=DEVICE)
    f = torch.compile(
        lambda x: linear.lora_linear(x, w, a, b, 0.5, version="v1"), backend="aot_eager", fullgraph=True
    )
    torch.testing.assert_close(f(x), linear.lora_linear(x, w, a, b, 0.5, version="v1"))
    assert seen and all(v == "v1" for v in seen), seen


def _tiny_fused_dlrm(seed: int, device=DEVICE):
    torch.manual_seed(seed)
    tables = (7, 5, 11, 3)
    config = DLRMConfig.preset("small", tables, hashing="modulus")
    model = DLRM(config, backend="fused", embedding_optimizer="rowwise_adagrad", embedding_lr=0.1).to(device)
    B = 8
    dense = torch.randn(B, config.num_dense, device=device)
    sparse = torch.stack([torch.randint(0, 1 << 20, (B,)) for _ in tables], dim=1).to(device)
    labels = torch.randint(0, 2, (B,), device=device).float()
    return model, dense, sparse, labels


def test_fused_dlrm_train_step_compiles_to_one_graph(seed):
    model, dense, sparse, labels = _tiny_fused_dlrm(seed)
    eager = copy.deepcopy(model)
    backend = CountingBackend()
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    loss_fn = nn.BCEWithLogitsLoss()
    out = compiled(dense, sparse)
    want = eager(dense, sparse)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    loss_fn(out, labels).backward()  # the TBE's backward updates the tables and the Adagrad state in place
    loss_fn(want, labels).backward()
    assert backend.graphs == 1
    for (name, p), q in zip(model.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-5, msg=name)
    tbe, tbe_eager = model.sparse_arch, eager.sparse_arch
    before = _tiny_fused_dlrm(seed)[0].sparse_arch.weight
    assert not torch.equal(tbe.weight, before), "the tables were updated"
    torch.testing.assert_close(tbe.weight, tbe_eager.weight, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(tbe.momentum, tbe_eager.momentum, atol=1e-6, rtol=1e-6)


class MultiLoRALinear(nn.Module):
    """A serving layer: a frozen base linear plus ``L`` adapters picked per token (``-1``: none)."""

    def __init__(self, k: int, n: int, r: int, num_adapters: int, device=DEVICE):
        super().__init__()
        self.base = nn.Linear(k, n, device=device)
        a = torch.randn(num_adapters, r, k, device=device) / k**0.5
        self.lora_a = nn.Parameter(a, requires_grad=False)
        self.lora_b = nn.Parameter(torch.randn(num_adapters, n, r, device=device), requires_grad=False)
        self.scale = torch.rand(num_adapters, device=device) + 0.5

    def forward(self, x: torch.Tensor, adapter_ids: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        meta = build_meta(adapter_ids, self.lora_a.shape[0])
        return add_multi_lora(y, x, self.lora_a, self.lora_b, adapter_ids, self.scale, meta=meta)


def _multi_lora_case(seed: int, device=DEVICE):
    torch.manual_seed(seed)
    layer = MultiLoRALinear(16, 12, 4, 3, device)
    x = torch.randn(9, 16, device=device)
    ids = torch.tensor([2, -1, 0, 2, 1, 0, 1, 1, -1], device=device)
    return layer, x, ids


@torch.no_grad()
def test_multi_lora_layer_compiles_to_one_graph(seed):
    layer, x, ids = _multi_lora_case(seed)
    backend = CountingBackend()
    compiled = torch.compile(layer, backend=backend, fullgraph=True)
    out = compiled(x, ids)
    torch.testing.assert_close(out, layer(x, ids), atol=1e-5, rtol=1e-5)
    assert backend.graphs == 1
    base = layer.base(x)
    assert torch.equal(out[ids == -1], base[ids == -1]), "rows without an adapter are the base output"
    assert not torch.allclose(out[ids >= 0], base[ids >= 0])


# ---- GPU: inductor, and CUDA graphs through the compiler ------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_apply_lora_fused_inductor_gpu(mode, seed):
    model = _lora_mlp(seed)
    eager = copy.deepcopy(model)
    x = torch.randn(2, 64, 16, device=DEVICE)
    compiled = torch.compile(model, fullgraph=True, mode=mode)
    for _ in range(3):  # reduce-overhead: warm-up runs, then a recorded CUDA graph replays
        for p in (*model.parameters(), *eager.parameters()):
            p.grad = None
        out = _check_lora_step(compiled, model, eager, x)
        assert out.is_cuda


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@torch.no_grad()
def test_multi_lora_layer_inductor_gpu(mode, seed):
    layer, x, ids = _multi_lora_case(seed)
    compiled = torch.compile(layer, fullgraph=True, mode=mode)
    for _ in range(3):
        out = compiled(x, ids)
        assert out.is_cuda
        torch.testing.assert_close(out, layer(x, ids), atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
def test_fused_dlrm_train_step_inductor_gpu(seed):
    model, dense, sparse, labels = _tiny_fused_dlrm(seed)
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, fullgraph=True)
    loss_fn = nn.BCEWithLogitsLoss()
    out = compiled(dense, sparse)
    want = eager(dense, sparse)
    assert out.is_cuda
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    loss_fn(out, labels).backward()
    loss_fn(want, labels).backward()
    torch.testing.assert_close(model.sparse_arch.weight, eager.sparse_arch.weight, atol=1e-6, rtol=1e-6)


def test_the_exchange_path_is_the_one_graph_break_and_trains_as_eager():
    """``embedding_tbe(exchange=...)`` (the data-parallel path: a callable run in backward) runs outside
    the compiled graph by design: with ``fullgraph=True`` it is refused, without it the tables get the same
    update as eager and the exchange is called once per backward."""
    from kernels.dlrm.embedding_tbe import embedding_tbe, table_offsets_for

    sizes, D = (5, 7), 4
    offsets = table_offsets_for(sizes, device=DEVICE)
    ids = torch.stack([torch.randint(0, n, (6,), device=DEVICE) for n in sizes], dim=1)  # [B, F]
    calls = []

    def exchange(flat_ids, grad):
        calls.append(flat_ids.numel())
        return flat_ids, grad

    def step(weight):
        out = embedding_tbe(weight, offsets, ids, optimizer="sgd", lr=0.1, exchange=exchange)
        return (out * out).sum()

    start = torch.randn(sum(sizes), D, device=DEVICE)
    # first: dynamo caches what it compiled per function, and a cached graph-broken step would not refuse
    with pytest.raises(Exception, match="marked as skipped"):
        torch.compile(step, backend="aot_eager", fullgraph=True)(start.clone())
    eager, compiled = start.clone(), start.clone()
    step(eager).backward()
    torch.compile(step, backend="aot_eager")(compiled).backward()
    assert calls == [ids.numel()] * 2  # the exchange ran in both backwards
    torch.testing.assert_close(compiled, eager)
    assert not torch.equal(compiled, start)  # the update happened
