// Instantiates the pointwise launchers of pointwise.cuh (and with them the kernels, both the 16-byte-pack
// and the scalar path) for fp32, fp16 and bf16. No torch headers: `nvcc -ptx -arch=sm_90 pointwise.cu`
// works on any machine with nvcc, GPU or not, and shows the generated PTX.
#include "pointwise.cuh"

namespace fused_kernels {

template cudaError_t launch_bias_relu<float>(const float*, const float*, float*, int64_t, int64_t, cudaStream_t);
template cudaError_t launch_bias_relu<__half>(const __half*, const __half*, __half*, int64_t, int64_t,
                                              cudaStream_t);
template cudaError_t launch_bias_relu<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*,
                                                     int64_t, int64_t, cudaStream_t);

template cudaError_t launch_add_mul_relu<float>(const float*, const float*, const float*, float, float*, int64_t,
                                                int64_t, cudaStream_t);
template cudaError_t launch_add_mul_relu<__half>(const __half*, const __half*, const __half*, float, __half*,
                                                 int64_t, int64_t, cudaStream_t);
template cudaError_t launch_add_mul_relu<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*,
                                                        const __nv_bfloat16*, float, __nv_bfloat16*, int64_t,
                                                        int64_t, cudaStream_t);

}  // namespace fused_kernels
