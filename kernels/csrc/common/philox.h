// Stateless Philox4x32-10 (Salmon et al., SC'11), usable from host and device code. Kept free of
// CUDA-only headers so a plain C++ compiler can check it on a machine without a GPU
// (tests/kernels/test_bias_dropout_residual_layernorm.py does).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define BERT_KERNELS_HD __host__ __device__ __forceinline__
#define BERT_KERNELS_UNROLL _Pragma("unroll")
#else
#define BERT_KERNELS_HD inline
#define BERT_KERNELS_UNROLL
#endif

namespace bert_kernels {

struct Philox4 { uint32_t x, y, z, w; };

BERT_KERNELS_HD uint32_t mulhi32(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

BERT_KERNELS_HD Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  BERT_KERNELS_UNROLL
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = mulhi32(kM0, c.x), lo0 = kM0 * c.x;
    const uint32_t hi1 = mulhi32(kM1, c.z), lo1 = kM1 * c.z;
    c = Philox4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// Draw `block` (0, 1, ...) of subsequence `subseq`: the 128-bit counter is
// (offset / 4 + block, subseq), the key is the seed. This is curand's Philox layout, so the
// offsets torch's generator reserves for one call never overlap those of other kernels.
BERT_KERNELS_HD Philox4 philox_draw(uint64_t seed, uint64_t offset, uint64_t subseq,
                                    uint32_t block) {
  const uint64_t lo = offset / 4 + block;
  return philox4x32_10(
      Philox4{static_cast<uint32_t>(lo), static_cast<uint32_t>(lo >> 32),
              static_cast<uint32_t>(subseq), static_cast<uint32_t>(subseq >> 32)},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

}  // namespace bert_kernels
