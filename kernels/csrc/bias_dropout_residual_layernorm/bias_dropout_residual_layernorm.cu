// y = LayerNorm(residual + dropout(x + bias)), hidden 1024, fp16/bf16 activations, fp32 statistics.
//
// Forward: one kernel, one warp per row. Lane l owns columns (c * 32 + l) * 8 + [0, 8) for
// chunks c = 0..3, loaded as 16-byte vectors; the row stays in registers, so mean and variance
// are exact two-pass values. The dropout keep bits of lane l form one 32-bit word
// (dropout_mask.h): the mask depends only on (seed, offset, row, column), never on the launch
// shape, and kernels/reference.py rebuilds it bit for bit on the CPU.
//
// Backward: two kernels. The first walks rows (grid-strided, one warp per row), writes
// d(residual) = dz and dx = dz * keep * scale, and accumulates per-column partial sums of
// dy * xhat, dy and dx per block; the second reduces the partials into dgamma, dbeta, dbias.
#include "bias_dropout_residual_layernorm.h"
#include "../common/device.cuh"
#include "dropout_mask.h"

namespace bert_kernels {
namespace {

constexpr int kWarps = 4;  // rows per block (forward) / concurrent rows per block (backward)
constexpr int kVec = 8;
constexpr int kChunks = kHidden / (32 * kVec);
constexpr float kInvHidden = 1.0f / kHidden;

template <typename T, typename P>
__global__ void __launch_bounds__(kWarps * 32) bdrln_forward_kernel(BdrlnForwardArgs a) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= a.rows) return;
  const T* x = static_cast<const T*>(a.x) + row * kHidden;
  const T* res = static_cast<const T*>(a.residual) + row * kHidden;
  const P* bias = static_cast<const P*>(a.bias);

  uint32_t bits = 0xFFFFFFFFu;
  if (a.drop_threshold != 0) {
    uint64_t seed, offset;
    unpack_philox(a.philox, seed, offset);
    bits = bdrln_mask_word(seed, offset, static_cast<uint64_t>(row), lane, a.drop_threshold);
  }

  float v[kChunks][kVec];
  float sum = 0.f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int col = (c * 32 + lane) * kVec;
    float xv[kVec], bv[kVec], rv[kVec];
    load8(x + col, xv);
    load8(bias + col, bv);
    load8(res + col, rv);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float kept = ((bits >> (c * kVec + j)) & 1u) ? (xv[j] + bv[j]) * a.scale : 0.f;
      v[c][j] = rv[j] + kept;
      sum += v[c][j];
    }
  }
  const float mean = warp_sum(sum) * kInvHidden;
  float sq = 0.f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c)
#pragma unroll
    for (int j = 0; j < kVec; ++j) sq += (v[c][j] - mean) * (v[c][j] - mean);
  const float rstd = rsqrtf(warp_sum(sq) * kInvHidden + a.eps);

  T* y = static_cast<T*>(a.y) + row * kHidden;
  T* z = static_cast<T*>(a.z) + row * kHidden;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int col = (c * 32 + lane) * kVec;
    float g[kVec], b[kVec], out[kVec];
    load8(static_cast<const P*>(a.gamma) + col, g);
    load8(static_cast<const P*>(a.beta) + col, b);
#pragma unroll
    for (int j = 0; j < kVec; ++j) out[j] = (v[c][j] - mean) * rstd * g[j] + b[j];
    store8(y + col, out);
    store8(z + col, v[c]);
  }
  a.mask[row * kBdrlnMaskWords + lane] = bits;
  if (lane == 0) {
    a.mean[row] = mean;
    a.rstd[row] = rstd;
  }
}

// Sums one per-lane accumulator over the block's warps into out[0:1024].
__device__ __forceinline__ void block_column_sum(const float (&acc)[kChunks][kVec],
                                                 float (*red)[kHidden], float* out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    float4* dst = reinterpret_cast<float4*>(&red[warp][(c * 32 + lane) * kVec]);
    dst[0] = make_float4(acc[c][0], acc[c][1], acc[c][2], acc[c][3]);
    dst[1] = make_float4(acc[c][4], acc[c][5], acc[c][6], acc[c][7]);
  }
  __syncthreads();
  for (int col = threadIdx.x; col < kHidden; col += blockDim.x) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += red[w][col];
    out[col] = s;
  }
  __syncthreads();
}

