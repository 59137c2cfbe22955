// Dense layers through cuBLASLt epilogues: host code only, no kernels of our own.
//
// It is a .cu so that build.py's two-translation-unit convention holds (nvcc compiles host code
// with the host compiler in about a second), and so that cuBLASLt's types stay out of the torch
// binding except for torch's handle and workspace getters. No torch headers here.
//
// Row-major PyTorch tensors are read as column-major matrices with the dimensions swapped:
// x [T, K] is the K x T matrix X (ld K), weight [N, K] is the K x N matrix W (ld K),
// y [T, N] is the N x T matrix Y (ld N). Then
//   forward  Y  = W^T X            m = N, n = T, k = K  (TRANSA = T); bias/aux per row of Y
//   dgrad    dX = W dY             m = K, n = T, k = N  (+ C, or DGELU_BGRAD over rows of dX)
//   wgrad    dW = X dY^T           m = K, n = N, k = T  (TRANSB = T); BGRADB: sum over k of dY
// which is how the epilogues' "rows of D" (bias, GeLU aux, DGELU_BGRAD) and "columns of D
// reduced over k" (BGRADB) land on the feature dimension.
#include <cstdint>
#include <memory>

#include <cublasLt.h>

#include "dense.h"

namespace bert_kernels {
namespace {

// cuBLASLt descriptors are created per call (microseconds of host time, like torch's own
// cublasLt path); unique_ptr destroys them on every exit path.
struct MatmulDescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayoutOpaque_t* d) const { cublasLtMatrixLayoutDestroy(d); }
};
struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* d) const { cublasLtMatmulPreferenceDestroy(d); }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, MatmulDescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDeleter>;

// One column-major GEMM D[m, n] = op(A)[m, k] op(B)[k, n] (+ C), with an epilogue.
struct Gemm {
  const void* a;
  int64_t lda;
  bool trans_a;
  const void* b;
  int64_t ldb;
  bool trans_b;
  const void* c;  // accumulated with beta = 1, or nullptr (beta = 0)
  void* d;
  int64_t ldd;
  int64_t m, n, k;
  cublasLtEpilogue_t epilogue;
  const void* bias;  // bias (input) or bias gradient (output), per the epilogue
  const void* aux;   // GeLU pre-activation (output forward, input backward)
  int64_t ld_aux;
  DType dtype;
};

// Largest power of two, up to 256, dividing the address: what the heuristic may assume.
uint32_t alignment(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && addr % align != 0) align /= 2;
  return align;
}

#define DENSE_TRY(call, name)                                  \
  do {                                                         \
    const cublasStatus_t s_ = (call);                          \
    if (s_ != CUBLAS_STATUS_SUCCESS) return {int(s_), (name)}; \
  } while (0)

template <typename T>
cublasStatus_t set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                        const T& v) {
  return cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof(v));
}
template <typename T>
cublasStatus_t set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                        const T& v) {
  return cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v));
}

DenseStatus make_layout(Layout& out, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t raw = nullptr;
  DENSE_TRY(cublasLtMatrixLayoutCreate(&raw, type, static_cast<uint64_t>(rows),
                                       static_cast<uint64_t>(cols), ld),
            "cublasLtMatrixLayoutCreate");
  out.reset(raw);
  return {};
}

