// y = LayerNorm(residual + dropout(x + bias)) over hidden 1024: launchers called by the bindings.
#pragma once

#include "../common/types.h"

namespace bert_kernels {

// Philox draws reserved per subsequence (one subsequence = 8 consecutive columns of one row).
constexpr uint64_t kBdrlnPhiloxIncrement = 8;
// Dropout mask: one 32-bit word per (row, lane of the row's warp), see the .cu for the layout.
constexpr int kBdrlnMaskWords = kHidden / 32;

struct BdrlnForwardArgs {
  const void* x;         // [rows, 1024] act
  const void* bias;      // [1024] param
  const void* residual;  // [rows, 1024] act
  const void* gamma;     // [1024] param
  const void* beta;      // [1024] param
  void* y;               // [rows, 1024] act
  void* z;               // [rows, 1024] act: residual + dropout(x + bias), saved for backward
  float* mean;           // [rows]
  float* rstd;           // [rows]
  uint32_t* mask;        // [rows, 32]
  int64_t rows;
  uint32_t drop_threshold;  // drop where the 32-bit draw < threshold = floor(p * 2^32)
  float scale;              // 1 / (1 - p)
  float eps;
  PhiloxArgs philox;
  DType act, param;
};

struct BdrlnBackwardArgs {
  const void* dy;      // [rows, 1024] act
  const void* z;       // [rows, 1024] act
  const float* mean;   // [rows]
  const float* rstd;   // [rows]
  const uint32_t* mask;  // [rows, 32]
  const void* gamma;   // [1024] param
  void* dx;            // [rows, 1024] act: grad of x (and, summed over rows, of bias)
  void* dresidual;     // [rows, 1024] act
  float* partial;      // [3, blocks, 1024] fp32 workspace
  void* dgamma;        // [1024] param
  void* dbeta;         // [1024] param
  void* dbias;         // [1024] param
  int64_t rows;
  int blocks;          // grid size of the first kernel; rows per block are strided by it
  float scale;
  DType act, param;
};

// Number of blocks the backward's first kernel uses (and rows of `partial`).
int bdrln_backward_blocks(int64_t rows, int sm_count);

cudaError_t bdrln_forward(const BdrlnForwardArgs& args, cudaStream_t stream);
cudaError_t bdrln_backward(const BdrlnBackwardArgs& args, cudaStream_t stream);

}  // namespace bert_kernels
