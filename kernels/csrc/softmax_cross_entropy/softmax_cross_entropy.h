// MLM-head softmax cross-entropy with the logits gradient written in the same kernel ([LightSeq2]'s
// criterion): loss[m] = logsumexp(logits[m, :vocab]) - logits[m, label[m]],
// grad[m, c] = softmax(logits[m, :vocab])[c] - (c == label[m]), zero for c >= vocab.
#pragma once

#include "../common/types.h"

namespace bert_kernels {

struct SoftmaxCrossEntropyArgs {
  const void* logits;    // [rows, cols], cols % 8 == 0 (the padded vocabulary)
  const int64_t* labels;  // [rows]
  float* losses;         // [rows] fp32; 0 where label == ignore_index, NaN for a bad label
  void* grad;            // [rows, cols] logits dtype, or nullptr when no gradient is needed
  int64_t rows;
  int64_t cols;
  int64_t vocab;         // columns >= vocab are padding: outside the softmax, zero gradient
  int64_t ignore_index;
  DType dtype;
};

cudaError_t softmax_cross_entropy(const SoftmaxCrossEntropyArgs& args, cudaStream_t stream);

// Backward: out[m, :] = grad[m, :] * grad_loss[m], computed in fp32, stored in grad's dtype.
struct SoftmaxCrossEntropyBackwardArgs {
  const void* grad;        // [rows, cols] saved by the forward
  const float* grad_loss;  // [rows]
  void* out;               // [rows, cols]
  int64_t rows;
  int64_t cols;            // multiple of 8
  int max_blocks;
  DType dtype;
};

cudaError_t softmax_cross_entropy_backward(const SoftmaxCrossEntropyBackwardArgs& args,
                                           cudaStream_t stream);

}  // namespace bert_kernels
