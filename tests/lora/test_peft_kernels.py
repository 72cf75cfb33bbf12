"""The PEFT drop-in (lecture_code.lora.peft_kernels): a PEFT model on the fused kernel against the same model
on PEFT's eager path — outputs and every gradient; state dict, save/load, merge, several named adapters; the
layers the kernel cannot take stay on PEFT's path and are listed once.

peft is in requirements.txt (the GPU image has peft 0.21): a missing peft fails here, never skips.
"""

from __future__ import annotations

import copy
import warnings

import peft
import pytest
import torch
from torch import nn

from kernels import runtime
from lecture_code.lora import peft_kernels, use_fused_kernels, use_peft_forward
from lecture_code.lora.peft_kernels import FusedLoraLinear

pytestmark = pytest.mark.filterwarnings("ignore:lora_linear. general path:RuntimeWarning")

DTYPES = [
    pytest.param(torch.float32, 1e-5, id="fp32"),  # summation order only (the kernel's dots vs torch's)
    pytest.param(torch.bfloat16, 3e-2, id="bf16", marks=pytest.mark.gpu),  # a few bf16 ulps (2^-7)
]
Q, V = "base_model.model.q", "base_model.model.v"


class Tiny(nn.Module):
    """An embedding and three linears, no activation (a ReLU turns rounding at 0 into flipped gradients)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 32)
        self.q = nn.Linear(32, 48)
        self.v = nn.Linear(48, 24, bias=False)
        self.out = nn.Linear(24, 8)

    def forward(self, x, ids):  # x [B, T, 32], ids [B, T] → [B, T, 8]
        return self.out(self.v(self.q(x + self.emb(ids))))


@pytest.fixture
def kernel_calls(monkeypatch):
    """The shapes of x for each call of the fused kernel (so a test sees the kernel ran, not PEFT's path)."""
    calls, real = [], peft_kernels.lora_linear

    def counted(x, *args, **kw):
        calls.append(tuple(x.shape))
        return real(x, *args, **kw)

    monkeypatch.setattr(peft_kernels, "lora_linear", counted)
    return calls


def _config(**kw):
    defaults = dict(r=4, lora_alpha=8, target_modules=["q", "v"], lora_dropout=0.0, init_lora_weights=False)
    return peft.LoraConfig(**{**defaults, **kw})  # init_lora_weights=False: B random too, not zero


def _model(dtype=torch.float32, **kw):
    """The same weights every call (seed 0), without resetting the test's seed: the inputs stay fresh."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        base = Tiny().to(device=runtime.default_device(), dtype=dtype)
        return peft.get_peft_model(base, _config(**kw), autocast_adapter_dtype=False)  # adapters in `dtype`


def _inputs(dtype=torch.float32):
    device = runtime.default_device()
    x = torch.randn(2, 5, 32, device=device, dtype=dtype)
    ids = torch.randint(0, 10, (2, 5), device=device)
    return x, ids, torch.randn(2, 5, 8, device=device, dtype=dtype)


def _run(model, x, ids, grad):
    """Output, dX and the gradient of every trainable parameter by name."""
    x = x.clone().requires_grad_()
    y = model(x, ids)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    grads = torch.autograd.grad(y, [x, *params.values()], grad)
    return y.detach(), dict(zip(["x", *params], grads, strict=True))


def _assert_same(fused, eager, tol, x, ids, grad):
    """A sum's rounding scales with its terms, not its result: atol is tol × the tensor's largest entry
    (PEFT's bf16 eager path is itself off float64 by up to 1.8% of that, the kernel 1.1%: H200, 40 seeds)."""
    y_f, g_f = _run(fused, x, ids, grad)
    y_e, g_e = _run(eager, x, ids, grad)
    assert g_f.keys() == g_e.keys() and len(g_f) > 1
    for name, got, want in [("y", y_f, y_e), *((n, g_f[n], g_e[n]) for n in g_e)]:
        atol = tol * max(1.0, want.abs().max().item())
        torch.testing.assert_close(got, want, rtol=tol, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("dtype, tol", DTYPES)
def test_outputs_and_every_gradient_equal_peft(dtype, tol, seed, kernel_calls):
    eager = _model(dtype)
    fused = copy.deepcopy(eager)
    report = use_fused_kernels(fused)
    assert report.fused == [Q, V] and not report.kept
    assert type(fused.get_submodule(Q)) is FusedLoraLinear
    _assert_same(fused, eager, tol, *_inputs(dtype))
    assert kernel_calls == [(2, 5, 32), (2, 5, 48)]  # q and v, once each (the eager model: never)


def test_several_named_adapters(seed, kernel_calls):
    eager = _model()
    eager.add_adapter("second", _config(r=8, lora_alpha=4, target_modules=["q"]))
    fused = copy.deepcopy(eager)
    use_fused_kernels(fused)
    inputs = _inputs()
    for adapter in ("second", "default"):
        eager.set_adapter(adapter)
        fused.set_adapter(adapter)
        _assert_same(fused, eager, 1e-5, *inputs)
    assert len(kernel_calls) == 3  # "second" on q; "default" on q and v
    for model in (eager, fused):  # both active: the first by the kernel, the second added as PEFT adds it
        model.base_model.set_adapter(["default", "second"])
    _assert_same(fused, eager, 1e-5, *inputs)
    assert len(kernel_calls) == 5


def test_layers_the_kernel_cannot_take_stay_on_peft_and_are_listed_once(seed, kernel_calls):
    eager = _model(target_modules=["q", "v", "emb"])  # an Embedding LoRA layer
    eager.add_adapter("dora", _config(target_modules=["q"], use_dora=True))
    eager.add_adapter("dropout", _config(target_modules=["v"], lora_dropout=0.1))
    eager.add_adapter("bias", _config(target_modules=["q"], lora_bias=True))
    fused = copy.deepcopy(eager)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = use_fused_kernels(fused)
    listed = [w for w in caught if "stay on PEFT's path" in str(w.message)]
    assert len(listed) == 1  # one warning for all of them
    assert report.fused == [Q, V]  # their "default" adapters still take the kernel
    assert report.kept == {
        "base_model.model.emb": "Embedding LoRA layer (the kernel is for Linear layers)",
        f"{Q}[dora]": "DoRA",
        f"{Q}[bias]": "lora_bias (a bias on B)",
        f"{V}[dropout]": "lora_dropout = 0.1 > 0",
    }
    for model in (eager, fused):
        model.eval()  # dropout off: the same numbers from both sides
    inputs = _inputs()
    for adapter in ("dora", "dropout", "bias", "default"):
        eager.set_adapter(adapter)
        fused.set_adapter(adapter)
        _assert_same(fused, eager, 1e-5, *inputs)
        assert len(kernel_calls) == (2 if adapter == "default" else 0)  # only "default" takes the kernel


def test_state_dict_save_load_and_merge_keep_working(tmp_path, seed):
    eager = _model()
    fused = copy.deepcopy(eager)
    use_fused_kernels(fused)
    want, got = eager.state_dict(), fused.state_dict()
    assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)
    x, ids, _ = _inputs()
    with torch.no_grad():
        y = fused(x, ids)

        fused.save_pretrained(tmp_path)
        with torch.random.fork_rng():
            torch.manual_seed(0)
            plain = Tiny().to(x.device)  # the same base weights as _model's
        loaded = peft.PeftModel.from_pretrained(copy.deepcopy(plain), tmp_path)
        assert use_fused_kernels(loaded).fused == [Q, V]  # a loaded model is a fresh PEFT model: switch again
        torch.testing.assert_close(loaded(x, ids), y, rtol=0, atol=0)

        with fused.disable_adapter():  # PEFT's path: the base model alone
            torch.testing.assert_close(fused(x, ids), plain(x, ids), rtol=0, atol=0)

        merged = fused.merge_and_unload()
        assert not any(isinstance(m, peft.tuners.lora.LoraLayer) for m in merged.modules())
        torch.testing.assert_close(merged(x, ids), eager.merge_and_unload()(x, ids), rtol=0, atol=0)
        torch.testing.assert_close(merged(x, ids), y, rtol=1e-5, atol=1e-5)


def test_use_peft_forward_switches_back(seed):
    model = _model()
    use_fused_kernels(model)
    assert use_peft_forward(model) == 2
    assert type(model.get_submodule(Q)) is peft.tuners.lora.Linear
