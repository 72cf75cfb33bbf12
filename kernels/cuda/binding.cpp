// The thin torch binding: validate, allocate, pick the dtype, launch on torch's current stream, check.
// All kernel code lives in pointwise.cuh (no torch there); this file is ordinary C++ compiled by the host
// compiler, and sees the launchers only through pointwise.h.
//
// Registered with TORCH_LIBRARY (no pybind11, no Python headers): loading the shared library makes
// torch.ops.fused_kernels_cuda.bias_relu / add_mul_relu available, and the same file links into the
// standalone C++ tests. The ops are forward-only (no autograd formula registered).
#include "binding.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <string>

#include "pointwise.h"

namespace fused_kernels {
namespace {

// Error messages are built by hand into one std::string and passed to TORCH_CHECK_* as its only message
// argument, so c10::str returns that string as it is and nothing goes through its ostream. Streaming
// x.sizes() (an IntArrayRef) into TORCH_CHECK_VALUE killed the whole process (SIGSEGV) instead of raising,
// with torch 2.11+cu130 on an H100 and, in a ten-line op doing only that, on an H200; sizes, strides, devices
// and dtypes are therefore formatted here, as the Python checks in kernels/cuda/__init__.py format them (the
// same words: tests match either).

// "[4, 8]": a tensor's sizes (or strides), written digit by digit with std::to_string.
std::string dims_str(const at::Tensor& t, bool strides) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d > 0) {
      s += ", ";
    }
    s += std::to_string(strides ? t.stride(d) : t.size(d));
  }
  s += "]";
  return s;
}

// torch's Python name of a dtype ("torch.float32"), the name the Python checks print.
std::string dtype_str(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "torch.float32";
    case at::kHalf:
      return "torch.float16";
    case at::kBFloat16:
      return "torch.bfloat16";
    case at::kDouble:
      return "torch.float64";
    case at::kLong:
      return "torch.int64";
    case at::kInt:
      return "torch.int32";
    case at::kShort:
      return "torch.int16";
    case at::kChar:
      return "torch.int8";
    case at::kByte:
      return "torch.uint8";
    case at::kBool:
      return "torch.bool";
    default:
      return std::string("torch.") + c10::toString(dtype);
  }
}

// "cuda:0", "cpu", "meta": as Python's str(tensor.device).
std::string device_str(const at::Tensor& t) {
  const c10::Device device = t.device();
  std::string s;
  switch (device.type()) {
    case c10::DeviceType::CPU:
      s = "cpu";
      break;
    case c10::DeviceType::CUDA:
      s = "cuda";
      break;
    case c10::DeviceType::Meta:
      s = "meta";
      break;
    default:
      s = "device type " + std::to_string(static_cast<int>(device.type()));
  }
  if (device.has_index()) {
    s += ":" + std::to_string(static_cast<int>(device.index()));
  }
  return s;
}

// Checks shared by every op, in the order (and with the words) of kernels/cuda/__init__.py's _check.
// `need_cuda` is false for the Meta kernels (shape inference for torch.compile / fake tensors), which check
// everything but the device.
void check_inputs(const std::string& op, const at::Tensor& x, const at::Tensor& bias, const at::Tensor* y,
                  bool need_cuda) {
  if (need_cuda) {
    TORCH_CHECK_VALUE(x.is_cuda(), op + ": x must be a CUDA tensor, got one on " + device_str(x) +
                                       " (these are CUDA kernels; kernels.reference has the CPU definition)");
  }
  TORCH_CHECK_VALUE(bias.device() == x.device(),
                    op + ": bias is on " + device_str(bias) + " but x is on " + device_str(x));
  const auto dtype = x.scalar_type();
  TORCH_CHECK_TYPE(dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16,
                   op + ": dtype " + dtype_str(dtype) +
                       " is not supported (use float32, float16 or bfloat16)");
  TORCH_CHECK_TYPE(bias.scalar_type() == dtype, op + ": bias has dtype " + dtype_str(bias.scalar_type()) +
                                                    " but x has " + dtype_str(dtype));
  TORCH_CHECK_VALUE(x.dim() >= 1, op + ": x must have at least 1 dimension, got a 0-d tensor");
  TORCH_CHECK_VALUE(bias.dim() == 1 && bias.size(0) == x.size(-1),
                    op + ": bias must have shape [" + std::to_string(x.size(-1)) +
                        "] (the last dim of x, whose shape is " + dims_str(x, false) + "), got " +
                        dims_str(bias, false));
  TORCH_CHECK_VALUE(x.is_contiguous(), op + ": x must be contiguous, got shape " + dims_str(x, false) +
                                           " with strides " + dims_str(x, true) +
                                           "; call .contiguous() first");
  TORCH_CHECK_VALUE(bias.is_contiguous(),
                    op + ": bias must be contiguous, got strides " + dims_str(bias, true));
  if (y != nullptr) {
    TORCH_CHECK_VALUE(y->device() == x.device(),
                      op + ": y is on " + device_str(*y) + " but x is on " + device_str(x));
    TORCH_CHECK_TYPE(y->scalar_type() == dtype,
                     op + ": y has dtype " + dtype_str(y->scalar_type()) + " but x has " + dtype_str(dtype));
    TORCH_CHECK_VALUE(y->sizes() == x.sizes(), op + ": y must have x's shape " + dims_str(x, false) +
                                                   ", got " + dims_str(*y, false));
    TORCH_CHECK_VALUE(y->is_contiguous(), op + ": y must be contiguous, got strides " + dims_str(*y, true) +
                                              "; call .contiguous() first");
  }
}

