// Fused LAMB kernels over one flat fp32 shard; the contract is in lamb.h.
//
// Work split: block b owns the shard elements [b * kLambTile, (b + 1) * kLambTile) and walks the
// segments that intersect its tile (the first by binary search on the sorted table). Per segment
// piece it does the elementwise work with 8-wide vector accesses (scalar at unaligned ends) and,
// for the norms, reduces the block to one partial. Partials are indexed by tile + segment: the
// (tile, segment) pairs that intersect, taken in order, strictly increase in both coordinates
// together (sorted, disjoint segments), so tile + segment is unique and no prefix table is
// needed. A one-block kernel then sums each segment's partials in tile order. Every reduction
// has a fixed order, so results are bitwise reproducible run to run.
#include <type_traits>

#include "lamb.h"
#include "../common/device.cuh"

namespace bert_kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8;  // elements per vector access (load8 / store8)
constexpr int kFinalizeThreads = 1024;

template <int N>
using Width = std::integral_constant<int, N>;

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// One segment's elements inside one tile.
struct Piece {
  int64_t segment;  // row of the table
  int64_t lo, hi;   // shard elements [lo, hi)
  int64_t param;
  int group;
};

__device__ __forceinline__ const int64_t* row(const LambSegments& s, int64_t i) {
  return s.table + 4 * i;
}

__device__ __forceinline__ int64_t segment_end(const LambSegments& s, int64_t i) {
  return min64(row(s, i)[kSegStart] + row(s, i)[kSegLength], s.size);
}

// A table row whose group is out of range is skipped everywhere: a bad table must not make the
// kernels read or write out of bounds (the Python side builds valid tables).
__device__ __forceinline__ bool valid_group(const LambSegments& s, int64_t i) {
  const int64_t group = row(s, i)[kSegGroup];
  return group >= 0 && group < s.num_groups;
}

// decay[group] with static indices only: a dynamic index into the kernel's argument struct
// would copy the whole struct to local memory.
__device__ __forceinline__ float group_decay(const LambSegments& s, int group) {
  float decay = 0.f;
#pragma unroll
  for (int g = 0; g < kLambMaxGroups; ++g) {
    if (g == group) decay = s.decay[g];
  }
  return decay;
}

// The first segment that ends after shard element `pos` (ends increase with the row).
__device__ int64_t first_segment_ending_after(const LambSegments& s, int64_t pos) {
  int64_t lo = 0, hi = s.count;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (segment_end(s, mid) <= pos) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Calls visit(piece) for every segment inside this block's tile, in table order. Control flow
// is uniform over the block, so visit may synchronize.
template <typename Visit>
__device__ __forceinline__ void for_each_piece(const LambSegments& s, Visit&& visit) {
  const int64_t tile_lo = static_cast<int64_t>(blockIdx.x) * kLambTile;
  const int64_t tile_hi = min64(tile_lo + kLambTile, s.size);
  for (int64_t i = first_segment_ending_after(s, tile_lo); i < s.count; ++i) {
    const int64_t start = row(s, i)[kSegStart];
    if (start >= tile_hi) break;
    if (!valid_group(s, i)) continue;
    visit(Piece{i, max64(start, tile_lo), min64(segment_end(s, i), tile_hi), row(s, i)[kSegParam],
                static_cast<int>(row(s, i)[kSegGroup])});
  }
}

// f(i, Width<8>{}) for every aligned run of 8 elements of [lo, hi) and f(i, Width<1>{}) for the
// unaligned head and tail. Segment starts are multiples of the layout's alignment (128 by
// default), so the scalar path mostly runs at segment ends.
template <typename F>
__device__ __forceinline__ void for_each_element(int64_t lo, int64_t hi, F&& f) {
  const int64_t body_lo = min64(hi, (lo + kVec - 1) / kVec * kVec);
  const int64_t body_hi = max64(body_lo, hi / kVec * kVec);
  for (int64_t i = lo + threadIdx.x; i < body_lo; i += kThreads) f(i, Width<1>{});
  for (int64_t i = body_lo + threadIdx.x * kVec; i < body_hi; i += kThreads * kVec) {
    f(i, Width<kVec>{});
  }
  for (int64_t i = body_hi + threadIdx.x; i < hi; i += kThreads) f(i, Width<1>{});
}

template <typename T>
__device__ __forceinline__ void load(const T* p, float (&v)[kVec]) { load8(p, v); }
template <typename T>
__device__ __forceinline__ void load(const T* p, float (&v)[1]) { v[0] = to_float(*p); }
template <typename T>
__device__ __forceinline__ void store(T* p, const float (&v)[kVec]) { store8(p, v); }
template <typename T>
__device__ __forceinline__ void store(T* p, const float (&v)[1]) { *p = from_float<T>(v[0]); }

// Sums each of the C values over the block; the totals are valid in thread 0. A fixed shuffle
// tree, then the warps in order: deterministic. Every thread of the block must call it.
template <int C>
__device__ __forceinline__ void block_sum(float (&v)[C]) {
  __shared__ float warp_totals[C][kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    v[c] = warp_sum(v[c]);
    if (lane == 0) warp_totals[c][warp] = v[c];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      float total = 0.f;
      for (int w = 0; w < kThreads / 32; ++w) total += warp_totals[c][w];
      v[c] = total;
    }
  }
  __syncthreads();  // the next call reuses warp_totals
}

