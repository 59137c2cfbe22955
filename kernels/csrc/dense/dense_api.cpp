// Thin torch binding of the cuBLASLt dense layers: check every tensor, allocate outputs on the
// current stream's device, run one GEMM with torch's cuBLASLt handle and workspace. Registered
// as bert_kernels_cuda::dense_{forward,dgrad,wgrad}; autograd, fake shapes and the public
// functions live in kernels/dense.py.
#include <optional>
#include <tuple>

#include <ATen/cuda/CUDAContextLight.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../common/torch_utils.h"
#include "dense.h"

namespace bert_kernels {
namespace {

// cuBLASLt needs the GeLU aux leading dimension to be a multiple of 8; with 16-byte aligned
// base pointers that also makes every row 16-byte aligned, which its fast kernels want.
constexpr int64_t kFeatureMultiple = 8;

void check_features(int64_t n, const char* what) {
  TORCH_CHECK(n > 0 && n % kFeatureMultiple == 0, what, " must be a positive multiple of ",
              kFeatureMultiple, " for cuBLASLt, got ", n);
}

// Every tensor: CUDA, on ref's device, contiguous, ref's dtype, the expected shape, aligned.
void check_tensor(const at::Tensor& t, const char* name, const at::Tensor& ref,
                  at::IntArrayRef shape) {
  check_cuda(t, name, ref);
  check_dtype(t, name, ref.scalar_type());
  check_shape(t, name, shape);
  check_aligned(t, name);
}

// The 2-D activation that fixes dtype and device for the call: [tokens, features].
void check_lead(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() == 2, name, " must be 2-D [tokens, features], got ", t.sizes());
  check_half_or_bf16(t, name);
  check_cuda(t, name, t);
  check_aligned(t, name);
  check_features(t.size(1), name);
}

DenseContext context() {
  DenseContext ctx;
  ctx.handle = at::cuda::getCurrentCUDABlasLtHandle();
  ctx.workspace = at::cuda::getCUDABlasLtWorkspace();
  ctx.workspace_bytes = at::cuda::getCUDABlasLtWorkspaceSize();
  ctx.stream = current_stream();
  return ctx;
}

void check_status(const DenseStatus& s, const char* op) {
  TORCH_CHECK(s.ok(), op, ": ", s.step, " failed with ", dense_status_name(s.status), " (",
              dense_status_string(s.status), ")");
}

// y = x @ weight^T (+ bias), or with gelu: y = GeLU_tanh(x @ weight^T + bias) and the
// pre-activation. x: [T, K]; weight: [N, K]; bias: [N] or None. Returns (y [T, N],
// pre [T, N], or [0, N] without gelu).
std::tuple<at::Tensor, at::Tensor> dense_forward_cuda(const at::Tensor& x, const at::Tensor& weight,
                                                      const std::optional<at::Tensor>& bias,
                                                      bool gelu) {
  check_lead(x, "x");
  TORCH_CHECK(weight.dim() == 2, "weight must be 2-D [out, in], got ", weight.sizes());
  const int64_t tokens = x.size(0), in = x.size(1), out = weight.size(0);
  check_features(out, "weight.size(0) (out features)");
  check_tensor(weight, "weight", x, {out, in});
  if (bias.has_value()) check_tensor(*bias, "bias", x, {out});

  const c10::cuda::CUDAGuard guard(x.device());
  auto y = at::empty({tokens, out}, x.options());
  auto pre = at::empty({gelu ? tokens : 0, out}, x.options());
  if (tokens == 0) return {y, pre};
  DenseForwardArgs a;
  a.x = x.data_ptr();
  a.weight = weight.data_ptr();
  a.bias = bias.has_value() ? bias->data_ptr() : nullptr;
  a.y = y.data_ptr();
  a.pre = gelu ? pre.data_ptr() : nullptr;
  a.tokens = tokens, a.in = in, a.out = out;
  a.dtype = to_dtype(x.scalar_type(), "x");
  check_status(dense_forward(a, context()), "dense_forward");
  return {y, pre};
}

// grad_x = grad_y @ weight (+ residual_grad, accumulated by the GEMM with beta = 1), or with
// gelu_pre (the pre-activation whose GeLU was this layer's input): grad_x = GeLU'(gelu_pre) *
// (grad_y @ weight) and grad_bias = grad_x summed over tokens. grad_y: [T, N]; weight: [N, K];
// residual_grad, gelu_pre: [T, K] or None, not both. Returns (grad_x [T, K], grad_bias [K]
// with gelu_pre, else [0]).
std::tuple<at::Tensor, at::Tensor> dense_dgrad_cuda(const at::Tensor& grad_y,
                                                    const at::Tensor& weight,
                                                    const std::optional<at::Tensor>& residual_grad,
                                                    const std::optional<at::Tensor>& gelu_pre) {
  check_lead(grad_y, "grad_y");
  TORCH_CHECK(weight.dim() == 2, "weight must be 2-D [out, in], got ", weight.sizes());
  const int64_t tokens = grad_y.size(0), out = grad_y.size(1), in = weight.size(1);
  check_features(in, "weight.size(1) (in features)");
  check_tensor(weight, "weight", grad_y, {out, in});
  TORCH_CHECK(!(residual_grad.has_value() && gelu_pre.has_value()),
              "dense_dgrad takes residual_grad or gelu_pre, not both");
  if (residual_grad.has_value()) {
    check_tensor(*residual_grad, "residual_grad", grad_y, {tokens, in});
  }
  if (gelu_pre.has_value()) check_tensor(*gelu_pre, "gelu_pre", grad_y, {tokens, in});

  const c10::cuda::CUDAGuard guard(grad_y.device());
  auto grad_x = at::empty({tokens, in}, grad_y.options());
  if (tokens == 0) {
    return {grad_x, at::zeros({gelu_pre.has_value() ? in : 0}, grad_y.options())};
  }
  auto grad_bias = at::empty({gelu_pre.has_value() ? in : 0}, grad_y.options());
  DenseDgradArgs a;
  a.grad_y = grad_y.data_ptr();
  a.weight = weight.data_ptr();
  a.residual_grad = residual_grad.has_value() ? residual_grad->data_ptr() : nullptr;
  a.gelu_pre = gelu_pre.has_value() ? gelu_pre->data_ptr() : nullptr;
  a.grad_x = grad_x.data_ptr();
  a.grad_bias = gelu_pre.has_value() ? grad_bias.data_ptr() : nullptr;
  a.tokens = tokens, a.in = in, a.out = out;
  a.dtype = to_dtype(grad_y.scalar_type(), "grad_y");
  check_status(dense_dgrad(a, context()), "dense_dgrad");
  return {grad_x, grad_bias};
}

// grad_weight = grad_y^T @ x; with bias_grad, grad_bias = grad_y summed over tokens (BGRADB).
// x: [T, K]; grad_y: [T, N]. Returns (grad_weight [N, K], grad_bias [N] or [0]).
std::tuple<at::Tensor, at::Tensor> dense_wgrad_cuda(const at::Tensor& x, const at::Tensor& grad_y,
                                                    bool bias_grad) {
  check_lead(x, "x");
  TORCH_CHECK(grad_y.dim() == 2, "grad_y must be 2-D [tokens, out], got ", grad_y.sizes());
  const int64_t tokens = x.size(0), in = x.size(1), out = grad_y.size(1);
  check_features(out, "grad_y.size(1) (out features)");
  check_tensor(grad_y, "grad_y", x, {tokens, out});

  const c10::cuda::CUDAGuard guard(x.device());
  if (tokens == 0) {  // an empty sum: no GEMM with k = 0
    return {at::zeros({out, in}, x.options()), at::zeros({bias_grad ? out : 0}, x.options())};
  }
  auto grad_weight = at::empty({out, in}, x.options());
  auto grad_bias = at::empty({bias_grad ? out : 0}, x.options());
  DenseWgradArgs a;
  a.x = x.data_ptr();
  a.grad_y = grad_y.data_ptr();
  a.grad_weight = grad_weight.data_ptr();
  a.grad_bias = bias_grad ? grad_bias.data_ptr() : nullptr;
  a.tokens = tokens, a.in = in, a.out = out;
  a.dtype = to_dtype(x.scalar_type(), "x");
  check_status(dense_wgrad(a, context()), "dense_wgrad");
  return {grad_weight, grad_bias};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(bert_kernels_cuda, m) {
  m.def("dense_forward(Tensor x, Tensor weight, Tensor? bias, bool gelu) -> (Tensor, Tensor)");
  m.def("dense_dgrad(Tensor grad_y, Tensor weight, Tensor? residual_grad, Tensor? gelu_pre) "
        "-> (Tensor, Tensor)");
  m.def("dense_wgrad(Tensor x, Tensor grad_y, bool bias_grad) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(bert_kernels_cuda, CUDA, m) {
  m.impl("dense_forward", &dense_forward_cuda);
  m.impl("dense_dgrad", &dense_dgrad_cuda);
  m.impl("dense_wgrad", &dense_wgrad_cuda);
}

}  // namespace bert_kernels
