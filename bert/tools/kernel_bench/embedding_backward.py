"""Packed-atomic word-embedding gradient vs PyTorch's sort-based embedding backward.

    python scripts/bench/bench_embedding_backward.py [--tokens 4096 16384 65536]

Word-frequency-like (Zipf) token ids over BERT's padded 30528-row vocabulary, hidden 1024. Times
the weight-gradient computation only, zero-fill of the output included on both sides:
aten.embedding_dense_backward vs the kernel with 16-bit packed atomics and with fp32 atomics.
"""

from __future__ import annotations

import functools

import torch

from bert.tools.kernel_bench import common
from kernels.embedding_backward import embedding_backward

H, VOCAB = 1024, 30528


def main() -> None:
    args = common.parser(__doc__, [4096, 16384, 65536], "tokens").parse_args()
    common.require_cuda_and_kernels("embedding_backward")
    weights = 1.0 / torch.arange(1, VOCAB + 1, dtype=torch.float64)
    rows = []
    for dtype_name in args.dtype:
        dtype = common.DTYPES[dtype_name]
        for tokens in args.tokens:
            indices = torch.multinomial(weights, tokens, replacement=True).cuda()
            grad = torch.randn(tokens, H, device="cuda", dtype=dtype)
            impls = {
                "torch_eager": (torch.ops.aten.embedding_dense_backward, (-1, False)),
                "fused": (embedding_backward, (dtype,)),
                "fused_fp32_accumulate": (embedding_backward, (torch.float32,)),
            }
            row = {
                "dtype": dtype_name,
                "tokens": tokens,
                "distinct_ids": int(indices.unique().numel()),
            }
            for name, (fn, extra) in impls.items():
                call = functools.partial(fn, grad, indices, VOCAB, *extra)
                row[f"{name}_ms"] = common.time_ms(call, args.warmup, args.iters)
            common.report(row)
            rows.append(row)
    print(f"wrote {common.write('bench_embedding_backward', args.out, rows)}")
