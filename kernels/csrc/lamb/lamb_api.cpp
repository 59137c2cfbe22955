// Thin torch bindings of the fused LAMB kernels (bert_kernels_cuda::lamb_sums, lamb_update,
// lamb_apply). All in place; per-step values (coef, ok, bias corrections, lrs, norms) are device
// tensors and are never read on the host.
#include <optional>

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../common/torch_utils.h"
#include "lamb.h"

namespace bert_kernels {
namespace {

// A flat shard buffer: (S,) contiguous on ref's device, 16-byte aligned for the vector accesses.
void check_flat(const at::Tensor& t, const char* name, const at::Tensor& ref) {
  check_cuda(t, name, ref);
  TORCH_CHECK(t.dim() == 1, name, " must be a flat (S,) shard buffer, got ", t.sizes());
  check_shape(t, name, {ref.numel()});
  check_aligned(t, name);
}

void check_scalar(const at::Tensor& t, const char* name, const at::Tensor& ref,
                  at::ScalarType dtype) {
  check_cuda(t, name, ref);
  check_dtype(t, name, dtype);
  TORCH_CHECK(t.numel() == 1, name, " must hold one value, got shape ", t.sizes());
}

void check_vector(const at::Tensor& t, const char* name, const at::Tensor& ref, int64_t n) {
  check_cuda(t, name, ref);
  check_dtype(t, name, at::kFloat);
  check_shape(t, name, {n});
}

// segments: [k, 4] int64 (start, length, parameter, group), sorted by start, disjoint, lengths
// > 0 (not checked: that would read the device); decays: one per param group.
LambSegments segments_of(const at::Tensor& segments, at::ArrayRef<double> decays,
                         const at::Tensor& master, int64_t num_params) {
  check_cuda(segments, "segments", master);
  check_dtype(segments, "segments", at::kLong);
  TORCH_CHECK(segments.dim() == 2 && segments.size(1) == 4, "segments must be [k, 4] (start, "
              "length, parameter, group), got ", segments.sizes());
  TORCH_CHECK(!decays.empty() && decays.size() <= kLambMaxGroups, "need 1 to ", kLambMaxGroups,
              " param groups (decays), got ", decays.size());
  TORCH_CHECK(master.numel() < (int64_t{1} << 31) * kLambTile, "shard too large: ",
              master.numel());
  LambSegments s;
  s.table = segments.data_ptr<int64_t>();
  s.count = segments.size(0);
  s.size = master.numel();
  s.num_params = num_params;
  s.num_groups = static_cast<int>(decays.size());
  for (size_t g = 0; g < decays.size(); ++g) s.decay[g] = static_cast<float>(decays[g]);
  return s;
}

at::Tensor partials_for(const LambSegments& s, int channels, const at::Tensor& like) {
  return at::empty({lamb_num_partials(s, channels)}, like.options().dtype(at::kFloat));
}

// An fp32 shard buffer (master, moments, update); `master` itself is the reference.
void check_fp32_flat(const at::Tensor& t, const char* name, const at::Tensor& master) {
  check_dtype(t, name, at::kFloat);
  check_flat(t, name, master);
}

void check_grad(const at::Tensor& grad, const at::Tensor& master) {
  check_flat(grad, "grad", master);
  TORCH_CHECK(grad.scalar_type() == at::kFloat || grad.scalar_type() == at::kHalf ||
              grad.scalar_type() == at::kBFloat16, "grad must be float32, float16 or bfloat16, "
              "got ", dtype_name(grad.scalar_type()));
}

// grad: (S,) fp32/fp16/bf16; master: (S,) fp32; sums: (1 + n,) fp32, accumulated into:
// sums[0] += sum(grad^2), sums[1 + p] += sum(master^2) over the piece of each decay parameter p.
void lamb_sums_cuda(const at::Tensor& grad, const at::Tensor& master, const at::Tensor& segments,
                    at::ArrayRef<double> decays, at::Tensor& sums) {
  check_fp32_flat(master, "master", master);
  check_grad(grad, master);
  TORCH_CHECK(sums.dim() == 1 && sums.numel() >= 1, "sums must be (1 + num_params,), got ",
              sums.sizes());
  check_vector(sums, "sums", master, sums.numel());

  const c10::cuda::CUDAGuard guard(master.device());
  LambSumsArgs a;
  a.seg = segments_of(segments, decays, master, sums.numel() - 1);
  const at::Tensor partials = partials_for(a.seg, 2, master);
  a.grad = grad.data_ptr();
  a.grad_dtype = to_dtype(grad.scalar_type(), "grad");
  a.master = master.data_ptr<float>();
  a.partials = partials.data_ptr<float>();
  a.sums = sums.data_ptr<float>();
  check_launch(lamb_sums(a, current_stream()), "lamb_sums");
}

// exp_avg, exp_avg_sq, update: (S,) fp32, written; coef: () fp32; ok: () bool or None;
// bc1, bc2: () fp64; update_sq: (n,) fp32 accumulated into (decay parameters), or None.
void lamb_update_cuda(const at::Tensor& grad, const at::Tensor& master, at::Tensor& exp_avg,
                      at::Tensor& exp_avg_sq, at::Tensor& update, const at::Tensor& segments,
                      at::ArrayRef<double> decays, const at::Tensor& coef,
                      const std::optional<at::Tensor>& ok, const at::Tensor& bc1,
                      const at::Tensor& bc2, double beta1, double beta2, double eps,
                      const std::optional<at::Tensor>& update_sq) {
  check_fp32_flat(master, "master", master);
  check_grad(grad, master);
  check_fp32_flat(exp_avg, "exp_avg", master);
  check_fp32_flat(exp_avg_sq, "exp_avg_sq", master);
  check_fp32_flat(update, "update", master);
  check_scalar(coef, "coef", master, at::kFloat);
  if (ok) check_scalar(*ok, "ok", master, at::kBool);
  check_scalar(bc1, "bc1", master, at::kDouble);
  check_scalar(bc2, "bc2", master, at::kDouble);
  TORCH_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1 && eps >= 0,
              "need 0 <= beta < 1 and eps >= 0, got betas (", beta1, ", ", beta2, "), eps ", eps);
  const int64_t n = update_sq ? update_sq->numel() : 0;
  if (update_sq) check_vector(*update_sq, "update_sq", master, n);

