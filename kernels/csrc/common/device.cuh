// Device helpers shared by the kernels: 16-byte vector I/O with fp32 math, warp reductions and the
// generator-state unpacking for Philox (philox.h).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "philox.h"
#include "types.h"

namespace bert_kernels {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Eight consecutive elements <-> eight floats. The pointer must be 16-byte aligned for 16-bit
// types and 32-byte aligned for float (the bindings check the base pointers; offsets are
// multiples of 8 elements).
template <typename T>
__device__ __forceinline__ void load8(const T* ptr, float (&out)[8]) {
  static_assert(sizeof(T) == 2, "16-bit types only");
  const uint4 raw = *reinterpret_cast<const uint4*>(ptr);
  const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int j = 0; j < 8; ++j) out[j] = to_float(v[j]);
}
template <>
__device__ __forceinline__ void load8<float>(const float* ptr, float (&out)[8]) {
  const float4 a = reinterpret_cast<const float4*>(ptr)[0];
  const float4 b = reinterpret_cast<const float4*>(ptr)[1];
  out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
  out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
}

template <typename T>
__device__ __forceinline__ void store8(T* ptr, const float (&in)[8]) {
  static_assert(sizeof(T) == 2, "16-bit types only");
  uint4 raw;
  T* v = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = from_float<T>(in[j]);
  *reinterpret_cast<uint4*>(ptr) = raw;
}
template <>
__device__ __forceinline__ void store8<float>(float* ptr, const float (&in)[8]) {
  reinterpret_cast<float4*>(ptr)[0] = make_float4(in[0], in[1], in[2], in[3]);
  reinterpret_cast<float4*>(ptr)[1] = make_float4(in[4], in[5], in[6], in[7]);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// Resolves the generator state: values in eager mode, device memory under graph capture.
__device__ __forceinline__ void unpack_philox(const PhiloxArgs& a, uint64_t& seed,
                                              uint64_t& offset) {
  if (a.captured) {
    seed = static_cast<uint64_t>(*a.seed_ptr);
    offset = static_cast<uint64_t>(*a.offset_ptr) + a.offset_intragraph;
  } else {
    seed = a.seed;
    offset = a.offset;
  }
}

}  // namespace bert_kernels
