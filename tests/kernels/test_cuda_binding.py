"""kernels.cuda (the CUDA C++ extension) against kernels.reference: bias_relu and add_mul_relu. GPU only.

The first test to run builds the extension (about a minute, then cached by torch). Inputs are fresh random
tensors; outputs are poisoned through the caching allocator (see ``poison``); shapes cover 1x1, odd sizes,
rows that are no multiple of anything, more elements than one grid covers (the grid-stride loop), inputs
offset by one element (which defeats the 16-byte path), and bad inputs that must raise clear errors: through
the Python API in this process, and through the C++ ops directly in child processes (a crash fails one case).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernels.cuda as kernels_cuda

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]

# (dtype, atol, rtol) for add_mul_relu against the reference evaluated in fp32 and rounded once (the
# kernel's contract). bias_relu is compared exactly: one fp32 add and one rounding, the same as eager.
DTYPES = [
    pytest.param(torch.float32, 1e-5, 1e-5, id="fp32"),  # fma(alpha, y, x + b) vs separately rounded ops
    pytest.param(torch.float16, 1e-3, 2e-3, id="fp16"),  # 1 ulp (2^-10 relative) at a rounding boundary
    pytest.param(torch.bfloat16, 1e-2, 1.6e-2, id="bf16"),  # 1 ulp, bf16 ulp = 2^-8 relative
]
SHAPES = [
    pytest.param((1, 1), id="1x1"),
    pytest.param((3, 5), id="3x5"),
    pytest.param((1000, 4097), id="1000x4097"),  # cols odd: scalar path, many grid-stride steps
    pytest.param((65, 1024), id="65x1024"),  # 16-byte path, rows a multiple of nothing
    pytest.param((4097, 8), id="4097x8"),  # one pack per row (fp16/bf16)
    pytest.param((8192, 4096), id="8192x4096"),  # ~31 grid-stride steps (fp32, H100), 124 scalar
    pytest.param((2, 3, 64), id="3d"),  # leading dims flattened into rows
    pytest.param((0, 16), id="empty"),
]
ALPHA = 0.7


@pytest.fixture(scope="module")
def ops():
    """The built extension's ops (builds on first use); a build failure fails here, once."""
    return kernels_cuda.load()


def poison(like: torch.Tensor) -> None:
    """Free a NaN-filled block of ``like``'s size: torch's caching allocator usually gives it to the next
    allocation of that size (the op's output), so an element the kernel never writes stays NaN and fails."""
    torch.full(like.shape, float("nan"), device=like.device, dtype=like.dtype)


def randn_at(shape, dtype, offset=0):
    """Random contiguous tensor starting ``offset`` elements into its allocation (1 → not 16-byte aligned)."""
    n = 1
    for s in shape:
        n *= s
    return torch.randn(n + offset, device="cuda", dtype=dtype)[offset:].view(shape)


def _reference_add_mul_relu(x, bias, y, alpha):
    from kernels.reference import add_mul_act

    return add_mul_act(x.float(), bias.float(), y.float(), alpha, "relu").to(x.dtype)


def _check_bias_relu(x, bias):
    from kernels.reference import bias_relu

    poison(x)
    out = kernels_cuda.bias_relu(x, bias)
    assert out.is_contiguous() and out.device == x.device
    torch.testing.assert_close(out, bias_relu(x, bias), atol=0, rtol=0)


def _check_add_mul_relu(x, bias, y, alpha, atol, rtol):
    poison(x)
    out = kernels_cuda.add_mul_relu(x, bias, y, alpha)
    assert out.is_contiguous() and out.device == x.device
    torch.testing.assert_close(out, _reference_add_mul_relu(x, bias, y, alpha), atol=atol, rtol=rtol)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype, atol, rtol", DTYPES)
def test_bias_relu_matches_reference(ops, shape, dtype, atol, rtol, seed):
    _check_bias_relu(randn_at(shape, dtype), randn_at(shape[-1:], dtype))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype, atol, rtol", DTYPES)
def test_add_mul_relu_matches_reference(ops, shape, dtype, atol, rtol, seed):
    x, bias, y = randn_at(shape, dtype), randn_at(shape[-1:], dtype), randn_at(shape, dtype)
    _check_add_mul_relu(x, bias, y, ALPHA, atol, rtol)


@pytest.mark.parametrize("misaligned", ["x", "bias", "y"])
@pytest.mark.parametrize("dtype, atol, rtol", DTYPES)
def test_misaligned_input_takes_the_scalar_path(ops, misaligned, dtype, atol, rtol, seed):
    # 64 x 256: the 16-byte path would be taken if every pointer were aligned; one is offset by 1 element.
    shape = (64, 256)
    x = randn_at(shape, dtype, offset=int(misaligned == "x"))
    bias = randn_at(shape[-1:], dtype, offset=int(misaligned == "bias"))
    y = randn_at(shape, dtype, offset=int(misaligned == "y"))
    assert {"x": x, "bias": bias, "y": y}[misaligned].data_ptr() % 16 != 0
    if misaligned != "y":
        _check_bias_relu(x, bias)
    _check_add_mul_relu(x, bias, y, ALPHA, atol, rtol)