  const c10::cuda::CUDAGuard guard(master.device());
  LambUpdateArgs a;
  a.seg = segments_of(segments, decays, master, n);
  const at::Tensor partials = update_sq ? partials_for(a.seg, 1, master) : at::Tensor();
  a.grad = grad.data_ptr();
  a.grad_dtype = to_dtype(grad.scalar_type(), "grad");
  a.master = master.data_ptr<float>();
  a.exp_avg = exp_avg.data_ptr<float>();
  a.exp_avg_sq = exp_avg_sq.data_ptr<float>();
  a.update = update.data_ptr<float>();
  a.coef = coef.data_ptr<float>();
  a.ok = ok ? ok->data_ptr<bool>() : nullptr;
  a.bc1 = bc1.data_ptr<double>();
  a.bc2 = bc2.data_ptr<double>();
  // 1 - beta in double first, as the reference's alpha / value arguments.
  a.beta1 = static_cast<float>(beta1);
  a.beta2 = static_cast<float>(beta2);
  a.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  a.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  a.eps = static_cast<float>(eps);
  a.partials = update_sq ? partials.data_ptr<float>() : nullptr;
  a.update_sq = update_sq ? update_sq->data_ptr<float>() : nullptr;
  check_launch(lamb_update(a, current_stream()), "lamb_update");
}

// master: (S,) fp32, updated; update: (S,) fp32 (read only here; the CPU twin scales it in
// place); lrs: (groups,) fp32; w_sq, u_sq: (n,) fp32 over all ranks, both or neither;
// model: (S,) fp16/bf16 copy of the new master, or None.
void lamb_apply_cuda(at::Tensor& master, at::Tensor& update, const at::Tensor& segments,
                     at::ArrayRef<double> decays, const at::Tensor& lrs,
                     const std::optional<at::Tensor>& ok, const std::optional<at::Tensor>& w_sq,
                     const std::optional<at::Tensor>& u_sq,
                     const std::optional<at::Tensor>& model) {
  check_fp32_flat(master, "master", master);
  check_fp32_flat(update, "update", master);
  check_vector(lrs, "lrs", master, static_cast<int64_t>(decays.size()));
  if (ok) check_scalar(*ok, "ok", master, at::kBool);
  TORCH_CHECK(w_sq.has_value() == u_sq.has_value(), "w_sq and u_sq go together (trust ratio) "
              "or are both None (Adam)");
  const int64_t n = w_sq ? w_sq->numel() : 0;
  if (w_sq) {
    check_vector(*w_sq, "w_sq", master, n);
    check_vector(*u_sq, "u_sq", master, n);
  }
  if (model) {
    check_half_or_bf16(*model, "model");
    check_flat(*model, "model", master);
  }

  const c10::cuda::CUDAGuard guard(master.device());
  LambApplyArgs a;
  a.seg = segments_of(segments, decays, master, n);
  a.master = master.data_ptr<float>();
  a.update = update.data_ptr<float>();
  a.lrs = lrs.data_ptr<float>();
  a.ok = ok ? ok->data_ptr<bool>() : nullptr;
  a.w_sq = w_sq ? w_sq->data_ptr<float>() : nullptr;
  a.u_sq = u_sq ? u_sq->data_ptr<float>() : nullptr;
  a.model = model ? model->data_ptr() : nullptr;
  a.model_dtype = model ? to_dtype(model->scalar_type(), "model") : DType::kFloat32;
  check_launch(lamb_apply(a, current_stream()), "lamb_apply");
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(bert_kernels_cuda, m) {
  m.def("lamb_sums(Tensor grad, Tensor master, Tensor segments, float[] decays, "
        "Tensor(a!) sums) -> ()");
  m.def("lamb_update(Tensor grad, Tensor master, Tensor(a!) exp_avg, Tensor(b!) exp_avg_sq, "
        "Tensor(c!) update, Tensor segments, float[] decays, Tensor coef, Tensor? ok, "
        "Tensor bc1, Tensor bc2, float beta1, float beta2, float eps, "
        "Tensor(d!)? update_sq) -> ()");
  m.def("lamb_apply(Tensor(a!) master, Tensor(b!) update, Tensor segments, float[] decays, "
        "Tensor lrs, Tensor? ok, Tensor? w_sq, Tensor? u_sq, Tensor(c!)? model) -> ()");
}

TORCH_LIBRARY_IMPL(bert_kernels_cuda, CUDA, m) {
  m.impl("lamb_sums", &lamb_sums_cuda);
  m.impl("lamb_update", &lamb_update_cuda);
  m.impl("lamb_apply", &lamb_apply_cuda);
}

}  // namespace bert_kernels
