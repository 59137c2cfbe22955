"""Fused bias + dropout + residual + LayerNorm vs the PyTorch composition, forward and backward.

    python scripts/bench/bench_bias_dropout_residual_layernorm.py [--tokens 4096] [--no-compile]

Compared in one process on [tokens, 1024]: the kernel (fp32 parameters, as in mixed precision),
eager PyTorch (F.layer_norm(residual + F.dropout(x + bias)) with parameters in the activation
dtype, as a pure fp16/bf16 model runs it) and, unless --no-compile, the same composition under
torch.compile. "fwd" times the forward; "fwd_bwd" forward plus backward of all five inputs.
Effective bandwidth counts the bytes each pass must touch at least.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bert.tools.kernel_bench import common
from kernels.bias_dropout_residual_layernorm import bias_dropout_residual_layernorm

H, P, EPS = 1024, 0.1, 1e-12


def composition(x, bias, residual, weight, ln_bias):
    z = residual + F.dropout(x + bias, P, training=True)
    return F.layer_norm(z, (H,), weight, ln_bias, EPS)


def fused(x, bias, residual, weight, ln_bias):
    return bias_dropout_residual_layernorm(x, bias, residual, weight, ln_bias, p=P, eps=EPS)


def cases(tokens: int, dtype: torch.dtype, compiled):
    act = [torch.randn(tokens, H, device="cuda", dtype=dtype, requires_grad=True) for _ in range(2)]
    params32 = [torch.randn(H, device="cuda", requires_grad=True) for _ in range(3)]
    params_low = [p.detach().to(dtype).requires_grad_() for p in params32]
    fused_in = (act[0], params32[0], act[1], params32[1], params32[2])
    torch_in = (act[0], params_low[0], act[1], params_low[1], params_low[2])
    dy = torch.randn(tokens, H, device="cuda", dtype=dtype)
    impls = {"fused": (fused, fused_in), "torch_eager": (composition, torch_in)}
    if compiled is not None:
        impls["torch_compile"] = (compiled, torch_in)
    for name, (fn, inputs) in impls.items():
        yield name, "fwd", lambda fn=fn, inputs=inputs: fn(*inputs)
        yield (
            name,
            "fwd_bwd",
            lambda fn=fn, inputs=inputs: torch.autograd.grad(fn(*inputs), inputs, dy),
        )


def main() -> None:
    args = common.parser(__doc__, [4096, 16384, 32768], "tokens").parse_args()
    common.require_cuda_and_kernels("bias_dropout_residual_layernorm")
    compiled = None if args.no_compile else torch.compile(composition)
    rows = []
    for dtype_name in args.dtype:
        dtype = common.DTYPES[dtype_name]
        for tokens in args.tokens:
            times: dict[str, dict[str, float]] = {"fwd": {}, "fwd_bwd": {}}
            for impl, phase, fn in cases(tokens, dtype, compiled):
                times[phase][f"{impl}_ms"] = common.time_ms(fn, args.warmup, args.iters)
            # Minimum traffic (bytes): fwd reads x, residual, writes y, z; bwd reads dy, z,
            # writes dx, dresidual (masks, statistics and parameters are negligible).
            act_bytes = tokens * H * torch.finfo(dtype).bits // 8
            for phase, n in (("fwd", 4), ("fwd_bwd", 8)):
                row = {
                    "dtype": dtype_name,
                    "tokens": tokens,
                    "phase": phase,
                    **times[phase],
                    "fused_gbps": n * act_bytes / times[phase]["fused_ms"] / 1e6,
                }
                common.report(row)
                rows.append(row)
    print(f"wrote {common.write('bench_bias_dropout_residual_layernorm', args.out, rows)}")