@pytest.mark.parametrize("alpha", [-1.5, 0.0, 2])
def test_other_alphas(ops, alpha, seed):
    shape = (37, 300)
    x, bias, y = (randn_at(s, torch.float32) for s in (shape, shape[-1:], shape))
    _check_add_mul_relu(x, bias, y, alpha, 1e-5, 1e-5)


def test_nan_propagates_like_torch_relu(ops):
    x = torch.randn(4, 8, device="cuda")
    x[1, 3] = float("nan")
    out = kernels_cuda.bias_relu(x, torch.randn(8, device="cuda"))
    assert out[1, 3].isnan() and out.isnan().sum() == 1


def test_launches_on_the_current_stream(ops, seed):
    # On a side stream: sleep, then write x. A kernel launched on another stream would not wait for the
    # write and would read the NaN poison left in x's block.
    shape = (256, 1024)
    bias = torch.randn(shape[-1], device="cuda")
    src = torch.randn(shape, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        poison(src)
        x = torch.empty_like(src)
        torch.cuda._sleep(50_000_000)  # ~30 ms of GPU time on this stream
        x.copy_(src)
        out = kernels_cuda.bias_relu(x, bias)
    side.synchronize()
    from kernels.reference import bias_relu

    torch.testing.assert_close(out, bias_relu(src, bias), atol=0, rtol=0)


def test_meta_tensors_give_shape_and_dtype(ops):
    x = torch.empty(5, 7, device="meta", dtype=torch.bfloat16)
    out = ops.add_mul_relu(x, torch.empty(7, device="meta", dtype=torch.bfloat16), x, 0.5)
    assert out.shape == (5, 7) and out.dtype == torch.bfloat16 and out.device.type == "meta"


# Bad inputs: one table, two callers. The Python API (kernels.cuda.*, which checks in Python before the op
# runs) is called in this process; the C++ ops themselves (torch.ops.fused_kernels_cuda.*, their check_inputs)
# in a child process, so that a crash in the C++ throw path (a segmentation fault on an H100, once) fails its
# own case with the return code instead of taking pytest down. Each case: (id, expression over `op` and the
# helpers of PRELUDE, exception type, pattern naming the argument, whether the C++ op is called too: not for
# arguments the op's schema refuses before its checks run).
PRELUDE = """
import torch
F64, F16, BF16 = torch.float64, torch.float16, torch.bfloat16
def cuda(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", dtype=dtype)
def int32(*shape):
    return torch.randint(-5, 5, shape, device="cuda", dtype=torch.int32)
"""

BAD_INPUTS = [
    ("cpu", "op.bias_relu(torch.randn(4, 8), torch.randn(8))", ValueError,
     r"bias_relu: x must be a CUDA tensor, got one on cpu", True),
    ("bias-on-cpu", "op.bias_relu(cuda(4, 8), torch.randn(8))", ValueError,
     "bias_relu: bias is on cpu but x is on cuda:0", True),
    ("f64", "op.bias_relu(cuda(4, 8, dtype=F64), cuda(8, dtype=F64))", TypeError,
     r"dtype torch.float64 is not supported \(use float32, float16 or bfloat16\)", True),
    ("int32", "op.bias_relu(int32(4, 8), int32(8))", TypeError, "dtype torch.int32 is not supported", True),
    ("bias-dtype", "op.bias_relu(cuda(4, 8), cuda(8, dtype=F16))", TypeError,
     "bias has dtype torch.float16 but x has torch.float32", True),
    ("bias-len", "op.bias_relu(cuda(4, 8), cuda(7))", ValueError,
     r"bias must have shape \[8\] \(the last dim of x, whose shape is \[4, 8\]\), got \[7\]", True),
    ("bias-2d", "op.bias_relu(cuda(4, 8), cuda(1, 8))", ValueError,
     r"bias must have shape \[8\].*got \[1, 8\]", True),
    ("x-transposed", "op.bias_relu(cuda(8, 4).t(), cuda(8))", ValueError,
     r"x must be contiguous, got shape \[4, 8\] with strides \[1, 4\]", True),
    ("x-strided", "op.bias_relu(cuda(16)[::2], cuda(8))", ValueError,
     r"x must be contiguous, got shape \[8\] with strides \[2\]", True),
    ("bias-strided", "op.bias_relu(cuda(4, 8), cuda(16)[::2])", ValueError,
     r"bias must be contiguous, got strides \[2\]", True),
    ("0d", "op.bias_relu(cuda(()), cuda(1))", ValueError, "x must have at least 1 dimension", True),
    ("y-shape", "op.add_mul_relu(cuda(4, 8), cuda(8), cuda(4, 9), 1.0)", ValueError,
     r"add_mul_relu: y must have x's shape \[4, 8\], got \[4, 9\]", True),
    ("y-dtype", "op.add_mul_relu(cuda(4, 8), cuda(8), cuda(4, 8, dtype=BF16), 1.0)", TypeError,
     "y has dtype torch.bfloat16 but x has torch.float32", True),
    ("y-transposed", "op.add_mul_relu(cuda(4, 8), cuda(8), cuda(8, 4).t(), 1.0)", ValueError,
     r"y must be contiguous, got strides \[1, 4\]", True),
    ("y-on-cpu", "op.add_mul_relu(cuda(4, 8), cuda(8), torch.randn(4, 8), 1.0)", ValueError,
     "y is on cpu but x is on cuda:0", True),
    ("x-list", "op.bias_relu([[1.0] * 8], cuda(8))", TypeError, "x must be a torch.Tensor, got list", False),
    ("alpha-str", "op.add_mul_relu(cuda(4, 8), cuda(8), cuda(4, 8), 'one')", TypeError,
     "alpha must be a Python number, got str", False),
]  # fmt: skip
PARAMS = [pytest.param(*case, id=case[0]) for case in BAD_INPUTS]
CPP_PARAMS = [pytest.param(*case, id=case[0]) for case in BAD_INPUTS if case[-1]]


def _namespace(op) -> dict:
    ns = {"op": op}
    exec(PRELUDE, ns)
    return ns


@pytest.mark.parametrize("case_id, expression, error, message, cpp", PARAMS)
def test_bad_inputs_raise_clear_errors(ops, case_id, expression, error, message, cpp):
    """The Python API: checked in Python, with the C++ binding's words, before the op is called."""
    with pytest.raises(error, match=message):
        eval(expression, _namespace(kernels_cuda))
    torch.cuda.synchronize()


# The child: loads the built extension, runs each case, prints one JSON line as it starts a case and one
# with the outcome. A case that starts and never reports crashed the child.
_CHILD = """
import json, sys
import torch
import kernels.cuda
ns = {"op": kernels.cuda.load()}
exec(sys.argv[1], ns)
for case_id, expression in json.loads(sys.argv[2]):
    print(json.dumps({"start": case_id}), flush=True)
    try:
        eval(expression, ns)
        torch.cuda.synchronize()
        outcome = {"id": case_id, "raised": None, "message": ""}
    except Exception as exc:
        outcome = {"id": case_id, "raised": type(exc).__name__, "message": str(exc)}
    print(json.dumps(outcome), flush=True)
"""


def _run_children(cases: list[tuple[str, str]]) -> dict[str, dict]:
    """Outcome per case id; after a crash, a fresh child takes the cases after the one that crashed."""
    outcomes: dict[str, dict] = {}
    pending = list(cases)
    while pending:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, PRELUDE, json.dumps(pending)],
            capture_output=True, text=True, cwd=REPO, timeout=600,
        )  # fmt: skip
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                if "id" in record:
                    outcomes[record["id"]] = record
        pending = [case for case in pending if case[0] not in outcomes]
        if pending and proc.returncode == 0:  # finished without reporting them: should not happen
            for case_id, _ in pending:
                outcomes[case_id] = {"crashed": 0, "stderr": proc.stderr[-2000:]}
            break
        if pending:  # the first case without an outcome is the one the child died in
            outcomes[pending[0][0]] = {"crashed": proc.returncode, "stderr": proc.stderr[-2000:]}
            pending = pending[1:]
    return outcomes


@pytest.fixture(scope="module")
def cpp_outcomes(ops):
    """Every C++-op case, run in child processes (after ``ops`` built the extension in this one)."""
    return _run_children([(case[0], case[1]) for case in BAD_INPUTS if case[-1]])


@pytest.mark.parametrize("case_id, expression, error, message, cpp", CPP_PARAMS)
def test_cpp_op_bad_inputs_raise_not_crash(cpp_outcomes, case_id, expression, error, message, cpp):
    """torch.ops.fused_kernels_cuda.* called directly: the C++ checks raise the same error, in the same words
    as the Python checks, and the process survives."""
    outcome = cpp_outcomes[case_id]
    assert "crashed" not in outcome, (
        f"{expression} killed the process (return code {outcome['crashed']}) instead of raising "
        f"{error.__name__}; stderr:\n{outcome['stderr']}"
    )
    assert outcome["raised"] == error.__name__, outcome
    assert re.search(message, outcome["message"]), outcome["message"]
    with pytest.raises(error) as python:  # the Python check of the same call says the same
        eval(expression, _namespace(kernels_cuda))
    assert str(python.value) in outcome["message"], (str(python.value), outcome["message"])
