"""The DLRM-side kernels launch through kernels.fast_launch.CachedLauncher: the bits of the normal launch.

GPU only: under the interpreter every call takes the normal path (``CachedLauncher.enabled`` is False), which
is asserted here so a CPU run states it. On a GPU each op runs with its launchers off (``kernel[grid](...)``),
then on three times (a tuned launcher learns the autotuner's config on the first, fills its table on the
second, hits it on the third), and every launcher must hold an entry:
a constexpr left out of its ``constexprs`` would silently never cache.
"""

from __future__ import annotations

import pytest
import torch

import kernels.dlrm.embedding_tbe as tbe_module
import kernels.dlrm.interaction_dot as interaction_module
import kernels.launch as launch_module
import kernels.mlp.fused_mlp as fused_mlp_module
import kernels.pointwise.add_mul_act as add_mul_act_module
import kernels.pointwise.bias_relu as bias_relu_module
from kernels import runtime

REDUCE = launch_module._launch_column_sum  # the second stage of the bias gradient
LAUNCHERS = {
    "bias_relu": [bias_relu_module._launch_fwd, bias_relu_module._launch_bwd, REDUCE],
    "add_mul_act": [add_mul_act_module._launch_fwd, add_mul_act_module._launch_bwd, REDUCE],
    "fused_mlp": [fused_mlp_module._launch_fwd],
    "interaction_dot": [interaction_module._launch_fwd, interaction_module._launch_bwd],
    "embedding_tbe": [
        tbe_module._launch_fwd, tbe_module._launch_rows, tbe_module._launch_blocks, tbe_module._launch_cross,
    ],
}  # fmt: skip


def _cached(launcher):
    """The CachedLauncher itself, or the one under a TunedLauncher."""
    return getattr(launcher, "launch", launcher)


def _run(name: str, device) -> list[torch.Tensor]:
    """One call of the op (forward, and backward where it has one) on fixed inputs → every result."""
    g = torch.Generator(device="cpu").manual_seed(5)
    rand = lambda *shape: torch.randn(*shape, generator=g).to(device)  # noqa: E731
    if name == "bias_relu":
        x = rand(300, 129).requires_grad_()
        y = bias_relu_module.bias_relu(x, rand(129))
        return [y, *torch.autograd.grad(y, x, rand(300, 129))]
    if name == "add_mul_act":
        x = rand(300, 129).requires_grad_()
        y = add_mul_act_module.add_mul_act(x, rand(129), rand(300, 129), 0.5, "gelu_tanh")
        return [y, *torch.autograd.grad(y, x, rand(300, 129))]
    if name == "fused_mlp":
        with torch.no_grad():
            w1, w2 = rand(64, 48) / 7, rand(5, 64) / 8  # sigmoid inputs of order 1
            return [fused_mlp_module.fused_mlp(rand(70, 48), w1, rand(64), w2, rand(5))]
    if name == "interaction_dot":
        dense, sparse = rand(33, 16).requires_grad_(), rand(33, 26, 16).requires_grad_()
        y = interaction_module.interaction_dot(dense, sparse)
        return [y, *torch.autograd.grad(y, (dense, sparse), rand(*y.shape))]
    sizes = [3, 1, 700, 2, 40]
    tbe = tbe_module.TableBatchedEmbedding(sizes, 16, optimizer="rowwise_adagrad", lr=0.1, device=device)
    with torch.no_grad():
        tbe.weight.copy_(rand(*tbe.weight.shape))
    ids = torch.stack([torch.randint(0, n, (200,), generator=g) for n in sizes], dim=1).to(device)
    out = tbe(ids)
    out.backward(rand(*out.shape))
    return [out, tbe.weight, tbe.momentum]


@pytest.mark.skipif(not runtime.interpreting(), reason="the interpreter's path (a GPU caches: next test)")
@pytest.mark.parametrize("name", list(LAUNCHERS))
def test_the_interpreter_takes_the_normal_launch(name):
    _run(name, torch.device("cpu"))
    for launcher in map(_cached, LAUNCHERS[name]):
        assert not launcher.enabled and not launcher._runners


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(LAUNCHERS))
def test_cached_launch_gives_the_same_bits_and_caches(name):
    device = torch.device("cuda")
    launchers = [_cached(launcher) for launcher in LAUNCHERS[name]]
    for launcher in LAUNCHERS[name]:
        launcher.clear()
    results = []
    try:
        for enabled in (False, True, True, True):  # a tuned launcher caches on its second enabled call
            for launcher in launchers:
                launcher.enabled = enabled
            results.append(_run(name, device))
    finally:
        for launcher in launchers:
            launcher.enabled = True
    for launcher in launchers:
        assert launcher._runners, f"{launcher.fn} never cached a launch: a constexpr missing from its call?"
    for got in results[1:]:
        for g, want in zip(got, results[0], strict=True):
            assert torch.equal(g, want)
