// Host build of the kernel's dropout-mask function (kernels/csrc/.../dropout_mask.h), so a CPU
// test can compare it bit for bit with kernels/reference.py. Prints one mask word per line for
// rows [0, rows) and lanes 0..31. Usage: bdrln_mask_host SEED OFFSET ROWS THRESHOLD
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "bias_dropout_residual_layernorm/dropout_mask.h"

int main(int argc, char** argv) {
  if (argc != 5) return 2;
  const uint64_t seed = std::strtoull(argv[1], nullptr, 10);
  const uint64_t offset = std::strtoull(argv[2], nullptr, 10);
  const uint64_t rows = std::strtoull(argv[3], nullptr, 10);
  const uint32_t threshold = static_cast<uint32_t>(std::strtoul(argv[4], nullptr, 10));
  for (uint64_t row = 0; row < rows; ++row)
    for (int lane = 0; lane < 32; ++lane)
      std::printf("%u\n", bert_kernels::bdrln_mask_word(seed, offset, row, lane, threshold));
  return 0;
}
