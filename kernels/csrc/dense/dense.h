// Dense layers as cuBLASLt GEMMs with fused epilogues: launchers called by the bindings.
//
// Tensors are row-major PyTorch tensors: x [T, K], weight [N, K] (nn.Linear's layout),
// y [T, N]. The .cu maps them onto cuBLASLt's column-major view. All pointers are device
// pointers; the cuBLASLt handle and workspace are torch's (passed in, opaque here).
#pragma once

#include <cstddef>
#include <cstdint>

#include "../common/types.h"

namespace bert_kernels {

// torch's cuBLASLt handle and workspace for the current device and stream.
struct DenseContext {
  void* handle;          // cublasLtHandle_t
  void* workspace;
  size_t workspace_bytes;
  cudaStream_t stream;
};

// y = x @ weight^T (+ bias) [then GeLU(tanh), saving the pre-activation]. Epilogue DEFAULT,
// BIAS, GELU_AUX or GELU_AUX_BIAS.
struct DenseForwardArgs {
  const void* x;       // [tokens, in] act
  const void* weight;  // [out, in] act
  const void* bias;    // [out] act, or nullptr
  void* y;             // [tokens, out] act
  void* pre;           // [tokens, out] act: x @ weight^T + bias before GeLU; nullptr: no GeLU
  int64_t tokens, in, out;
  DType dtype;
};

// grad_x = grad_y @ weight, then either
//   + residual_grad in the same GEMM (beta = 1; epilogue DEFAULT), or
//   * GeLU'(pre) with grad_bias = column sums of the result (epilogue DGELU_BGRAD), where pre
//     is the forward's pre-activation of this layer's *input* (the Linear_GeLU_Linear pattern).
struct DenseDgradArgs {
  const void* grad_y;         // [tokens, out] act
  const void* weight;         // [out, in] act
  const void* residual_grad;  // [tokens, in] act, or nullptr
  const void* gelu_pre;       // [tokens, in] act, or nullptr
  void* grad_x;               // [tokens, in] act
  void* grad_bias;            // [in] act when gelu_pre is set, else nullptr
  int64_t tokens, in, out;
  DType dtype;
};

// grad_weight = grad_y^T @ x; grad_bias = grad_y summed over tokens (epilogue BGRADB).
struct DenseWgradArgs {
  const void* x;       // [tokens, in] act
  const void* grad_y;  // [tokens, out] act
  void* grad_weight;   // [out, in] act
  void* grad_bias;     // [out] act, or nullptr
  int64_t tokens, in, out;
  DType dtype;
};

// Outcome of one cuBLASLt call: status 0 is success; otherwise `step` names the failing call.
struct DenseStatus {
  int status = 0;  // cublasStatus_t
  const char* step = "";
  bool ok() const { return status == 0; }
};

DenseStatus dense_forward(const DenseForwardArgs& args, const DenseContext& ctx);
DenseStatus dense_dgrad(const DenseDgradArgs& args, const DenseContext& ctx);
DenseStatus dense_wgrad(const DenseWgradArgs& args, const DenseContext& ctx);

// cuBLASLt's name and description of a status (cublasLtGetStatusName/String).
const char* dense_status_name(int status);
const char* dense_status_string(int status);

}  // namespace bert_kernels
