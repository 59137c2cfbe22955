"""cuBLASLt-epilogue dense layers (kernels/dense.py) vs the PyTorch compositions they replace.

    python scripts/bench/bench_dense.py [--tokens 4096 16384] [--no-compile]

BERT-Large shapes on [tokens, 1024], fp16/bf16, all parameters in the activation dtype:
- qkv: linear_bias 1024 -> 3072 (BIAS; backward BGRADB, residual gradient in the dgrad GEMM)
  vs F.linear;
- ffn: linear_gelu_linear 1024 -> 4096 -> 1024, second bias left to the LayerNorm op as in the
  fused model (GELU_AUX_BIAS; backward BGRADB, DGELU_BGRAD, residual gradient in the dgrad GEMM)
  vs F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2);
- transform: linear_bias_gelu 1024 -> 1024 (the MLM head's transform) vs F.gelu(F.linear(...)).
Each function's output y feeds `x + y`, so the unfused backward must add the residual's
gradient to x's (autograd accumulation) while the fused one adds it inside the GEMM. Eager
PyTorch, the fused op and (unless --no-compile) the composition under torch.compile are timed
in one process: "fwd" is the forward, "fwd_bwd" the forward plus the gradients of every input.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bert.tools.kernel_bench import common
from kernels.dense import linear_bias, linear_bias_gelu, linear_gelu_linear

H, FFN = 1024, 4096


def torch_qkv(x, w, b):
    return x + F.linear(x, w, b)[:, :H]


def fused_qkv(x, w, b):
    y, residual = linear_bias(x, w, b, return_residual=True)
    return residual + y[:, :H]


def torch_ffn(x, w1, b1, w2):
    return x + F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2)


def fused_ffn(x, w1, b1, w2):
    y, residual = linear_gelu_linear(x, w1, b1, w2, None, return_residual=True)
    return residual + y


def torch_transform(x, w, b):
    return F.gelu(F.linear(x, w, b), approximate="tanh")


def fused_transform(x, w, b):
    return linear_bias_gelu(x, w, b)


CASES = {  # name: (fused, composition, parameter shapes)
    "qkv": (fused_qkv, torch_qkv, [(3 * H, H), (3 * H,)]),
    "ffn": (fused_ffn, torch_ffn, [(FFN, H), (FFN,), (H, FFN)]),
    "transform": (fused_transform, torch_transform, [(H, H), (H,)]),
}


def flops(case: str, tokens: int) -> int:
    """GEMM flops of the forward (the backward does twice as many)."""
    per_token = {"qkv": H * 3 * H, "ffn": 2 * H * FFN, "transform": H * H}[case]
    return 2 * tokens * per_token


def timings(case: str, tokens: int, dtype: torch.dtype, compiled, warmup: int, iters: int):
    fused, composition, shapes = CASES[case]
    x = torch.randn(tokens, H, device="cuda", dtype=dtype, requires_grad=True)
    params = [(torch.randn(s, device="cuda") / H**0.5).to(dtype).requires_grad_() for s in shapes]
    inputs = (x, *params)
    dy = torch.randn(tokens, H, device="cuda", dtype=dtype)
    impls = {"fused": fused, "torch_eager": composition}
    if compiled is not None:
        impls["torch_compile"] = compiled[case]
    times: dict[str, dict[str, float]] = {"fwd": {}, "fwd_bwd": {}}
    for name, fn in impls.items():
        times["fwd"][f"{name}_ms"] = common.time_ms(lambda fn=fn: fn(*inputs), warmup, iters)
        times["fwd_bwd"][f"{name}_ms"] = common.time_ms(
            lambda fn=fn: torch.autograd.grad(fn(*inputs), inputs, dy), warmup, iters
        )
    return times


def main() -> None:
    args = common.parser(__doc__, [4096, 16384], "tokens").parse_args()
    common.require_cuda_and_kernels("dense")
    compiled = (
        None
        if args.no_compile
        else {case: torch.compile(composition) for case, (_, composition, _) in CASES.items()}
    )
    rows = []
    for dtype_name in args.dtype:
        dtype = common.DTYPES[dtype_name]
        for tokens in args.tokens:
            for case in CASES:
                times = timings(case, tokens, dtype, compiled, args.warmup, args.iters)
                for phase, factor in (("fwd", 1), ("fwd_bwd", 3)):
                    row = {
                        "dtype": dtype_name,
                        "tokens": tokens,
                        "case": case,
                        "phase": phase,
                        **times[phase],
                        "fused_tflops": round(
                            factor * flops(case, tokens) / times[phase]["fused_ms"] / 1e9, 1
                        ),
                    }
                    common.report(row)
                    rows.append(row)
    print(f"wrote {common.write('bench_dense', args.out, rows)}")
