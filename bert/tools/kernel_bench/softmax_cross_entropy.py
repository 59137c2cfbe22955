"""Fused MLM softmax cross-entropy (gradient in the forward) vs F.cross_entropy on fp32 logits.

    python scripts/bench/bench_softmax_cross_entropy.py [--rows 1024 4096] [--no-compile]

Logits [masked tokens, 30528] in fp16/bf16 with the real vocabulary 30522; the PyTorch side is
bert/model/modeling.py's `F.cross_entropy(logits[:, :30522].float(), labels)`, eager and (unless
--no-compile) under torch.compile. Times loss forward plus backward to the logits.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from bert.tools.kernel_bench import common
from kernels.softmax_cross_entropy import softmax_cross_entropy

VOCAB, PADDED = 30522, 30528


def composition(logits, labels):
    return F.cross_entropy(logits[:, :VOCAB].float(), labels)


def fused(logits, labels):
    return softmax_cross_entropy(logits, labels, VOCAB)


def loss_and_grad(fn, logits, labels):
    return torch.autograd.grad(fn(logits, labels), logits)


def main() -> None:
    args = common.parser(__doc__, [1024, 2048, 4096], "rows").parse_args()
    common.require_cuda_and_kernels("softmax_cross_entropy")
    compiled = None if args.no_compile else torch.compile(composition)
    rows = []
    for dtype_name in args.dtype:
        dtype = common.DTYPES[dtype_name]
        for n in args.rows:
            logits = (3 * torch.randn(n, PADDED, device="cuda")).to(dtype).requires_grad_()
            labels = torch.randint(0, VOCAB, (n,), device="cuda")
            impls = {"torch_eager": composition, "fused": fused}
            if compiled is not None:
                impls["torch_compile"] = compiled
            row = {"dtype": dtype_name, "rows": n}
            for name, fn in impls.items():
                step = functools.partial(loss_and_grad, fn, logits, labels)
                row[f"{name}_ms"] = common.time_ms(step, args.warmup, args.iters)
            # Minimum traffic: read logits twice (two passes), write the gradient, then read and
            # write it once more in the backward scaling.
            row["fused_gbps"] = 5 * logits.numel() * logits.element_size() / row["fused_ms"] / 1e6
            common.report(row)
            rows.append(row)
    print(f"wrote {common.write('bench_softmax_cross_entropy', args.out, rows)}")
