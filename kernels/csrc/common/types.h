// Plain types shared by the torch-facing bindings (.cpp) and the kernels (.cu).
// Deliberately free of torch headers: the .cu files then compile with nvcc in seconds.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace bert_kernels {

// BERT-Large is the only model these kernels are built for (STYLE: build only what it needs).
constexpr int kHidden = 1024;

enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// Seed and offset of the Philox4x32-10 stream, in the form torch's CUDA generator hands out
// (at::PhiloxCudaState): plain values in eager mode, device pointers plus an intra-graph
// offset while a CUDA graph is being captured, so every replay draws a fresh mask.
struct PhiloxArgs {
  uint64_t seed = 0;
  uint64_t offset = 0;  // in 32-bit draws per subsequence, a multiple of 4
  const int64_t* seed_ptr = nullptr;
  const int64_t* offset_ptr = nullptr;
  uint32_t offset_intragraph = 0;
  bool captured = false;
};

}  // namespace bert_kernels
