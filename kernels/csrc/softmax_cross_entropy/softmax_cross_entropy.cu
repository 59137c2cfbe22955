// Softmax cross-entropy over [rows, vocab] logits, loss and d(loss)/d(logits) in one kernel.
//
// One block per row. Pass 1 reads the row once with an online max / sum-of-exponentials
// (fp32, 16-byte loads); pass 2 reads it again (mostly from L2) and writes the gradient in the
// logits dtype. Compared with log_softmax + nll_loss on an fp32 copy, no fp32 [rows, vocab]
// tensor is ever materialized. The caller scales the gradient by d(loss) in the backward.
#include <cmath>

#include "softmax_cross_entropy.h"
#include "../common/device.cuh"

namespace bert_kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8;

struct MaxSum {
  float m, s;  // running max and sum of exp(x - m)
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

__device__ __forceinline__ MaxSum block_max_sum(MaxSum v) {
  __shared__ MaxSum warp_vals[kThreads / 32];
  __shared__ MaxSum total;
#pragma unroll
  for (int k = 16; k > 0; k >>= 1) {
    const MaxSum o{__shfl_xor_sync(0xffffffffu, v.m, k), __shfl_xor_sync(0xffffffffu, v.s, k)};
    v = combine(v, o);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_vals[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSum r = warp_vals[0];
    for (int w = 1; w < kThreads / 32; ++w) r = combine(r, warp_vals[w]);
    total = r;
  }
  __syncthreads();
  return total;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) softmax_cross_entropy_kernel(SoftmaxCrossEntropyArgs a) {
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(a.logits) + row * a.cols;
  const int64_t nvec = a.cols / kVec;

  MaxSum acc{-INFINITY, 0.f};
  for (int64_t v = threadIdx.x; v < nvec; v += kThreads) {
    float val[kVec];
    load8(x + v * kVec, val);
    float vmax = -INFINITY;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      if (v * kVec + j >= a.vocab) val[j] = -INFINITY;
      vmax = fmaxf(vmax, val[j]);
    }
    if (vmax == -INFINITY) continue;
    const float m = fmaxf(acc.m, vmax);
    float s = acc.s * __expf(acc.m - m);
#pragma unroll
    for (int j = 0; j < kVec; ++j) s += __expf(val[j] - m);
    acc = {m, s};
  }
  const MaxSum tot = block_max_sum(acc);
  const float lse = tot.m + __logf(tot.s);

  const int64_t label = a.labels[row];
  const bool ignored = label == a.ignore_index;
  const bool valid = label >= 0 && label < a.vocab;
  if (threadIdx.x == 0) {
    a.losses[row] = ignored ? 0.f : (valid ? lse - to_float(x[label]) : NAN);
  }
  if (a.grad == nullptr) return;

  T* g = static_cast<T*>(a.grad) + row * a.cols;
  for (int64_t v = threadIdx.x; v < nvec; v += kThreads) {
    float val[kVec], out[kVec];
    load8(x + v * kVec, val);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int64_t col = v * kVec + j;
      float d = col < a.vocab ? __expf(val[j] - lse) - (col == label ? 1.f : 0.f) : 0.f;
      if (ignored) d = 0.f;
      if (!valid && !ignored && col < a.vocab) d = NAN;
      out[j] = d;
    }
    store8(g + v * kVec, out);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) scale_rows_kernel(SoftmaxCrossEntropyBackwardArgs a) {
  const int64_t vecs_per_row = a.cols / kVec;
  const int64_t total = a.rows * vecs_per_row;
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; n < total;
       n += static_cast<int64_t>(gridDim.x) * kThreads) {
    const float s = a.grad_loss[n / vecs_per_row];
    float v[kVec];
    load8(static_cast<const T*>(a.grad) + n * kVec, v);
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[j] *= s;
    store8(static_cast<T*>(a.out) + n * kVec, v);
  }
}

}  // namespace

cudaError_t softmax_cross_entropy_backward(const SoftmaxCrossEntropyBackwardArgs& a,
                                           cudaStream_t stream) {
  const int64_t needed = (a.rows * (a.cols / kVec) + kThreads - 1) / kThreads;
  if (needed == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(needed < a.max_blocks ? needed : a.max_blocks);
  if (a.dtype == DType::kFloat16) {
    scale_rows_kernel<__half><<<blocks, kThreads, 0, stream>>>(a);
  } else if (a.dtype == DType::kBFloat16) {
    scale_rows_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(a);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t softmax_cross_entropy(const SoftmaxCrossEntropyArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(a.rows);
  if (a.dtype == DType::kFloat16) {
    softmax_cross_entropy_kernel<__half><<<blocks, kThreads, 0, stream>>>(a);
  } else if (a.dtype == DType::kBFloat16) {
    softmax_cross_entropy_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(a);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace bert_kernels
