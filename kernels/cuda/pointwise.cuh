// Fused pointwise kernels in CUDA C++: bias + ReLU, and add-mul-ReLU. No torch headers here, so CI can
// compile this file with `nvcc -ptx` on a machine without a GPU (tests/kernels/test_cuda_compile.py).
//
// Math (x, y are [rows, cols] row-major and contiguous; bias is [cols], broadcast over the rows):
//
//     bias_relu:     out[r, c] = relu(x[r, c] + bias[c])
//     add_mul_relu:  out[r, c] = relu(x[r, c] + bias[c] + alpha * y[r, c])
//
// Both compute in fp32 whatever the storage type (float, __half, __nv_bfloat16) and round once on the
// store. relu is written `z < 0 ? 0 : z` so a NaN stays NaN, as torch.relu does (fmaxf(z, 0) would turn
// NaN into 0).
//
// Bytes moved (element size s; n = rows * cols):
//     bias_relu:     reads n + cols elements (x, bias), writes n (out)        -> (2n + cols) * s bytes
//     add_mul_relu:  reads 2n + cols elements (x, y, bias), writes n (out)    -> (3n + cols) * s bytes
// A handful of FLOPs per element, so both are memory-bound: the ceiling is the device's copy bandwidth.
// 65536 x 4096 fp32 bias_relu moves 2.15 GB, about 0.73 ms at the H100's measured 2.96 TB/s. Eager PyTorch
// runs add then relu and moves about 4n * s (add_mul_relu: mul, add, add, relu, about 9n * s).
//
// Launch geometry (one 1-D grid, whatever the shape):
//   * work items: 16-byte packs of kVec = 16 / sizeof(T) elements (4 fp32, 8 fp16/bf16) when cols is a
//     multiple of kVec and every pointer is 16-byte aligned; otherwise single elements (kVec = 1).
//     With cols % kVec == 0 a pack never straddles two rows, so the matching bias pack is aligned too.
//   * blocks = min(ceil_div(work items, kThreads), one full wave): a full wave is num_SMs *
//     (max threads per SM / kThreads) blocks, e.g. 132 * 8 = 1056 blocks of 256 threads on an H100.
//   * each thread walks a grid-stride loop: item i, i + stride, i + 2*stride, ... (stride = total threads),
//     so any size runs with the same grid and every load is coalesced (a warp reads 512 contiguous bytes).
//   * the bias column of item i is (i * kVec) % cols. One 64-bit modulo per thread, then the column moves by
//     the constant (stride * kVec) % cols each step with a single wrap, because 64-bit division costs
//     dozens of instructions and would make this kernel compute-bound if done per element.
//
// Mistakes of the original lecture's CUDA code, quoted from kapilsh/cuda-mode-lecture (its FusedKernels.ipynb
// prints kernels/src/pointwise_add_relu_fused.cu and kernels/src/fused_kernels_lora_on_mlp.cu), and what
// this file does instead:
//   1. The block is one row of the tensor: `auto XBLOCK = sizes[1];` then `dim3 threadsPerBlock(XBLOCK);`
//      (add_relu_fusion), and `dim3 threadsPerBlock(sizes[1]);` (fused_add_mul_relu). A block holds at most
//      1024 threads, so a tensor with more than 1024 columns does not launch at all. Here the block is a
//      constant kThreads = 256, whatever the shape.
//   2. fused_add_mul_relu takes its grid from the other dimension: `const int XBLOCK = sizes[0];` and
//      `dim3 numBlocks((numel + XBLOCK - 1) / XBLOCK);`, i.e. ceil(rows * cols / rows) = cols blocks of
//      cols threads. That is cols * cols threads for rows * cols elements: when rows > cols the last rows
//      are never computed (its test used 8 x 10). Here one 1-D grid over flat work items, grid-stride loop.
//   3. The multiplier is a double: `const double multiplier` and `multiplier * tmp3 + tmp0 + tmp1`, so the
//      float operands are promoted and the expression is FP64 math, rounded back to float on the store
//      (FP64 units are scarce on many GPUs). Here alpha is a float and all math is fp32.
//   4. `cudaDeviceSynchronize();` after every launch, and no error check: the host waits for each kernel,
//      and a launch that fails (item 1) returns as if it had worked. Here the launcher returns
//      cudaGetLastError(), the binding checks it (C10_CUDA_CHECK), and nothing synchronizes.
//   5. No checks of dtype, device, contiguity or shape: the binding calls `in_out.data_ptr<float>()` (which
//      only throws for a non-float dtype), so a CPU tensor's pointer is handed to the GPU, a transposed
//      tensor is read in memory order (wrong values), and a bias shorter than a row is read past its end.
//      Here binding.cpp checks each one (check_inputs) and says what to do.
//   6. ReLU as `max(0.0f, tmp2)`: CUDA's max(float, float) is fmaxf, which returns the number when the other
//      operand is NaN, so a NaN comes out 0 where torch.relu keeps it. Here `z < 0 ? 0 : z` (see relu).
//   7. Launches on the default stream (`<<<numBlocks, threadsPerBlock>>>`), not torch's current stream: out
//      of order under `torch.cuda.stream(...)`, outside a CUDA-graph capture. Here the caller passes the
//      stream (the binding: torch's current one).
//   8. 32-bit indices: `const int xnumel` receives the int64 `numel`, and `int index = blockIdx.x *
//      blockDim.x + threadIdx.x;` overflows past 2^31 elements. Here int64_t wherever an index can grow.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "pointwise.h"

