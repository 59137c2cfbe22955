// grad_weight[indices[t], :] += grad[t, :] for a 1024-wide embedding.
//
// One thread per 8 columns of one token (128 threads per token, many light blocks, as [Zeng]
// recommends), each issuing packed atomics: four half2 / bfloat162 atomicAdds for 16-bit
// outputs, two float4 atomicAdds on sm_90 (eight float atomicAdds before) for fp32 outputs.
// bfloat162 atomics are native from sm_90 on; sm_80 emulates them with a compare-and-swap loop.
// Scalar fp16 atomics are slow; packed ones are not. The summation order is not fixed, so the
// result is not bitwise deterministic (the binding raises under torch's deterministic mode).
#include <cassert>

#include "embedding_backward.h"
#include "../common/device.cuh"

namespace bert_kernels {
namespace {

constexpr int kVec = 8;
constexpr int kVecsPerRow = kHidden / kVec;
constexpr int kThreads = 256;

template <typename O>
__device__ __forceinline__ void atomic_add8(O* dst, const float (&v)[kVec]);

template <>
__device__ __forceinline__ void atomic_add8<__half>(__half* dst, const float (&v)[kVec]) {
  __half2* d = reinterpret_cast<__half2*>(dst);
#pragma unroll
  for (int k = 0; k < kVec / 2; ++k) atomicAdd(d + k, __floats2half2_rn(v[2 * k], v[2 * k + 1]));
}

template <>
__device__ __forceinline__ void atomic_add8<__nv_bfloat16>(__nv_bfloat16* dst,
                                                           const float (&v)[kVec]) {
  __nv_bfloat162* d = reinterpret_cast<__nv_bfloat162*>(dst);
#pragma unroll
  for (int k = 0; k < kVec / 2; ++k) atomicAdd(d + k, __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]));
}

template <>
__device__ __forceinline__ void atomic_add8<float>(float* dst, const float (&v)[kVec]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  float4* d = reinterpret_cast<float4*>(dst);
  atomicAdd(d, make_float4(v[0], v[1], v[2], v[3]));
  atomicAdd(d + 1, make_float4(v[4], v[5], v[6], v[7]));
#else
#pragma unroll
  for (int j = 0; j < kVec; ++j) atomicAdd(dst + j, v[j]);
#endif
}

template <typename G, typename O, typename I>
__global__ void __launch_bounds__(kThreads) embedding_backward_kernel(EmbeddingBackwardArgs a) {
  const G* grad = static_cast<const G*>(a.grad);
  const I* indices = static_cast<const I*>(a.indices);
  O* out = static_cast<O*>(a.grad_weight);
  const int64_t total = a.rows * kVecsPerRow;
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; n < total;
       n += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = n / kVecsPerRow;
    const int col = static_cast<int>(n % kVecsPerRow) * kVec;
    const int64_t w = static_cast<int64_t>(indices[row]);
    if (w < 0 || w >= a.num_weights) {
      assert(false && "embedding_backward: index out of range");
      continue;
    }
    float v[kVec];
    load8(grad + row * kHidden + col, v);
    atomic_add8(out + w * kHidden + col, v);
  }
}

template <typename G, typename O>
cudaError_t launch(const EmbeddingBackwardArgs& a, cudaStream_t stream) {
  const int64_t needed = (a.rows * kVecsPerRow + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(needed < a.max_blocks ? needed : a.max_blocks);
  if (a.indices_int64) {
    embedding_backward_kernel<G, O, int64_t><<<blocks, kThreads, 0, stream>>>(a);
  } else {
    embedding_backward_kernel<G, O, int32_t><<<blocks, kThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t embedding_backward(const EmbeddingBackwardArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  using D = DType;
  if (a.grad_dtype == D::kFloat16 && a.out_dtype == D::kFloat16) return launch<__half, __half>(a, stream);
  if (a.grad_dtype == D::kFloat16 && a.out_dtype == D::kFloat32) return launch<__half, float>(a, stream);
  if (a.grad_dtype == D::kBFloat16 && a.out_dtype == D::kBFloat16)
    return launch<__nv_bfloat16, __nv_bfloat16>(a, stream);
  if (a.grad_dtype == D::kBFloat16 && a.out_dtype == D::kFloat32)
    return launch<__nv_bfloat16, float>(a, stream);
  if (a.grad_dtype == D::kFloat32 && a.out_dtype == D::kFloat32) return launch<float, float>(a, stream);
  return cudaErrorInvalidValue;
}

}  // namespace bert_kernels
