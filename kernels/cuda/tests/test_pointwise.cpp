// Standalone C++ test of the CUDA pointwise kernels against libtorch ops, built by ../CMakeLists.txt and
// run by CTest. Exit status: 0 all passed, 1 a mismatch or a missing error, 77 no CUDA device (CTest
// reports the test as skipped).
//
// Every case: fresh random inputs, the output block poisoned with NaN first (see poison_allocator), the
// result compared with the same math written with libtorch ops. Shapes include 1x1, odd sizes, rows that
// are no multiple of anything, more elements than one grid covers (the grid-stride loop), and inputs
// offset by one element so the 16-byte path cannot be taken.
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "binding.h"

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// A contiguous tensor of `shape` whose data starts `offset` elements into its allocation: offset 1 breaks
// the 16-byte alignment and forces the scalar path.
at::Tensor randn_at(std::vector<int64_t> shape, at::ScalarType dtype, int64_t offset) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return at::randn({n + offset}, at::device(at::kCUDA).dtype(dtype)).narrow(0, offset, n).view(shape);
}

// Frees a NaN-filled block of `like`'s size into torch's caching allocator, which usually hands it to the
// op's output next: any element the kernel forgets to write stays NaN and fails the comparison.
void poison_allocator(const at::Tensor& like) {
  at::full(like.sizes(), NAN, like.options());
}

// (atol, rtol) per dtype for add_mul_relu, against the fp32 math rounded once. bias_relu is exact: one
// fp32 add and one rounding, the same arithmetic as libtorch's add.
std::pair<double, double> tolerance(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return {1e-5, 1e-5};  // fma(alpha, y, x + b) vs separately rounded mul and add
    case at::kHalf:
      return {1e-3, 2e-3};  // 1 ulp (2^-10 relative) where the fp32 results straddle a rounding boundary
    default:
      return {1e-2, 1.6e-2};  // bf16: 1 ulp is 2^-8 relative
  }
}

std::string describe(const char* op, at::ScalarType dtype, int64_t rows, int64_t cols, int64_t offset) {
  return std::string(op) + " " + c10::toString(dtype) + " " + std::to_string(rows) + "x" +
         std::to_string(cols) + (offset ? " (misaligned)" : "");
}

bool close(const at::Tensor& got, const at::Tensor& want, double atol, double rtol) {
  return got.sizes() == want.sizes() && got.scalar_type() == want.scalar_type() &&
         at::allclose(got.to(at::kFloat), want.to(at::kFloat), rtol, atol);  // NaN (unwritten) fails
}

void check_values(at::ScalarType dtype, int64_t rows, int64_t cols, int64_t offset) {
  const at::Tensor x = randn_at({rows, cols}, dtype, offset);
  const at::Tensor bias = randn_at({cols}, dtype, offset);
  const at::Tensor y = randn_at({rows, cols}, dtype, offset);
  const double alpha = 0.7;

  poison_allocator(x);
  const at::Tensor out1 = fused_kernels::bias_relu(x, bias);
  expect(close(out1, at::relu(x + bias), 0.0, 0.0), describe("bias_relu", dtype, rows, cols, offset));

  poison_allocator(x);
  const at::Tensor out2 = fused_kernels::add_mul_relu(x, bias, y, alpha);
  const at::Tensor want2 = at::relu(x.to(at::kFloat) + bias.to(at::kFloat) + alpha * y.to(at::kFloat));
  const auto [atol, rtol] = tolerance(dtype);
  expect(close(out2, want2.to(dtype), atol, rtol), describe("add_mul_relu", dtype, rows, cols, offset));
}

void expect_error(const std::string& what, const std::string& needle, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    expect(msg.find(needle) != std::string::npos, what + " -> " + msg.substr(0, msg.find('\n')));
    return;
  }
  expect(false, what + " raised nothing");
}

void check_errors() {
  const auto cuda = at::device(at::kCUDA).dtype(at::kFloat);
  const at::Tensor x = at::randn({4, 8}, cuda), bias = at::randn({8}, cuda);
  expect_error("CPU tensors", "must be a CUDA tensor",
               [&] { fused_kernels::bias_relu(x.cpu(), bias.cpu()); });
  expect_error("bias on another device", "bias is on", [&] { fused_kernels::bias_relu(x, bias.cpu()); });
  expect_error("float64", "not supported",
               [&] { fused_kernels::bias_relu(x.to(at::kDouble), bias.to(at::kDouble)); });
  expect_error("bias dtype differs", "bias has dtype",
               [&] { fused_kernels::bias_relu(x, bias.to(at::kHalf)); });
  expect_error("bias length", "bias must have shape [8]",
               [&] { fused_kernels::bias_relu(x, at::randn({7}, cuda)); });
  expect_error("non-contiguous x", "must be contiguous",
               [&] { fused_kernels::bias_relu(at::randn({8, 4}, cuda).t(), bias); });
  expect_error("y shape", "y must have x's shape",
               [&] { fused_kernels::add_mul_relu(x, bias, at::randn({4, 9}, cuda), 1.0); });
}

}  // namespace

int main() {
  if (!at::hasCUDA()) {
    std::printf("SKIP: no CUDA device (or libtorch without CUDA)\n");
    return 77;
  }
  at::manual_seed(20261122);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1}, {3, 5}, {1000, 4097}, {65, 1024}, {4097, 8}, {8192, 4096}, {0, 16}};
  for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    for (const auto& [rows, cols] : shapes) {
      for (int64_t offset : {0, 1}) check_values(dtype, rows, cols, offset);
    }
  }
  check_errors();
  std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
