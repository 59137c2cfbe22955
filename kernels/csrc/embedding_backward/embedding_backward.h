// Word-embedding weight gradient by vectorized atomics ([Zeng], IV-C-3), hidden 1024.
#pragma once

#include "../common/types.h"

namespace bert_kernels {

struct EmbeddingBackwardArgs {
  const void* grad;     // [rows, 1024] grad dtype
  const void* indices;  // [rows] int32 or int64
  void* grad_weight;    // [num_weights, 1024] out dtype, zero-filled by the caller
  int64_t rows;
  int64_t num_weights;
  int max_blocks;       // grid cap (grid-stride beyond it)
  bool indices_int64;
  DType grad_dtype, out_dtype;
};

cudaError_t embedding_backward(const EmbeddingBackwardArgs& args, cudaStream_t stream);

}  // namespace bert_kernels