// (a) Partials of |w|^2 (decay segments) and |g|^2 per (tile, segment): channels 0 and 1.
template <typename G>
__global__ void __launch_bounds__(kThreads) sums_kernel(LambSumsArgs a) {
  const G* grad = static_cast<const G*>(a.grad);
  for_each_piece(a.seg, [&](const Piece& p) {
    const bool decay = group_decay(a.seg, p.group) != 0.f;  // else no trust ratio: no |w|
    float acc[2] = {0.f, 0.f};
    for_each_element(p.lo, p.hi, [&](int64_t i, auto width) {
      constexpr int N = decltype(width)::value;
      float g[N];
      load(grad + i, g);
#pragma unroll
      for (int j = 0; j < N; ++j) acc[1] += g[j] * g[j];
      if (decay) {
        float w[N];
        load(a.master + i, w);
#pragma unroll
        for (int j = 0; j < N; ++j) acc[0] += w[j] * w[j];
      }
    });
    block_sum(acc);
    if (threadIdx.x == 0) {
      float* out = a.partials + 2 * (blockIdx.x + p.segment);
      out[0] = acc[0];
      out[1] = acc[1];
    }
  });
}

// (b) Moments and the update direction, in the reference's operation order
// (bert/optim/shard_update.py: update_direction), plus partials of |u|^2.
template <typename G>
__global__ void __launch_bounds__(kThreads) update_kernel(LambUpdateArgs a) {
  const G* grad = static_cast<const G*>(a.grad);
  const bool ok = a.ok == nullptr || *a.ok;
  // A skipped step keeps the moments bit-identical: zero gradient and beta = 1.
  const float coef = *a.coef;
  const float keep1 = ok ? a.beta1 : 1.f, keep2 = ok ? a.beta2 : 1.f;
  const float bc1 = static_cast<float>(*a.bc1), bc2 = static_cast<float>(*a.bc2);
  for_each_piece(a.seg, [&](const Piece& p) {
    const float decay = group_decay(a.seg, p.group);
    float u_sq[1] = {0.f};  // the finalize keeps it for decay segments only
    for_each_element(p.lo, p.hi, [&](int64_t i, auto width) {
      constexpr int N = decltype(width)::value;
      float g[N], m[N], v[N], w[N];
      load(grad + i, g);
      load(a.exp_avg + i, m);
      load(a.exp_avg_sq + i, v);
      if (decay != 0.f) load(a.master + i, w);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const float gj = ok ? g[j] * coef : 0.f;  // masked, not multiplied: inf * 0 is NaN
        m[j] = m[j] * keep1 + a.one_minus_beta1 * gj;
        v[j] = v[j] * keep2 + a.one_minus_beta2 * gj * gj;
        float u = (m[j] / bc1) / (sqrtf(v[j] / bc2) + a.eps);
        if (decay != 0.f) u += decay * w[j];
        u_sq[0] += u * u;
        g[j] = u;
      }
      store(a.exp_avg + i, m);
      store(a.exp_avg_sq + i, v);
      store(a.update + i, g);
    });
    if (a.partials != nullptr) {
      block_sum(u_sq);
      if (threadIdx.x == 0) a.partials[blockIdx.x + p.segment] = u_sq[0];
    }
  });
}

// (c) w -= lr * ok * ratio * u, and the 16-bit model copy of w (M is unused without one).
template <typename M>
__global__ void __launch_bounds__(kThreads) apply_kernel(LambApplyArgs a) {
  const bool ok = a.ok == nullptr || *a.ok;
  M* model = static_cast<M*>(a.model);
  for_each_piece(a.seg, [&](const Piece& p) {
    // As the reference: lr x ok (0 on a skipped step), then x the trust ratio.
    float step = ok ? a.lrs[p.group] : 0.f;
    if (a.w_sq != nullptr && group_decay(a.seg, p.group) != 0.f && p.param >= 0 &&
        p.param < a.seg.num_params) {
      const float w = sqrtf(a.w_sq[p.param]), u = sqrtf(a.u_sq[p.param]);
      step = (w > 0.f && u > 0.f ? w / u : 1.f) * step;
    }
    for_each_element(p.lo, p.hi, [&](int64_t i, auto width) {
      constexpr int N = decltype(width)::value;
      float w[N], u[N];
      load(a.master + i, w);
      load(a.update + i, u);
#pragma unroll
      for (int j = 0; j < N; ++j) w[j] -= u[j] * step;
      store(a.master + i, w);
      if (model != nullptr) store(model + i, w);
    });
  });
}

