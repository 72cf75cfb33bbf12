// The torch-facing API of the CUDA kernels: what binding.cpp registers as torch.ops.fused_kernels_cuda.*
// and what the standalone C++ tests (tests/test_pointwise.cpp) call directly.
#pragma once

#include <ATen/core/Tensor.h>

namespace fused_kernels {

// relu(x + bias): x [..., N] contiguous CUDA fp32/fp16/bf16, bias [N] of the same dtype and device.
at::Tensor bias_relu(const at::Tensor& x, const at::Tensor& bias);

// relu(x + bias + alpha * y): as bias_relu, plus y of x's shape, dtype and device.
at::Tensor add_mul_relu(const at::Tensor& x, const at::Tensor& bias, const at::Tensor& y, double alpha);

}  // namespace fused_kernels