// Maps torch's dtype to the CUDA storage type the kernels are instantiated for (at::Half and __half,
// at::BFloat16 and __nv_bfloat16 have the same 2-byte layout) and calls fn(Type<T>{}).
template <typename T>
struct Type {
  using type = T;
};

template <typename Fn>
cudaError_t dispatch_dtype(at::ScalarType dtype, Fn&& fn) {
  switch (dtype) {
    case at::kFloat:
      return fn(Type<float>{});
    case at::kHalf:
      return fn(Type<__half>{});
    case at::kBFloat16:
      return fn(Type<__nv_bfloat16>{});
    default:
      TORCH_CHECK_TYPE(false, "unsupported dtype " + dtype_str(dtype));  // unreachable after check_inputs
  }
}

template <typename T>
const T* ptr(const at::Tensor& t) {
  return static_cast<const T*>(t.const_data_ptr());
}

template <typename T>
T* mutable_ptr(at::Tensor& t) {
  return static_cast<T*>(t.mutable_data_ptr());
}

// [..., N] -> (rows, cols) of the row-major 2-D view the kernels see.
std::pair<int64_t, int64_t> rows_cols(const at::Tensor& x) {
  const int64_t cols = x.size(-1);
  return {cols == 0 ? 0 : x.numel() / cols, cols};
}

at::Tensor bias_relu_meta(const at::Tensor& x, const at::Tensor& bias) {
  check_inputs("bias_relu", x, bias, nullptr, /*need_cuda=*/false);
  return at::empty_like(x, at::MemoryFormat::Contiguous);
}

at::Tensor add_mul_relu_meta(const at::Tensor& x, const at::Tensor& bias, const at::Tensor& y, double) {
  check_inputs("add_mul_relu", x, bias, &y, /*need_cuda=*/false);
  return at::empty_like(x, at::MemoryFormat::Contiguous);
}

}  // namespace

at::Tensor bias_relu(const at::Tensor& x, const at::Tensor& bias) {
  check_inputs("bias_relu", x, bias, nullptr, /*need_cuda=*/true);
  const c10::cuda::CUDAGuard guard(x.device());  // x's GPU is the current device while we launch
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
  const auto [rows, cols] = rows_cols(x);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();  // torch's current stream
  const cudaError_t err = dispatch_dtype(x.scalar_type(), [&](auto type) {
    using T = typename decltype(type)::type;
    return launch_bias_relu<T>(ptr<T>(x), ptr<T>(bias), mutable_ptr<T>(out), rows, cols, stream);
  });
  C10_CUDA_CHECK(err);  // the launcher returned cudaGetLastError() after the launch; no synchronize
  return out;
}

at::Tensor add_mul_relu(const at::Tensor& x, const at::Tensor& bias, const at::Tensor& y, double alpha) {
  check_inputs("add_mul_relu", x, bias, &y, /*need_cuda=*/true);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
  const auto [rows, cols] = rows_cols(x);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const cudaError_t err = dispatch_dtype(x.scalar_type(), [&](auto type) {
    using T = typename decltype(type)::type;
    return launch_add_mul_relu<T>(ptr<T>(x), ptr<T>(bias), ptr<T>(y), static_cast<float>(alpha),
                                  mutable_ptr<T>(out), rows, cols, stream);
  });
  C10_CUDA_CHECK(err);
  return out;
}

}  // namespace fused_kernels

TORCH_LIBRARY(fused_kernels_cuda, m) {
  m.def("bias_relu(Tensor x, Tensor bias) -> Tensor");
  m.def("add_mul_relu(Tensor x, Tensor bias, Tensor y, float alpha) -> Tensor");
}

// CompositeExplicitAutograd: one kernel for every backend, so a CPU tensor reaches check_inputs and gets
// its clear error instead of the dispatcher's "could not run ... with arguments from the CPU backend".
TORCH_LIBRARY_IMPL(fused_kernels_cuda, CompositeExplicitAutograd, m) {
  m.impl("bias_relu", &fused_kernels::bias_relu);
  m.impl("add_mul_relu", &fused_kernels::add_mul_relu);
}

TORCH_LIBRARY_IMPL(fused_kernels_cuda, Meta, m) {
  m.impl("bias_relu", &fused_kernels::bias_relu_meta);
  m.impl("add_mul_relu", &fused_kernels::add_mul_relu_meta);
}
