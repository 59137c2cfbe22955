// Thin torch binding of embedding_backward (registered as bert_kernels_cuda::embedding_backward).
#include <ATen/Context.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../common/torch_utils.h"
#include "embedding_backward.h"

namespace bert_kernels {
namespace {

// grad: [tokens, 1024] fp16/bf16/fp32; indices: [tokens] int32/int64 in [0, num_weights);
// returns grad_weight [num_weights, 1024] in out_dtype (grad's dtype or float32).
at::Tensor embedding_backward_cuda(const at::Tensor& grad, const at::Tensor& indices,
                                   int64_t num_weights, at::ScalarType out_dtype) {
  TORCH_CHECK(grad.dim() == 2 && grad.size(1) == kHidden, "embedding_backward is built for "
              "hidden size ", kHidden, " only: grad must be [tokens, ", kHidden, "], got ",
              grad.sizes());
  check_cuda(grad, "grad", grad);
  check_aligned(grad, "grad");
  check_cuda(indices, "indices", grad);
  check_shape(indices, "indices", {grad.size(0)});
  TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
              "indices must be int64 or int32, got ", dtype_name(indices.scalar_type()));
  TORCH_CHECK(num_weights > 0, "num_weights must be positive, got ", num_weights);
  const auto g = grad.scalar_type();
  TORCH_CHECK(g == at::kHalf || g == at::kBFloat16 || g == at::kFloat,
              "grad must be float16, bfloat16 or float32, got ", dtype_name(g));
  TORCH_CHECK(out_dtype == g || out_dtype == at::kFloat, "grad_weight dtype must be ",
              dtype_name(g), " (packed atomics) or float32, got ", dtype_name(out_dtype));
  at::globalContext().alertNotDeterministic("bert_kernels::embedding_backward (atomic adds)");

  const c10::cuda::CUDAGuard guard(grad.device());
  auto grad_weight = at::zeros({num_weights, kHidden}, grad.options().dtype(out_dtype));
  EmbeddingBackwardArgs a;
  a.grad = grad.data_ptr();
  a.indices = indices.data_ptr();
  a.grad_weight = grad_weight.data_ptr();
  a.rows = grad.size(0);
  a.num_weights = num_weights;
  a.max_blocks = 64 * sm_count();
  a.indices_int64 = indices.scalar_type() == at::kLong;
  a.grad_dtype = to_dtype(g, "grad");
  a.out_dtype = to_dtype(out_dtype, "out_dtype");
  check_launch(embedding_backward(a, current_stream()), "embedding_backward");
  return grad_weight;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(bert_kernels_cuda, m) {
  m.def("embedding_backward(Tensor grad, Tensor indices, int num_weights, ScalarType out_dtype)"
        " -> Tensor");
}

TORCH_LIBRARY_IMPL(bert_kernels_cuda, CUDA, m) {
  m.impl("embedding_backward", &embedding_backward_cuda);
}

}  // namespace bert_kernels
