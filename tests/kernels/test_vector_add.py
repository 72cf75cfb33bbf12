"""vector_add, the smallest Triton kernel, and the runtime mode it proves (interpreted or compiled)."""

import os

import pytest
import torch
from triton.runtime import JITFunction
from triton.runtime.interpreter import InterpretedFunction

from kernels import reference, runtime
from kernels.pointwise.vector_add import _vector_add_kernel, vector_add


def test_mode_is_set_before_kernels(seed):
    # The decorator ran after the mode was decided: the kernel is interpreted exactly when the runtime says
    # so (on a GPU: compiled, on cuda tensors, with full sizes), and it computes the right thing there.
    interpreted = isinstance(_vector_add_kernel, InterpretedFunction)
    assert interpreted != isinstance(_vector_add_kernel, JITFunction)
    assert interpreted == runtime.interpreting()
    if not torch.cuda.is_available():
        assert os.environ.get("TRITON_INTERPRET") == "1" and interpreted
    assert runtime.mode() == ("cpu-interpreter" if interpreted else "gpu")
    assert runtime.sizes() == (runtime.SMALL if interpreted else runtime.FULL)
    device = runtime.default_device()
    assert device.type == ("cpu" if interpreted else "cuda")
    x, y = torch.randn(2, runtime.SMALL.vector_numel, device=device)
    out = vector_add(x, y)
    assert out.device.type == device.type
    torch.testing.assert_close(out, reference.vector_add(x, y), rtol=0, atol=0)


@pytest.mark.parametrize("n", [1, 1023, 1024, 4_099])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_vector_add_matches_reference(n, dtype, seed):
    device = runtime.default_device()
    x = torch.randn(n, device=device, dtype=dtype)
    y = torch.randn(n, device=device, dtype=dtype)
    torch.testing.assert_close(vector_add(x, y, block=256), reference.vector_add(x, y), rtol=0, atol=0)


def test_vector_add_non_contiguous(seed):
    device = runtime.default_device()
    x = torch.randn(33, 17, device=device).t()
    y = torch.randn(17, 33, device=device)
    torch.testing.assert_close(vector_add(x, y, block=128), x + y, rtol=0, atol=0)


def test_vector_add_rejects_bad_input():
    with pytest.raises(ValueError, match="shapes differ"):
        vector_add(torch.ones(3), torch.ones(4))
    with pytest.raises(TypeError, match="dtypes differ"):
        vector_add(torch.ones(3), torch.ones(3, dtype=torch.float64))


@pytest.mark.gpu
def test_vector_add_bf16_on_gpu(seed):
    x = torch.randn(1 << 20, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(1 << 20, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(vector_add(x, y), x + y, rtol=0, atol=0)
