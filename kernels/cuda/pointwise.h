// Host-side declarations of the pointwise launchers: plain C++, includable by a host compiler (g++) and by
// the torch binding, which never sees a __global__ function. The definitions are templates in
// pointwise.cuh; pointwise.cu instantiates them for the three storage types below.
//
// Each launcher: out = op(x, bias[, y]) for contiguous row-major [rows, cols] x (and y, out) and [cols] bias;
// enqueues the kernel on `stream`, never synchronizes, and returns cudaGetLastError() after the launch
// (cudaSuccess, and no launch, when rows or cols is 0).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fused_kernels {

// out = relu(x + bias)
template <typename T>
cudaError_t launch_bias_relu(const T* x, const T* bias, T* out, int64_t rows, int64_t cols,
                             cudaStream_t stream);

// out = relu(x + bias + alpha * y)
template <typename T>
cudaError_t launch_add_mul_relu(const T* x, const T* bias, const T* y, float alpha, T* out, int64_t rows,
                                int64_t cols, cudaStream_t stream);

// Defined (explicitly instantiated) in pointwise.cu: float, __half, __nv_bfloat16.
extern template cudaError_t launch_bias_relu<float>(const float*, const float*, float*, int64_t, int64_t,
                                                    cudaStream_t);
extern template cudaError_t launch_bias_relu<__half>(const __half*, const __half*, __half*, int64_t, int64_t,
                                                     cudaStream_t);
extern template cudaError_t launch_bias_relu<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*,
                                                            __nv_bfloat16*, int64_t, int64_t, cudaStream_t);
extern template cudaError_t launch_add_mul_relu<float>(const float*, const float*, const float*, float, float*,
                                                       int64_t, int64_t, cudaStream_t);
extern template cudaError_t launch_add_mul_relu<__half>(const __half*, const __half*, const __half*, float,
                                                        __half*, int64_t, int64_t, cudaStream_t);
extern template cudaError_t launch_add_mul_relu<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*,
                                                               const __nv_bfloat16*, float, __nv_bfloat16*,
                                                               int64_t, int64_t, cudaStream_t);

}  // namespace fused_kernels
