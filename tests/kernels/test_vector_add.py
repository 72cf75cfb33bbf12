import os

import pytest
import torch

from kernels import reference, runtime
from kernels.vector_add import vector_add


def test_mode_is_set_before_kernels():
    if not torch.cuda.is_available():
        assert os.environ.get("TRITON_INTERPRET") == "1"
        assert runtime.mode() == "cpu-interpreter"
        assert runtime.sizes().name == "small"


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
