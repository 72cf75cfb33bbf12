"""kernels.library's direct calls: an op called in plain eager runs its body itself (and its autograd formula
through a plain autograd.Function), with the same bits as the torch.library op, the versions of what it
mutates bumped; anything that intercepts torch sees the op. Every op's call is counted, so a test knows which
path ran."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import kernels
import kernels.dlrm.interaction_dot
import kernels.lora.linear
import kernels.mlp.fused_mlp
import kernels.multi_lora.shrink_expand
import kernels.pointwise.add_mul_act
import kernels.pointwise.bias_relu  # noqa: F401  (the kernel files register their ops on import)
from kernels import library
from kernels.dlrm.embedding_tbe import embedding_tbe, table_offsets_for
from kernels.multi_lora.metadata import build_meta

DEVICE = kernels.default_device()


def rand(*shape, grad=False):
    return torch.randn(*shape, device=DEVICE).requires_grad_(grad)


def _lora():
    x, a, b = rand(6, 16, grad=True), rand(4, 16, grad=True), rand(12, 4, grad=True)
    return x, rand(12, 16), a, b, rand(12), 0.5, "", "", ""


def _multi_lora():
    ids = torch.tensor([2, -1, 0, 2, 1, 0], device=DEVICE)
    meta = build_meta(ids, 3)
    y, x, a, b = rand(6, 12), rand(6, 16), [rand(3, 4, 16)], [rand(3, 12, 4)]
    return y, x, a, b, ids, meta.counts, meta.sorted_tokens, None, 0.5, True, "", ""


CASES = {  # op name: fresh arguments (inputs that require grad get a backward too)
    "bias_relu": lambda: (rand(5, 7, grad=True), rand(7, grad=True)),
    "bias_relu_": lambda: (rand(5, 7), rand(7)),
    "bias_relu_out": lambda: (rand(5, 7), rand(7), rand(5, 7)),
    "add_mul_act": lambda: (
        rand(5, 7, grad=True),
        rand(7, grad=True),
        rand(5, 7, grad=True),
        0.5,
        "gelu_tanh",
    ),
    "interaction_dot": lambda: (rand(3, 8, grad=True), rand(3, 4, 8, grad=True)),
    "fused_mlp": lambda: (rand(4, 8), rand(16, 8), rand(16), rand(3, 16), rand(3), "sigmoid", ""),
    "lora_linear": _lora,
    "build_meta": lambda: (torch.tensor([2, -1, 0, 2, 1, 0], device=DEVICE), 3, None),
    "add_multi_lora": _multi_lora,
}


@pytest.fixture
def op_calls(monkeypatch):
    """Counts the calls that reach each registered torch.library op (forward and backward ops alike)."""
    calls = {}
    for name, op in library.registered().items():

        def counted(*args, _real=op.op, _name=name, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(op, "op", counted)
    return calls


def _copy(args):
    def one(a):
        if isinstance(a, list):
            return [one(t) for t in a]
        return a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a

    return tuple(one(a) for a in args)


def _run(name, args, through_op: bool):
    """Outputs, then every tensor argument after the call (mutations), then the inputs' gradients."""
    op = library.registered()[name]
    out = (op.op if through_op else op)(*args)
    outs = [t for t in (out if isinstance(out, tuple) else (out,)) if isinstance(t, torch.Tensor)]
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    grads = []
    if leaves:
        g = torch.Generator().manual_seed(1)
        dy = [torch.randn(t.shape, generator=g).to(DEVICE) for t in outs]
        grads = list(torch.autograd.grad(outs, leaves, dy, allow_unused=True))
    flat = [t for a in args for t in (a if isinstance(a, list) else [a]) if isinstance(t, torch.Tensor)]
    return [t.detach() for t in outs], [t.detach() for t in flat], grads


@pytest.mark.parametrize("name", CASES)
def test_a_direct_call_gives_the_ops_bits_and_reaches_no_op(name, op_calls, seed):
    args = CASES[name]()
    direct = _run(name, _copy(args), through_op=False)
    assert op_calls == {}, "a plain eager call reached the torch.library op"
    via_op = _run(name, _copy(args), through_op=True)
    assert op_calls.get(name) == 1
    assert len(direct[1]) > 0 and (len(direct[0]) > 0 or library.registered()[name].mutated)
    for kind, got, want in zip(("outputs", "arguments after", "gradients"), direct, via_op, strict=True):
        assert len(got) == len(want), kind
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            assert (a is None and b is None) or torch.equal(a, b), f"{kind} {i} differ"


