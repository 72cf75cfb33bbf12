// Times the CUDA kernels against eager libtorch and a plain copy (the ceiling) with CUDA events on
// torch's current stream: events measure the GPU's time between two points of the stream, where host
// clocks around an asynchronous launch would measure only the launch (or, with a synchronize after each
// launch, the launch + sync overhead). Not a test: CTest does not run it, nothing is asserted.
//
//   ./bench_pointwise [rows cols]     default 65536 4096, fp32
#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <functional>

#include "binding.h"

namespace {

// Mean over `iters` back-to-back runs after `warmup` runs, in milliseconds.
double time_ms(const std::function<void()>& fn, int warmup = 5, int iters = 50) {
  for (int i = 0; i < warmup; ++i) fn();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, stream);
  for (int i = 0; i < iters; ++i) fn();
  cudaEventRecord(stop, stream);
  cudaEventSynchronize(stop);  // one sync, after all the timed work
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / iters;
}

void report(const char* name, double bytes, double ms) {
  std::printf("%-28s %9.1f us %8.0f GB/s\n", name, ms * 1e3, bytes / (ms * 1e-3) / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 2 ? std::atoll(argv[1]) : 65536;
  const int64_t cols = argc > 2 ? std::atoll(argv[2]) : 4096;
  const auto opts = at::device(at::kCUDA).dtype(at::kFloat);
  const at::Tensor x = at::randn({rows, cols}, opts), y = at::randn({rows, cols}, opts);
  const at::Tensor bias = at::randn({cols}, opts);
  at::Tensor out = at::empty_like(x);
  const double n = static_cast<double>(rows) * cols, s = sizeof(float);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, c10::cuda::current_device());
  std::printf("%s, fp32 %lld x %lld; GB/s counts the bytes the fused kernel must move\n", prop.name,
              static_cast<long long>(rows), static_cast<long long>(cols));
  report("copy (ceiling)", 2 * n * s, time_ms([&] { out.copy_(x); }));
  report("bias_relu CUDA", (2 * n + cols) * s, time_ms([&] { fused_kernels::bias_relu(x, bias); }));
  report("bias_relu eager", (2 * n + cols) * s, time_ms([&] { at::relu(x + bias); }));
  report("add_mul_relu CUDA", (3 * n + cols) * s,
         time_ms([&] { fused_kernels::add_mul_relu(x, bias, y, 0.5); }));
  report("add_mul_relu eager", (3 * n + cols) * s, time_ms([&] { at::relu(x + bias + 0.5 * y); }));
  return 0;
}