DenseStatus run(const Gemm& g, const DenseContext& ctx) {
  const cudaDataType_t type = g.dtype == DType::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
  cublasLtMatmulDesc_t raw_desc = nullptr;
  // fp32 accumulation and fp32 alpha/beta for fp16 and bf16 alike.
  DENSE_TRY(cublasLtMatmulDescCreate(&raw_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            "cublasLtMatmulDescCreate");
  MatmulDesc desc(raw_desc);
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  DENSE_TRY(set_desc(raw_desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a), "set TRANSA");
  DENSE_TRY(set_desc(raw_desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b), "set TRANSB");
  DENSE_TRY(set_desc(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE, g.epilogue), "set EPILOGUE");
  if (g.bias != nullptr) {
    // The heuristic reads the pointer values (not the data) to know their alignment, so every
    // epilogue pointer is set before the algorithm is chosen.
    DENSE_TRY(set_desc(raw_desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias), "set BIAS_POINTER");
  }
  if (g.aux != nullptr) {
    DENSE_TRY(set_desc(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux),
              "set EPILOGUE_AUX_POINTER");
    DENSE_TRY(set_desc(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.ld_aux),
              "set EPILOGUE_AUX_LD");
  }

  // Stored shapes: op(A) is m x k, so A itself is k x m when transposed.
  Layout a_layout, b_layout, d_layout;
  DenseStatus st = make_layout(a_layout, type, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda);
  if (!st.ok()) return st;
  st = make_layout(b_layout, type, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb);
  if (!st.ok()) return st;
  st = make_layout(d_layout, type, g.m, g.n, g.ldd);  // C shares D's layout
  if (!st.ok()) return st;

  cublasLtMatmulPreference_t raw_pref = nullptr;
  DENSE_TRY(cublasLtMatmulPreferenceCreate(&raw_pref), "cublasLtMatmulPreferenceCreate");
  Preference pref(raw_pref);
  const uint64_t workspace = ctx.workspace_bytes;
  DENSE_TRY(set_pref(raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace),
            "set MAX_WORKSPACE_BYTES");
  // The default assumes 256-byte aligned buffers; the bindings guarantee only 16 bytes.
  const void* c = g.c != nullptr ? g.c : g.d;
  const uint32_t aligns[4] = {alignment(g.a), alignment(g.b), alignment(c), alignment(g.d)};
  const cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i) {
    DENSE_TRY(set_pref(raw_pref, align_attrs[i], aligns[i]), "set MIN_ALIGNMENT");
  }
  // Split-K partial sums in fp32 only (not in the fp16/bf16 output type), so the result keeps
  // the error of one fp32 accumulation; if that leaves no algorithm, accept any scheme.
  const uint32_t fp32_reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  DENSE_TRY(set_pref(raw_pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, fp32_reduction),
            "set REDUCTION_SCHEME_MASK");

  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  auto* handle = static_cast<cublasLtHandle_t>(ctx.handle);
  const auto heuristic = [&] {
    return cublasLtMatmulAlgoGetHeuristic(handle, raw_desc, a_layout.get(), b_layout.get(),
                                          d_layout.get(), d_layout.get(), raw_pref, 1, &result,
                                          &found);
  };
  DENSE_TRY(heuristic(), "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0) {
    const uint32_t any_reduction = CUBLASLT_REDUCTION_SCHEME_MASK;
    DENSE_TRY(set_pref(raw_pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, any_reduction),
              "set REDUCTION_SCHEME_MASK");
    DENSE_TRY(heuristic(), "cublasLtMatmulAlgoGetHeuristic");
  }
  if (found == 0) {
    return {int(CUBLAS_STATUS_NOT_SUPPORTED), "cublasLtMatmulAlgoGetHeuristic (no algorithm)"};
  }

  const float alpha = 1.0f, beta = g.c != nullptr ? 1.0f : 0.0f;
  DENSE_TRY(cublasLtMatmul(handle, raw_desc, &alpha, g.a, a_layout.get(), g.b, b_layout.get(),
                           &beta, c, d_layout.get(), g.d, d_layout.get(), &result.algo,
                           ctx.workspace, ctx.workspace_bytes, ctx.stream),
            "cublasLtMatmul");
  return {};
}

}  // namespace

DenseStatus dense_forward(const DenseForwardArgs& a, const DenseContext& ctx) {
  Gemm g{};
  g.a = a.weight, g.lda = a.in, g.trans_a = true;
  g.b = a.x, g.ldb = a.in, g.trans_b = false;
  g.d = a.y, g.ldd = a.out;
  g.m = a.out, g.n = a.tokens, g.k = a.in;
  g.bias = a.bias;
  g.aux = a.pre, g.ld_aux = a.out;
  if (a.pre != nullptr) {
    g.epilogue = a.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  } else {
    g.epilogue = a.bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
  g.dtype = a.dtype;
  return run(g, ctx);
}

DenseStatus dense_dgrad(const DenseDgradArgs& a, const DenseContext& ctx) {
  if (a.residual_grad != nullptr && a.gelu_pre != nullptr) {
    // Whether DGELU applies before or after beta * C is not documented; the ops never need both.
    return {int(CUBLAS_STATUS_INVALID_VALUE), "dense_dgrad: residual_grad with gelu_pre"};
  }
  Gemm g{};
  g.a = a.weight, g.lda = a.in, g.trans_a = false;
  g.b = a.grad_y, g.ldb = a.out, g.trans_b = false;
  g.c = a.residual_grad;
  g.d = a.grad_x, g.ldd = a.in;
  g.m = a.in, g.n = a.tokens, g.k = a.out;
  if (a.gelu_pre != nullptr) {
    g.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD;
    g.aux = a.gelu_pre, g.ld_aux = a.in;
    g.bias = a.grad_bias;
  } else {
    g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  }
  g.dtype = a.dtype;
  return run(g, ctx);
}

DenseStatus dense_wgrad(const DenseWgradArgs& a, const DenseContext& ctx) {
  Gemm g{};
  g.a = a.x, g.lda = a.in, g.trans_a = false;
  g.b = a.grad_y, g.ldb = a.out, g.trans_b = true;
  g.d = a.grad_weight, g.ldd = a.in;
  g.m = a.in, g.n = a.out, g.k = a.tokens;
  g.epilogue = a.grad_bias != nullptr ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT;
  g.bias = a.grad_bias;
  g.dtype = a.dtype;
  return run(g, ctx);
}

const char* dense_status_name(int status) {
  return cublasLtGetStatusName(static_cast<cublasStatus_t>(status));
}

const char* dense_status_string(int status) {
  return cublasLtGetStatusString(static_cast<cublasStatus_t>(status));
}

}  // namespace bert_kernels
