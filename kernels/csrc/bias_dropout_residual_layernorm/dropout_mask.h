// The dropout keep bits of bias_dropout_residual_layernorm, shared by the kernel and the host
// check in tests/kernels (plain C++ when not compiled by nvcc).
#pragma once

#include <cstdint>

#include "../common/philox.h"

namespace bert_kernels {

// Keep bits of the 32 columns lane `lane` (0..31) of a 1024-wide row owns: bit c * 8 + j is
// column (c * 32 + lane) * 8 + j. That column's draw is Philox subsequence row * 128 + col / 8,
// block (col % 8) / 4, word (col % 8) % 4; it is kept when draw >= threshold = floor(p * 2^32).
BERT_KERNELS_HD uint32_t bdrln_mask_word(uint64_t seed, uint64_t offset, uint64_t row, int lane,
                                         uint32_t threshold) {
  uint32_t bits = 0;
  BERT_KERNELS_UNROLL
  for (int c = 0; c < 4; ++c) {
    const uint64_t subseq = row * 128 + static_cast<uint64_t>(c * 32 + lane);
    const Philox4 r0 = philox_draw(seed, offset, subseq, 0);
    const Philox4 r1 = philox_draw(seed, offset, subseq, 1);
    const uint32_t draws[8] = {r0.x, r0.y, r0.z, r0.w, r1.x, r1.y, r1.z, r1.w};
    BERT_KERNELS_UNROLL
    for (int j = 0; j < 8; ++j) bits |= static_cast<uint32_t>(draws[j] >= threshold) << (c * 8 + j);
  }
  return bits;
}

}  // namespace bert_kernels
