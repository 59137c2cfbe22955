// Fused LAMB over one flat fp32 shard of the sharded optimizer ([Zeng], IV-C-2).
//
// The shard is contiguous, so the only metadata is a table of segments (one parameter's piece
// each): start, length, parameter index, param group. Three entry points, five launches:
//   lamb_sums:   sums[0] += sum(grad^2); sums[1 + p] += sum(master^2) per decay parameter p
//   lamb_update: moments, u = m_hat / (sqrt(v_hat) + eps) + wd * w, and update_sq[p] += sum(u^2)
//   lamb_apply:  w -= lr * ok * ratio * u, ratio = |w| / |u| (1 if either is 0, or no decay),
//                and the 16-bit model copy of w
// Reductions are deterministic: each block writes one partial per (tile, segment) pair and one
// block sums them in a fixed order; no atomics.
#pragma once

#include "../common/types.h"

namespace bert_kernels {

constexpr int kLambMaxGroups = 8;
constexpr int64_t kLambTile = 8192;  // shard elements per block

// Columns of the [count, 4] int64 segment table.
enum LambColumn : int { kSegStart = 0, kSegLength = 1, kSegParam = 2, kSegGroup = 3 };

struct LambSegments {
  const int64_t* table;  // [count, 4]; sorted by start, disjoint, lengths > 0
  int64_t count;
  int64_t size;          // shard elements S; pieces are clipped to [0, S)
  int64_t num_params;    // bound of the parameter index (per-parameter outputs are (n,))
  int num_groups;
  float decay[kLambMaxGroups];  // per group; 0: no weight decay and no trust ratio
};

// Partials the binding allocates: one per (tile, segment) pair and channel.
inline int64_t lamb_num_partials(const LambSegments& seg, int channels) {
  return ((seg.size + kLambTile - 1) / kLambTile + seg.count) * channels;
}

struct LambSumsArgs {
  LambSegments seg;
  const void* grad;  // [S] grad_dtype
  DType grad_dtype;
  const float* master;  // [S]
  float* partials;      // lamb_num_partials(seg, 2) scratch
  float* sums;          // [1 + num_params], accumulated into
};

struct LambUpdateArgs {
  LambSegments seg;
  const void* grad;  // [S] grad_dtype, times the loss scale
  DType grad_dtype;
  const float* master;  // [S]
  float* exp_avg;       // [S]
  float* exp_avg_sq;    // [S]
  float* update;        // [S] out: the direction u
  const float* coef;    // () 1 / loss scale x clip factor
  const bool* ok;       // () false skips the step (moments unchanged); nullptr: always step
  const double* bc1;    // () 1 - beta1^t
  const double* bc2;    // () 1 - beta2^t
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
  float* partials;   // lamb_num_partials(seg, 1) scratch, or nullptr: no update_sq
  float* update_sq;  // [num_params], accumulated into (decay parameters only)
};

struct LambApplyArgs {
  LambSegments seg;
  float* master;        // [S]
  const float* update;  // [S]
  const float* lrs;     // [num_groups]
  const bool* ok;       // () or nullptr
  const float* w_sq;    // [num_params] over all ranks, or nullptr: no trust ratio (Adam)
  const float* u_sq;    // [num_params] over all ranks (with w_sq)
  void* model;          // [S] model_dtype (16-bit) copy of the new master, or nullptr
  DType model_dtype;
};

cudaError_t lamb_sums(const LambSumsArgs& args, cudaStream_t stream);
cudaError_t lamb_update(const LambUpdateArgs& args, cudaStream_t stream);
cudaError_t lamb_apply(const LambApplyArgs& args, cudaStream_t stream);

}  // namespace bert_kernels