namespace fused_kernels {

constexpr int kThreads = 256;      // threads per block: 8 warps
constexpr int kBlocksPerSm = 8;    // 8 x 256 = 2048 threads, the most an H100 SM holds; __launch_bounds__ below
                                   // asks for it, which caps the kernels at 65536 / 2048 = 32 registers/thread

// ---- helpers: fp32 compute for every storage type, 16-byte packs ----------------------------------------

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

__device__ __forceinline__ float relu(float z) { return z < 0.0f ? 0.0f : z; }  // NaN stays NaN

// kVec elements loaded or stored by one instruction: with kVec * sizeof(T) == 16 this is one
// `ld.global.v4` / `st.global.v4` in the PTX; with kVec == 1 a plain scalar access.
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

template <typename T, int kVec>
__device__ __forceinline__ Pack<T, kVec> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, kVec>*>(p);
}

template <typename T, int kVec>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, kVec>& pack) {
  *reinterpret_cast<Pack<T, kVec>*>(p) = pack;
}

// ---- kernels -----------------------------------------------------------------------------------------------

// out = relu(x + bias). Precondition (the launcher guarantees it): cols % kVec == 0, and for kVec > 1 all
// pointers 16-byte aligned.
template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    bias_relu_kernel(const T* __restrict__ x, const T* __restrict__ bias, T* __restrict__ out, int64_t rows,
                     int64_t cols) {
  const int64_t n_items = rows * cols / kVec;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t col = (i * kVec) % cols;                // column of this thread's first element
  const int64_t col_step = (stride * kVec) % cols;  // how far the column moves per grid-stride step
  // `i < n_items` is both the bounds check and the grid-stride loop. No unrolling: the 64 warps of an SM
  // already keep 2048 x 16 bytes of loads in flight, and a 4x unroll pushed add_mul_relu past 32 registers
  // (spills, see `nvcc -Xptxas -v`).
#pragma unroll 1
  for (; i < n_items; i += stride) {
    const Pack<T, kVec> xv = load_pack<T, kVec>(x + i * kVec);
    const Pack<T, kVec> bv = load_pack<T, kVec>(bias + col);  // bias is tiny: served from L1/L2
    Pack<T, kVec> ov;
#pragma unroll
    for (int k = 0; k < kVec; ++k) ov.v[k] = from_float<T>(relu(to_float(xv.v[k]) + to_float(bv.v[k])));
    store_pack<T, kVec>(out + i * kVec, ov);
    col += col_step;  // == ((i + stride) * kVec) % cols, without a division
    if (col >= cols) col -= cols;
  }
}

