// Thin torch binding of softmax_cross_entropy (bert_kernels_cuda::softmax_cross_entropy).
#include <tuple>

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../common/torch_utils.h"
#include "softmax_cross_entropy.h"

namespace bert_kernels {
namespace {

// logits: [rows, cols] fp16/bf16, cols % 8 == 0; labels: [rows] int64.
// Returns (losses [rows] fp32, grad [rows, cols] logits dtype, or [0, cols] if !need_grad).
std::tuple<at::Tensor, at::Tensor> softmax_cross_entropy_cuda(const at::Tensor& logits,
                                                              const at::Tensor& labels,
                                                              int64_t vocab_size,
                                                              int64_t ignore_index,
                                                              bool need_grad) {
  TORCH_CHECK(logits.dim() == 2, "logits must be [rows, padded_vocab], got ", logits.sizes());
  check_half_or_bf16(logits, "logits");
  check_cuda(logits, "logits", logits);
  check_aligned(logits, "logits");
  const int64_t rows = logits.size(0), cols = logits.size(1);
  TORCH_CHECK(cols % 8 == 0, "logits' last dimension (the padded vocabulary) must be a multiple "
              "of 8, got ", cols);
  TORCH_CHECK(vocab_size > 0 && vocab_size <= cols, "vocab_size must be in [1, ", cols, "], got ",
              vocab_size);
  check_cuda(labels, "labels", logits);
  check_shape(labels, "labels", {rows});
  check_dtype(labels, "labels", at::kLong);
  TORCH_CHECK(rows < (int64_t{1} << 31), "too many rows: ", rows);

  const c10::cuda::CUDAGuard guard(logits.device());
  auto losses = at::empty({rows}, logits.options().dtype(at::kFloat));
  auto grad = at::empty({need_grad ? rows : 0, cols}, logits.options());
  SoftmaxCrossEntropyArgs a;
  a.logits = logits.data_ptr();
  a.labels = labels.data_ptr<int64_t>();
  a.losses = losses.data_ptr<float>();
  a.grad = need_grad ? grad.data_ptr() : nullptr;
  a.rows = rows;
  a.cols = cols;
  a.vocab = vocab_size;
  a.ignore_index = ignore_index;
  a.dtype = to_dtype(logits.scalar_type(), "logits");
  check_launch(softmax_cross_entropy(a, current_stream()), "softmax_cross_entropy");
  return {losses, grad};
}

// grad: [rows, cols] fp16/bf16 (the forward's second output); grad_loss: [rows] fp32.
at::Tensor softmax_cross_entropy_backward_cuda(const at::Tensor& grad, const at::Tensor& grad_loss) {
  TORCH_CHECK(grad.dim() == 2 && grad.size(1) % 8 == 0, "grad must be [rows, cols] with cols a "
              "multiple of 8, got ", grad.sizes());
  check_half_or_bf16(grad, "grad");
  check_cuda(grad, "grad", grad);
  check_aligned(grad, "grad");
  check_cuda(grad_loss, "grad_loss", grad);
  check_shape(grad_loss, "grad_loss", {grad.size(0)});
  check_dtype(grad_loss, "grad_loss", at::kFloat);

  const c10::cuda::CUDAGuard guard(grad.device());
  auto out = at::empty_like(grad);
  SoftmaxCrossEntropyBackwardArgs a;
  a.grad = grad.data_ptr();
  a.grad_loss = grad_loss.data_ptr<float>();
  a.out = out.data_ptr();
  a.rows = grad.size(0);
  a.cols = grad.size(1);
  a.max_blocks = 32 * sm_count();
  a.dtype = to_dtype(grad.scalar_type(), "grad");
  check_launch(softmax_cross_entropy_backward(a, current_stream()), "softmax_cross_entropy_backward");
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(bert_kernels_cuda, m) {
  m.def("softmax_cross_entropy(Tensor logits, Tensor labels, int vocab_size, int ignore_index, "
        "bool need_grad) -> (Tensor, Tensor)");
  m.def("softmax_cross_entropy_backward(Tensor grad, Tensor grad_loss) -> Tensor");
}

TORCH_LIBRARY_IMPL(bert_kernels_cuda, CUDA, m) {
  m.impl("softmax_cross_entropy", &softmax_cross_entropy_cuda);
  m.impl("softmax_cross_entropy_backward", &softmax_cross_entropy_backward_cuda);
}

}  // namespace bert_kernels
