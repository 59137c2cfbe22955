// Helpers for the thin torch-facing bindings: argument checks that name the tensor, the mapping
// to the kernels' plain types, the current stream and the generator's Philox state.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include "types.h"

namespace bert_kernels {

// torch's Python names ("float16", "int64"), which is what users of the ops see.
inline const char* dtype_name(at::ScalarType s) {
  switch (s) {
    case at::kFloat: return "float32";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kDouble: return "float64";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kBool: return "bool";
    default: return c10::toString(s);
  }
}

inline void check_cuda(const at::Tensor& t, const char* name, const at::Tensor& ref) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor, got device ", t.device());
  TORCH_CHECK(t.device() == ref.device(), name, " is on ", t.device(), " but the other inputs are on ",
              ref.device());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous (got strides ", t.strides(), ")");
}

inline void check_shape(const at::Tensor& t, const char* name, at::IntArrayRef expected) {
  TORCH_CHECK(t.sizes() == expected, name, " must have shape ", expected, ", got ", t.sizes());
}

inline void check_dtype(const at::Tensor& t, const char* name, at::ScalarType expected) {
  TORCH_CHECK(t.scalar_type() == expected, name, " must be ", dtype_name(expected), ", got ",
              dtype_name(t.scalar_type()));
}

// Vector loads need 16-byte aligned rows; views with a storage offset may break that.
inline void check_aligned(const at::Tensor& t, const char* name) {
  TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 || t.numel() == 0, name,
              " must be 16-byte aligned (is it a view with a storage offset?)");
}

inline DType to_dtype(at::ScalarType s, const char* name) {
  switch (s) {
    case at::kFloat: return DType::kFloat32;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    default: TORCH_CHECK(false, name, ": unsupported dtype ", dtype_name(s));
  }
  return DType::kFloat32;
}

inline void check_half_or_bf16(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16, name,
              " must be float16 or bfloat16, got ", dtype_name(t.scalar_type()));
}

inline cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

inline void check_launch(cudaError_t err, const char* op) {
  TORCH_CHECK(err == cudaSuccess, op, ": kernel launch failed: ", cudaGetErrorString(err));
}

// Number of SMs of the current device, read once per device (a host query, no sync).
inline int sm_count() {
  static int cached[64] = {0};
  const int dev = c10::cuda::current_device();
  TORCH_CHECK(dev >= 0 && dev < 64, "device index ", dev, " out of range");
  if (cached[dev] == 0) {
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&cached[dev], cudaDevAttrMultiProcessorCount, dev));
  }
  return cached[dev];
}

// Philox (seed, offset) for one launch. seed >= 0: use the caller's (seed, offset) as given
// (tests and reproductions). seed < 0: reserve `increment` draws per subsequence from torch's
// default CUDA generator, exactly as torch's own dropout does; graph-capture safe, no sync.
inline PhiloxArgs philox_args(int64_t seed, int64_t offset, uint64_t increment) {
  PhiloxArgs a;
  if (seed >= 0) {
    TORCH_CHECK(offset >= 0 && offset % 4 == 0, "philox offset must be a non-negative multiple "
                "of 4, got ", offset);
    a.seed = static_cast<uint64_t>(seed);
    a.offset = static_cast<uint64_t>(offset);
    return a;
  }
  auto gen = at::get_generator_or_default<at::CUDAGeneratorImpl>(
      std::nullopt, at::cuda::detail::getDefaultCUDAGenerator());
  at::PhiloxCudaState state;
  {
    std::lock_guard<std::mutex> lock(gen->mutex_);
    state = gen->philox_cuda_state(increment);
  }
  a.captured = state.captured_;
  if (state.captured_) {
    a.seed_ptr = state.seed_.ptr;
    a.offset_ptr = state.offset_.ptr;
    a.offset_intragraph = state.offset_intragraph_;
  } else {
    a.seed = state.seed_.val;
    a.offset = state.offset_.val;
  }
  return a;
}

}  // namespace bert_kernels