// out = relu(x + bias + alpha * y). Same geometry and preconditions as bias_relu_kernel, plus y.
template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    add_mul_relu_kernel(const T* __restrict__ x, const T* __restrict__ bias, const T* __restrict__ y,
                        float alpha, T* __restrict__ out, int64_t rows, int64_t cols) {
  const int64_t n_items = rows * cols / kVec;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t col = (i * kVec) % cols;
  const int64_t col_step = (stride * kVec) % cols;
#pragma unroll 1
  for (; i < n_items; i += stride) {
    const Pack<T, kVec> xv = load_pack<T, kVec>(x + i * kVec);
    const Pack<T, kVec> yv = load_pack<T, kVec>(y + i * kVec);
    const Pack<T, kVec> bv = load_pack<T, kVec>(bias + col);
    Pack<T, kVec> ov;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float z = to_float(xv.v[k]) + to_float(bv.v[k]) + alpha * to_float(yv.v[k]);
      ov.v[k] = from_float<T>(relu(z));
    }
    store_pack<T, kVec>(out + i * kVec, ov);
    col += col_step;
    if (col >= cols) col -= cols;
  }
}

// ---- host side: pick the path and the grid, launch on the caller's stream ------------------------------

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for `n_items` work items: enough to cover them, at most one full wave of resident blocks on the
// current device (the grid-stride loop does the rest).
inline cudaError_t pointwise_blocks(int64_t n_items, unsigned int* blocks) {
  int device = 0, sms = 0, threads_per_sm = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device);
  if (err != cudaSuccess) return err;
  const int64_t one_wave = static_cast<int64_t>(sms) * (threads_per_sm / kThreads);
  const int64_t needed = ceil_div(n_items, kThreads);
  *blocks = static_cast<unsigned int>(needed < one_wave ? needed : one_wave);
  return cudaSuccess;
}

template <typename T>
cudaError_t launch_bias_relu(const T* x, const T* bias, T* out, int64_t rows, int64_t cols,
                             cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;  // nothing to do; a 0-block launch would be an error
  constexpr int kVec = 16 / sizeof(T);
  const bool vec = cols % kVec == 0 && aligned16(x) && aligned16(bias) && aligned16(out);
  unsigned int blocks = 0;
  const cudaError_t err = pointwise_blocks(vec ? rows * cols / kVec : rows * cols, &blocks);
  if (err != cudaSuccess) return err;
  if (vec) {
    bias_relu_kernel<T, kVec><<<blocks, kThreads, 0, stream>>>(x, bias, out, rows, cols);
  } else {
    bias_relu_kernel<T, 1><<<blocks, kThreads, 0, stream>>>(x, bias, out, rows, cols);
  }
  return cudaGetLastError();  // launch errors (bad config, no kernel image for this GPU); no sync
}

template <typename T>
cudaError_t launch_add_mul_relu(const T* x, const T* bias, const T* y, float alpha, T* out, int64_t rows,
                                int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  constexpr int kVec = 16 / sizeof(T);
  const bool vec = cols % kVec == 0 && aligned16(x) && aligned16(bias) && aligned16(y) && aligned16(out);
  unsigned int blocks = 0;
  const cudaError_t err = pointwise_blocks(vec ? rows * cols / kVec : rows * cols, &blocks);
  if (err != cudaSuccess) return err;
  if (vec) {
    add_mul_relu_kernel<T, kVec><<<blocks, kThreads, 0, stream>>>(x, bias, y, alpha, out, rows, cols);
  } else {
    add_mul_relu_kernel<T, 1><<<blocks, kThreads, 0, stream>>>(x, bias, y, alpha, out, rows, cols);
  }
  return cudaGetLastError();
}

}  // namespace fused_kernels