def test_a_direct_call_bumps_the_version_of_what_it_writes(op_calls):
    x, b, out = rand(5, 7), rand(7), rand(5, 7)
    before = (x._version, out._version)
    library.registered()["bias_relu_out"](x, b, out)
    library.registered()["bias_relu_"](x, b)
    assert (x._version, out._version) == (before[0] + 1, before[1] + 1) and op_calls == {}


class _Seen(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def test_a_dispatch_mode_sees_the_op_and_its_backward_op(op_calls):
    x, b = rand(5, 7, grad=True), rand(7, grad=True)
    with _Seen() as seen:
        y = library.registered()["bias_relu"](x, b)
        y.sum().backward()
    assert op_calls == {"bias_relu": 1, "bias_relu_backward": 1}
    assert "fused_kernels.bias_relu.default" in seen.names


def test_a_subclass_or_the_profiler_takes_the_op(op_calls):
    from torch.testing._internal.two_tensor import TwoTensor

    x = rand(5, 7)
    library.registered()["bias_relu"](TwoTensor(x, x.clone()), TwoTensor(rand(7), rand(7)))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        library.registered()["bias_relu"](x, rand(7))
    assert op_calls == {"bias_relu": 2}  # the subclass's call, then the profiled one


def test_the_embedding_update_in_backward_is_direct_and_identical(op_calls):
    sizes, B, D = (5, 3, 7), 4, 6
    weight = rand(sum(sizes), D)
    t = table_offsets_for(sizes, DEVICE)
    ids = torch.stack([torch.randint(0, n, (B,), device=DEVICE) for n in sizes], dim=1)
    dy = rand(B, len(sizes), D)
    tables = []
    for forced in (False, True):
        w = weight.clone()
        with pytest.MonkeyPatch.context() as m:
            if forced:
                m.setattr(library, "plain_eager", lambda *tensors: False)
            embedding_tbe(w, t, ids, optimizer="sgd", lr=0.1).backward(dy)
        tables.append(w)
        counts = (op_calls.get("embedding_tbe"), op_calls.get("embedding_tbe_update"))
        assert counts == ((1, 1) if forced else (None, None))
    assert torch.equal(*tables) and not torch.equal(tables[0], weight)


def test_serving_under_inference_mode_is_direct_and_identical(op_calls):
    with torch.inference_mode():  # how a server runs multi-LoRA: tensors without version counters
        args = _multi_lora()
        direct, via_op = _copy(args), _copy(args)
        library.registered()["add_multi_lora"](*direct)
        assert op_calls == {}
        library.registered()["add_multi_lora"].op(*via_op)
    assert torch.equal(direct[0], via_op[0]) and not torch.equal(direct[0], args[0])


def test_torch_fx_symbolic_trace_records_the_op(op_calls):
    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = torch.nn.Parameter(rand(7))

        def forward(self, x):
            return library.registered()["bias_relu"](x, self.bias)

    traced = torch.fx.symbolic_trace(Layer())
    targets = [str(n.target) for n in traced.graph.nodes if n.op == "call_function"]
    assert targets == ["fused_kernels.bias_relu.default"] and op_calls == {"bias_relu": 1}
    x = rand(5, 7)
    assert torch.equal(traced(x), library.registered()["bias_relu"].op(x, traced.bias))


def test_torch_jit_trace_records_the_op(op_calls):
    x, b = rand(5, 7), rand(7)
    traced = torch.jit.trace(lambda x, b: library.registered()["bias_relu"](x, b), (x, b), check_trace=False)
    assert "fused_kernels::bias_relu" in str(traced.graph) and op_calls == {"bias_relu": 1}


def test_meta_tensors_take_the_op_and_its_fake_function(op_calls):
    x, b = torch.empty(5, 7, device="meta"), torch.empty(7, device="meta")
    out = library.registered()["bias_relu"](x, b)
    assert (out.device.type, out.shape) == ("meta", (5, 7)) and op_calls == {"bias_relu": 1}
