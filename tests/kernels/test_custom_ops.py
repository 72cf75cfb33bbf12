"""Every public kernel entry point is a ``fused_kernels::`` op that passes ``torch.library.opcheck``.

opcheck runs the op for real and checks: its schema (declared mutations are the real ones, no output aliases
an input), its autograd registration, its fake function against the real outputs (shapes, dtypes, strides),
and AOTAutograd tracing with dynamic shapes (outputs and gradients against eager). Small shapes: on a CPU
every kernel runs in Triton's interpreter, and ``test_aot_dispatch_dynamic`` runs each op several times.

All four of opcheck's default checks run for every op here, except where a case says otherwise:
``embedding_tbe`` with an optimizer (its backward updates the table in place, so opcheck's repeated runs of
forward and backward see a different table each time and cannot agree) is checked as the plain lookup plus
the update op on its own, and the training path by the compile tests
(``tests/compile/test_custom_ops_compile.py``), which compare the updated tables with eager's.
"""

from __future__ import annotations

import pytest
import torch

# the kernel modules register their ops on import
import kernels.dlrm.interaction_dot
import kernels.lora.linear
import kernels.mlp.fused_mlp
import kernels.multi_lora.shrink_expand
import kernels.pointwise.add_mul_act
import kernels.pointwise.bias_relu
import kernels.qlora.linear  # noqa: F401
from kernels.configs import BranchConfig, GemmConfig, MlpConfig
from kernels.dlrm.embedding_tbe import table_offsets_for
from kernels.library import NAMESPACE, decode_config, encode_config, ops
from kernels.multi_lora.metadata import build_meta
from kernels.qlora.nf4 import quantize_nf4

DEVICE = kernels.default_device()


def rand(*shape, grad=False, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE, dtype=dtype).requires_grad_(grad)


def _bias_relu():
    return ops().bias_relu.default, (rand(5, 7, grad=True), rand(7, grad=True))


def _bias_relu_inplace():
    return ops().bias_relu_.default, (rand(5, 7), rand(7))


def _bias_relu_out():
    return ops().bias_relu_out.default, (rand(5, 7), rand(7), rand(5, 7))


def _add_mul_act():
    return ops().add_mul_act.default, (rand(5, 7, grad=True), rand(7, grad=True), rand(5, 7, grad=True), 0.5,
                                       "gelu_tanh")  # fmt: skip


def _interaction_dot():
    return ops().interaction_dot.default, (rand(3, 8, grad=True), rand(3, 4, 8, grad=True))


def _fused_mlp():
    return ops().fused_mlp.default, (rand(4, 8), rand(16, 8), rand(16), rand(3, 16), rand(3), "sigmoid", "")


def _lora(version):
    def case():
        # K, N multiples of 4 (fp32): every version can run; "" lets the op choose (v3 here)
        x, a, b = rand(6, 16, grad=True), rand(4, 16, grad=True), rand(12, 4, grad=True)
        args = (x, rand(12, 16), a, b, rand(12), 0.5, version, "", "")
        return ops().lora_linear.default, args

    return case


def _qlora_linear():
    # K = 80: a block of 64 codes runs on into the next row of W; N = 12, r = 4
    q = quantize_nf4(rand(12, 80))
    x, a, b = rand(6, 80, grad=True), rand(4, 80, grad=True), rand(12, 4, grad=True)
    return ops().qlora_linear.default, (x, q.packed, q.absmax(), 12, 80, 64, a, b, 0.5, "")


def _qlora_via_16_bits():
    import kernels.qlora.via_16_bits  # noqa: F401  (registers the op)

    q = quantize_nf4(rand(12, 80))
    x, a, b = rand(6, 80, grad=True), rand(4, 80, grad=True), rand(12, 4, grad=True)
    return ops().qlora_via_16_bits.default, (x, q.packed, q.absmax(), 12, 80, 64, a, b, 0.5)