template <typename T, typename P>
__global__ void __launch_bounds__(kWarps * 32) bdrln_backward_rows_kernel(BdrlnBackwardArgs a) {
  __shared__ __align__(16) float red[kWarps][kHidden];
  const int lane = threadIdx.x & 31;
  const P* gamma = static_cast<const P*>(a.gamma);
  float acc_dgamma[kChunks][kVec] = {}, acc_dbeta[kChunks][kVec] = {}, acc_dbias[kChunks][kVec] = {};

  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); row < a.rows;
       row += static_cast<int64_t>(gridDim.x) * kWarps) {
    const float mean = a.mean[row], rstd = a.rstd[row];
    const uint32_t bits = a.mask[row * kBdrlnMaskWords + lane];
    const T* dy_row = static_cast<const T*>(a.dy) + row * kHidden;
    const T* z_row = static_cast<const T*>(a.z) + row * kHidden;
    float g[kChunks][kVec], xhat[kChunks][kVec];  // g = dy * gamma
    float sum_g = 0.f, sum_gx = 0.f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int col = (c * 32 + lane) * kVec;
      float dy[kVec], z[kVec], w[kVec];
      load8(dy_row + col, dy);
      load8(z_row + col, z);
      load8(gamma + col, w);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        xhat[c][j] = (z[j] - mean) * rstd;
        g[c][j] = dy[j] * w[j];
        sum_g += g[c][j];
        sum_gx += g[c][j] * xhat[c][j];
        acc_dgamma[c][j] += dy[j] * xhat[c][j];
        acc_dbeta[c][j] += dy[j];
      }
    }
    const float mean_g = warp_sum(sum_g) * kInvHidden;
    const float mean_gx = warp_sum(sum_gx) * kInvHidden;
    T* dres_row = static_cast<T*>(a.dresidual) + row * kHidden;
    T* dx_row = static_cast<T*>(a.dx) + row * kHidden;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int col = (c * 32 + lane) * kVec;
      float dz[kVec], dx[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        dz[j] = rstd * (g[c][j] - mean_g - xhat[c][j] * mean_gx);
        dx[j] = ((bits >> (c * kVec + j)) & 1u) ? dz[j] * a.scale : 0.f;
        acc_dbias[c][j] += dx[j];
      }
      store8(dres_row + col, dz);
      store8(dx_row + col, dx);
    }
  }
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kHidden;
  float* partial = a.partial + static_cast<int64_t>(blockIdx.x) * kHidden;
  block_column_sum(acc_dgamma, red, partial);
  block_column_sum(acc_dbeta, red, partial + stride);
  block_column_sum(acc_dbias, red, partial + 2 * stride);
}

// partial: [3, blocks, 1024] -> dgamma, dbeta, dbias. Block (32 columns x 8 row groups).
template <typename P>
__global__ void __launch_bounds__(256) bdrln_backward_params_kernel(BdrlnBackwardArgs a) {
  __shared__ float red[8][33];
  const int col = blockIdx.x * 32 + threadIdx.x;
  const int which = blockIdx.y;
  const float* src = a.partial + static_cast<int64_t>(which) * a.blocks * kHidden + col;
  float s = 0.f;
  for (int b = threadIdx.y; b < a.blocks; b += 8) s += src[static_cast<int64_t>(b) * kHidden];
  red[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0) {
#pragma unroll
    for (int r = 1; r < 8; ++r) s += red[r][threadIdx.x];
    void* dst = which == 0 ? a.dgamma : (which == 1 ? a.dbeta : a.dbias);
    static_cast<P*>(dst)[col] = from_float<P>(s);
  }
}

template <typename T, typename P>
cudaError_t launch_forward(const BdrlnForwardArgs& a, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((a.rows + kWarps - 1) / kWarps);
  bdrln_forward_kernel<T, P><<<blocks, kWarps * 32, 0, stream>>>(a);
  return cudaGetLastError();
}

template <typename T, typename P>
cudaError_t launch_backward(const BdrlnBackwardArgs& a, cudaStream_t stream) {
  bdrln_backward_rows_kernel<T, P><<<a.blocks, kWarps * 32, 0, stream>>>(a);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  bdrln_backward_params_kernel<P><<<dim3(kHidden / 32, 3), dim3(32, 8), 0, stream>>>(a);
  return cudaGetLastError();
}

// The only instantiations: activations fp16/bf16, parameters fp32 or the activation type.
template <typename Args>
using Launcher = cudaError_t (*)(const Args&, cudaStream_t);

template <typename Args, cudaError_t (*F16F32)(const Args&, cudaStream_t),
          cudaError_t (*F16F16)(const Args&, cudaStream_t),
          cudaError_t (*BF16F32)(const Args&, cudaStream_t),
          cudaError_t (*BF16BF16)(const Args&, cudaStream_t)>
Launcher<Args> dispatch(DType act, DType param) {
  if (act == DType::kFloat16 && param == DType::kFloat32) return F16F32;
  if (act == DType::kFloat16 && param == DType::kFloat16) return F16F16;
  if (act == DType::kBFloat16 && param == DType::kFloat32) return BF16F32;
  if (act == DType::kBFloat16 && param == DType::kBFloat16) return BF16BF16;
  return nullptr;
}

}  // namespace

int bdrln_backward_blocks(int64_t rows, int sm_count) {
  const int64_t needed = (rows + kWarps - 1) / kWarps;
  const int64_t cap = 2 * static_cast<int64_t>(sm_count > 0 ? sm_count : 1);
  return static_cast<int>(needed < 1 ? 1 : (needed < cap ? needed : cap));
}

cudaError_t bdrln_forward(const BdrlnForwardArgs& a, cudaStream_t stream) {
  const auto launch = dispatch<BdrlnForwardArgs, launch_forward<__half, float>,
                               launch_forward<__half, __half>, launch_forward<__nv_bfloat16, float>,
                               launch_forward<__nv_bfloat16, __nv_bfloat16>>(a.act, a.param);
  if (launch == nullptr) return cudaErrorInvalidValue;
  return a.rows == 0 ? cudaSuccess : launch(a, stream);
}

cudaError_t bdrln_backward(const BdrlnBackwardArgs& a, cudaStream_t stream) {
  const auto launch = dispatch<BdrlnBackwardArgs, launch_backward<__half, float>,
                               launch_backward<__half, __half>, launch_backward<__nv_bfloat16, float>,
                               launch_backward<__nv_bfloat16, __nv_bfloat16>>(a.act, a.param);
  if (launch == nullptr) return cudaErrorInvalidValue;
  return launch(a, stream);
}

}  // namespace bert_kernels
