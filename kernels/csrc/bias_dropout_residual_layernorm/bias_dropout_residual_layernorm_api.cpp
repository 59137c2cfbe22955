// Thin torch binding of bias_dropout_residual_layernorm: check every tensor, allocate outputs on
// the current stream's device, launch. Registered as bert_kernels_cuda::bdrln_{forward,backward};
// autograd, fake shapes and the public op live in kernels/bias_dropout_residual_layernorm.py.
#include <tuple>

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../common/torch_utils.h"
#include "bias_dropout_residual_layernorm.h"

namespace bert_kernels {
namespace {

void check_params(const at::Tensor& ref, const at::Tensor& t, const char* name,
                  at::ScalarType param_dtype) {
  check_cuda(t, name, ref);
  check_shape(t, name, {kHidden});
  check_dtype(t, name, param_dtype);
  check_aligned(t, name);
}

void check_activation(const at::Tensor& ref, const at::Tensor& t, const char* name) {
  check_cuda(t, name, ref);
  check_shape(t, name, {ref.size(0), kHidden});
  check_dtype(t, name, ref.scalar_type());
  check_aligned(t, name);
}

void check_param_dtype(const at::Tensor& x, const at::Tensor& gamma) {
  const auto p = gamma.scalar_type();
  TORCH_CHECK(p == at::kFloat || p == x.scalar_type(), "LayerNorm weight must be float32 or ",
              dtype_name(x.scalar_type()), " (the activation dtype), got ", dtype_name(p));
}

// Returns (y, z, mean, rstd, mask); z = residual + dropout(x + bias) is what backward needs.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> bdrln_forward_cuda(
    const at::Tensor& x, const at::Tensor& bias, const at::Tensor& residual,
    const at::Tensor& gamma, const at::Tensor& beta, double p, double eps, int64_t seed,
    int64_t offset) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) == kHidden, "bias_dropout_residual_layernorm is built "
              "for hidden size ", kHidden, " only: x must be [tokens, ", kHidden, "], got ",
              x.sizes());
  check_half_or_bf16(x, "x");
  check_activation(x, x, "x");
  check_activation(x, residual, "residual");
  check_param_dtype(x, gamma);
  check_params(x, bias, "bias", gamma.scalar_type());
  check_params(x, gamma, "weight", gamma.scalar_type());
  check_params(x, beta, "ln_bias", gamma.scalar_type());
  TORCH_CHECK(p >= 0.0 && p < 1.0, "dropout probability must be in [0, 1), got ", p);
  TORCH_CHECK(eps > 0.0, "eps must be positive, got ", eps);

  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t rows = x.size(0);
  auto y = at::empty_like(x);
  auto z = at::empty_like(x);
  auto stats = x.options().dtype(at::kFloat);
  auto mean = at::empty({rows}, stats);
  auto rstd = at::empty({rows}, stats);
  auto mask = at::empty({rows, kBdrlnMaskWords}, x.options().dtype(at::kInt));

  BdrlnForwardArgs a;
  a.x = x.data_ptr();
  a.bias = bias.data_ptr();
  a.residual = residual.data_ptr();
  a.gamma = gamma.data_ptr();
  a.beta = beta.data_ptr();
  a.y = y.data_ptr();
  a.z = z.data_ptr();
  a.mean = mean.data_ptr<float>();
  a.rstd = rstd.data_ptr<float>();
  a.mask = reinterpret_cast<uint32_t*>(mask.data_ptr<int32_t>());
  a.rows = rows;
  const double threshold = p * 4294967296.0;
  a.drop_threshold = static_cast<uint32_t>(threshold < 4294967295.0 ? threshold : 4294967295.0);
  a.scale = a.drop_threshold == 0 ? 1.0f : static_cast<float>(1.0 / (1.0 - p));
  a.eps = static_cast<float>(eps);
  if (a.drop_threshold != 0 && rows > 0) {
    a.philox = philox_args(seed, offset, kBdrlnPhiloxIncrement);
  }
  a.act = to_dtype(x.scalar_type(), "x");
  a.param = to_dtype(gamma.scalar_type(), "weight");
  check_launch(bdrln_forward(a, current_stream()), "bdrln_forward");
  return {y, z, mean, rstd, mask};
}

// Returns (dx, dresidual, dgamma, dbeta, dbias).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> bdrln_backward_cuda(
    const at::Tensor& dy, const at::Tensor& z, const at::Tensor& mean, const at::Tensor& rstd,
    const at::Tensor& mask, const at::Tensor& gamma, double p) {
  TORCH_CHECK(z.dim() == 2 && z.size(1) == kHidden, "z must be [tokens, ", kHidden, "], got ",
              z.sizes());
  check_half_or_bf16(z, "z");
  check_activation(z, z, "z");
  check_activation(z, dy, "grad_y");
  const int64_t rows = z.size(0);
  for (const auto& [t, name] : {std::pair{&mean, "mean"}, std::pair{&rstd, "rstd"}}) {
    check_cuda(*t, name, z);
    check_shape(*t, name, {rows});
    check_dtype(*t, name, at::kFloat);
  }
  check_cuda(mask, "mask", z);
  check_shape(mask, "mask", {rows, kBdrlnMaskWords});
  check_dtype(mask, "mask", at::kInt);
  check_param_dtype(z, gamma);
  check_params(z, gamma, "weight", gamma.scalar_type());
  TORCH_CHECK(p >= 0.0 && p < 1.0, "dropout probability must be in [0, 1), got ", p);

  const c10::cuda::CUDAGuard guard(z.device());
  auto dx = at::empty_like(z);
  auto dres = at::empty_like(z);
  auto dgamma = at::empty_like(gamma);
  auto dbeta = at::empty_like(gamma);
  auto dbias = at::empty_like(gamma);
  const int blocks = bdrln_backward_blocks(rows, sm_count());
  auto partial = at::empty({3, blocks, kHidden}, z.options().dtype(at::kFloat));

  BdrlnBackwardArgs a;
  a.dy = dy.data_ptr();
  a.z = z.data_ptr();
  a.mean = mean.data_ptr<float>();
  a.rstd = rstd.data_ptr<float>();
  a.mask = reinterpret_cast<const uint32_t*>(mask.data_ptr<int32_t>());
  a.gamma = gamma.data_ptr();
  a.dx = dx.data_ptr();
  a.dresidual = dres.data_ptr();
  a.partial = partial.data_ptr<float>();
  a.dgamma = dgamma.data_ptr();
  a.dbeta = dbeta.data_ptr();
  a.dbias = dbias.data_ptr();
  a.rows = rows;
  a.blocks = blocks;
  a.scale = p == 0.0 ? 1.0f : static_cast<float>(1.0 / (1.0 - p));
  a.act = to_dtype(z.scalar_type(), "z");
  a.param = to_dtype(gamma.scalar_type(), "weight");
  check_launch(bdrln_backward(a, current_stream()), "bdrln_backward");
  return {dx, dres, dgamma, dbeta, dbias};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(bert_kernels_cuda, m) {
  m.def("bdrln_forward(Tensor x, Tensor bias, Tensor residual, Tensor weight, Tensor ln_bias, "
        "float p, float eps, int seed, int offset) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("bdrln_backward(Tensor grad_y, Tensor z, Tensor mean, Tensor rstd, Tensor mask, "
        "Tensor weight, float p) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(bert_kernels_cuda, CUDA, m) {
  m.impl("bdrln_forward", &bdrln_forward_cuda);
  m.impl("bdrln_backward", &bdrln_backward_cuda);
}

}  // namespace bert_kernels