struct FinalizeArgs {
  LambSegments seg;
  const float* partials;  // [(tiles + count) x channels]
  int channels;           // 1 or 2
  float* per_param;       // [num_params] += channel 0 of each decay segment
  float* total;           // [1] += channel 1 summed over all segments, or nullptr
};

// One block: each warp sums its segments' partials in tile order (lanes stride over the tiles,
// then a fixed shuffle tree), and the warps' totals are added in warp order.
__global__ void __launch_bounds__(kFinalizeThreads) finalize_kernel(FinalizeArgs a) {
  constexpr int kWarps = kFinalizeThreads / 32;
  __shared__ float warp_totals[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float total = 0.f;  // lane 0's is the one used
  for (int64_t i = warp; i < a.seg.count; i += kWarps) {
    const int64_t lo = max64(row(a.seg, i)[kSegStart], 0), hi = segment_end(a.seg, i);
    if (!valid_group(a.seg, i) || lo >= hi) continue;  // no partial was written
    float v[2] = {0.f, 0.f};
    for (int64_t t = lo / kLambTile + lane; t <= (hi - 1) / kLambTile; t += 32) {
      const float* partial = a.partials + (t + i) * a.channels;
      v[0] += partial[0];
      if (a.channels == 2) v[1] += partial[1];
    }
    v[0] = warp_sum(v[0]);
    v[1] = warp_sum(v[1]);
    const int64_t param = row(a.seg, i)[kSegParam];
    const bool decay = group_decay(a.seg, static_cast<int>(row(a.seg, i)[kSegGroup])) != 0.f;
    if (lane == 0 && decay && param >= 0 && param < a.seg.num_params) a.per_param[param] += v[0];
    total += v[1];
  }
  if (lane == 0) warp_totals[warp] = total;
  __syncthreads();
  if (threadIdx.x == 0 && a.total != nullptr) {
    float sum = 0.f;
    for (int w = 0; w < kWarps; ++w) sum += warp_totals[w];
    *a.total += sum;
  }
}

unsigned num_tiles(const LambSegments& s) {
  return static_cast<unsigned>((s.size + kLambTile - 1) / kLambTile);
}

// Calls launch(static_cast<T*>(nullptr)) with the C++ type T of `dtype`.
template <typename Launch>
cudaError_t dispatch(DType dtype, Launch&& launch) {
  switch (dtype) {
    case DType::kFloat32: launch(static_cast<float*>(nullptr)); break;
    case DType::kFloat16: launch(static_cast<__half*>(nullptr)); break;
    case DType::kBFloat16: launch(static_cast<__nv_bfloat16*>(nullptr)); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t finalize(const LambSegments& seg, const float* partials, int channels,
                     float* per_param, float* total, cudaStream_t stream) {
  finalize_kernel<<<1, kFinalizeThreads, 0, stream>>>(
      FinalizeArgs{seg, partials, channels, per_param, total});
  return cudaGetLastError();
}

}  // namespace

cudaError_t lamb_sums(const LambSumsArgs& a, cudaStream_t stream) {
  if (a.seg.count == 0 || a.seg.size == 0) return cudaSuccess;
  const cudaError_t err = dispatch(a.grad_dtype, [&](auto* tag) {
    using G = std::remove_pointer_t<decltype(tag)>;
    sums_kernel<G><<<num_tiles(a.seg), kThreads, 0, stream>>>(a);
  });
  if (err != cudaSuccess) return err;
  return finalize(a.seg, a.partials, 2, a.sums + 1, a.sums, stream);
}

cudaError_t lamb_update(const LambUpdateArgs& a, cudaStream_t stream) {
  if (a.seg.count == 0 || a.seg.size == 0) return cudaSuccess;
  const cudaError_t err = dispatch(a.grad_dtype, [&](auto* tag) {
    using G = std::remove_pointer_t<decltype(tag)>;
    update_kernel<G><<<num_tiles(a.seg), kThreads, 0, stream>>>(a);
  });
  if (err != cudaSuccess || a.partials == nullptr) return err;
  return finalize(a.seg, a.partials, 1, a.update_sq, nullptr, stream);
}

cudaError_t lamb_apply(const LambApplyArgs& a, cudaStream_t stream) {
  if (a.seg.count == 0 || a.seg.size == 0) return cudaSuccess;
  // 16-bit model copies only; without one the type parameter is unused.
  if (a.model != nullptr && a.model_dtype == DType::kBFloat16) {
    apply_kernel<__nv_bfloat16><<<num_tiles(a.seg), kThreads, 0, stream>>>(a);
  } else if (a.model == nullptr || a.model_dtype == DType::kFloat16) {
    apply_kernel<__half><<<num_tiles(a.seg), kThreads, 0, stream>>>(a);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace bert_kernels