def _build_meta():
    ids = torch.tensor([2, -1, 0, 2, 1, 0], device=DEVICE)
    return ops().build_meta.default, (ids, 3, None)


def _add_multi_lora(path: str):
    def case():
        T, K, N, R, L = 6, 16, 12, 4, 3
        ids = torch.tensor([2, -1, 0, 2, 1, 0], device=DEVICE)
        meta = build_meta(ids, L)
        args = (rand(T, N), rand(T, K), [rand(L, R, K)], [rand(L, N, R)], ids, meta.counts,
                meta.sorted_tokens, None, 0.5, True, path, "")  # fmt: skip
        return ops().add_multi_lora.default, args

    return case


def _tbe_args(B=4, sizes=(5, 3, 7), D=6):
    weight = rand(sum(sizes), D)
    t = table_offsets_for(sizes, DEVICE)
    ids = torch.stack([torch.randint(0, n, (B,), device=DEVICE) for n in sizes], dim=1)
    return weight, t, ids.reshape(-1), B


def _embedding_tbe_lookup():
    weight, t, flat, B = _tbe_args()
    args = (torch.zeros(0), weight, t, flat, None, None, None, B, 1, False, False, 0.0, True, True)
    return ops().embedding_tbe.default, args


def _embedding_tbe_update(adagrad):
    def case():
        weight, t, flat, B = _tbe_args()
        state = torch.rand(weight.shape[0], device=DEVICE) if adagrad else None
        lr = torch.full((1,), 0.1, device=DEVICE)
        args = (rand(B, 3, 6), weight, state, t, flat, None, lr, 1, False, adagrad, 1e-8, True)
        return ops().embedding_tbe_update.default, args

    return case


CASES = {
    "bias_relu": _bias_relu,
    "bias_relu_": _bias_relu_inplace,
    "bias_relu_out": _bias_relu_out,
    "add_mul_act": _add_mul_act,
    "interaction_dot": _interaction_dot,
    "fused_mlp": _fused_mlp,
    "lora_linear-auto": _lora(""),
    "lora_linear-v0": _lora("v0"),
    "lora_linear-v1": _lora("v1"),
    "lora_linear-small": _lora("small"),
    "qlora_linear": _qlora_linear,
    "qlora_via_16_bits": _qlora_via_16_bits,
    "build_meta": _build_meta,
    "add_multi_lora-default": _add_multi_lora(""),
    "add_multi_lora-one_launch": _add_multi_lora("one_launch"),
    "embedding_tbe-lookup": _embedding_tbe_lookup,
    "embedding_tbe_update-sgd": _embedding_tbe_update(False),
    "embedding_tbe_update-adagrad": _embedding_tbe_update(True),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_opcheck(case, seed):
    op, args = case()
    torch.library.opcheck(op, args)  # raises OpCheckError naming the failed check


def test_every_op_is_checked():
    """A new op in the namespace without a case here fails, so none goes unchecked."""
    names = {name for name in dir(ops()) if not name.startswith("_") and name not in ("name", "default")}
    registered = {n for n in names if hasattr(getattr(ops(), n), "default")}
    backward_ops = {
        f"{name}_backward"
        for name in (
            "bias_relu",
            "add_mul_act",
            "interaction_dot",
            "lora_linear",
            "qlora_linear",
            "qlora_via_16_bits",
        )
    }
    checked = {key.split("-")[0] for key in CASES} | backward_ops  # the backward ops: by the autograd checks
    assert registered == checked, f"ops of {NAMESPACE}:: without an opcheck case: {registered - checked}"


@pytest.mark.parametrize(
    "config",
    [None, GemmConfig(128, 256, 64, 8, 8, 3, "rows", False, 2), GemmConfig(block_m=64, order="grouped"),
     BranchConfig(64, 128, 64, None, 4, 3), MlpConfig(block_m=32, split=2)],
)  # fmt: skip
def test_config_strings_round_trip(config):
    assert decode_config(encode_config(config)) == config
