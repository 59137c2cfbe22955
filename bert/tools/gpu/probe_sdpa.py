"""Which SDPA kernels compute masked attention correctly on this device: the yardstick's probe.

    python scripts/bench/probe_sdpa.py --out sdpa_probe.json            # the GPU window's step
    python scripts/bench/probe_sdpa.py --device cpu --out probe.json     # the same checks on CPU

padded_sdpa (bert/model/attention.py) is the reference every attention and fused-model test and
the throughput bench compare against, so it must be right on the device before anything that
uses it means something. For BERT-Large's head shape (16 heads of 64) with a boolean key-padding
mask, in fp16 and bf16, at a longest length of 448 (64 mod 128, where cuDNN's masked backward
is reported to return NaN, pytorch/pytorch issue 196678) and 512 (MLPerf's maximum), every SDPA
kernel that accepts the call (math, memory-efficient, cuDNN, flash) is run alone and compared
with an fp64 math reference: output and the q/k/v gradients. A kernel passes when everything is
finite and within 2x the low-precision math kernel's own error plus one rounding of the largest
value (the dtype's machine epsilon times the magnitude: kernels that accumulate in fp32 round
once at the end where the math kernel rounds along the way, so their worst element can differ
by that much; a wrong mask or a NaN is off by orders of magnitude more). Then the kernels
padded_sdpa pins (PADDED_SDPA_CUDA_BACKENDS) are run the way it runs them, and the record says
which kernel the pin lands on and whether it passed.
The JSON is rewritten after every case, so a killed probe keeps what it finished.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bert.model import attention
from bert.tools.common import git_commit, write_json

KERNELS = {
    "math": SDPBackend.MATH,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
}
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
HEADS, HEAD_DIM = 16, 64  # BERT-Large


def lengths_for(longest: int, batch: int) -> list[int]:
    """A mixed batch: the longest, short, odd and mid lengths (every sequence >= 1 key)."""
    pattern = [longest, 1, 63, 130, longest - 64, 257, 200, 5]
    return [max(1, n) for n in (pattern * batch)[:batch]]


def make_case(longest: int, batch: int, device: torch.device, seed: int = 0):
    """fp64 q, k, v (B, h, S, d), the upstream gradient and the (B, 1, 1, S) key mask."""
    gen = torch.Generator().manual_seed(seed)
    shape = (batch, HEADS, longest, HEAD_DIM)
    tensors = [torch.randn(shape, generator=gen, dtype=torch.float64) for _ in range(4)]
    lengths = torch.tensor(lengths_for(longest, batch))
    mask = torch.arange(longest)[None, :] < lengths[:, None]
    return [t.to(device) for t in tensors], mask[:, None, None, :].to(device)


def forward_backward(q, k, v, upstream, mask, dtype, kernels=None):
    """SDPA output and q/k/v gradients in `dtype`, with only `kernels` allowed (None: as given)."""
    inputs = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    if kernels is None:
        out = attention.masked_sdpa(*inputs, mask, 0.0)
    else:
        with sdpa_kernel(kernels):
            out = F.scaled_dot_product_attention(*inputs, attn_mask=mask)
    grads = torch.autograd.grad(out, inputs, upstream.to(dtype))
    return [out, *grads]


def max_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b).abs().max().item()


def judge(results, math_lp, oracle) -> dict:
    """Per tensor: error, bound, finite; and the verdict."""
    rows, ok = {}, True
    eps = torch.finfo(results[0].dtype).eps
    for name, got, base, ref in zip(("out", "dq", "dk", "dv"), results, math_lp, oracle):
        bound = 2 * max_error(base, ref) + eps * max(1.0, ref.abs().max().item())
        finite = bool(torch.isfinite(got).all())
        error = max_error(got, ref) if finite else float("inf")
        rows[name] = {"max_error": error, "bound": bound, "finite": finite}
        ok = ok and finite and error <= bound
    return {"passed": ok, "tensors": rows}


def probe_case(longest: int, batch: int, dtype_name: str, device: torch.device) -> dict:
    (q, k, v, upstream), mask = make_case(longest, batch, device)
    oracle = forward_backward(q, k, v, upstream, mask, torch.float64, [SDPBackend.MATH])
    dtype = DTYPES[dtype_name]
    math_lp = forward_backward(q, k, v, upstream, mask, dtype, [SDPBackend.MATH])
    case = {"longest": longest, "batch": batch, "dtype": dtype_name, "kernels": {}}
    for name, kernel in KERNELS.items():
        try:
            results = forward_backward(q, k, v, upstream, mask, dtype, [kernel])
        except RuntimeError as err:  # "No available kernel": this kernel refuses the call
            case["kernels"][name] = {"accepted": False, "reason": str(err).splitlines()[0][:300]}
            continue
        case["kernels"][name] = {"accepted": True, **judge(results, math_lp, oracle)}
    pinned = forward_backward(q, k, v, upstream, mask, dtype)
    case["padded_sdpa"] = judge(pinned, math_lp, oracle)
    return case


def pinned_kernel(cases: list[dict]) -> dict:
    """The first kernel of the pin's priority list that accepted every case: the one the pin
    lands on, and whether it passed everywhere."""
    names = {kernel: name for name, kernel in KERNELS.items()}
    order = [names[k] for k in attention.PADDED_SDPA_CUDA_BACKENDS]
    for name in order:
        verdicts = [c["kernels"][name] for c in cases]
        if all(v["accepted"] for v in verdicts):
            return {
                "priority": order,
                "lands_on": name,
                "correct": all(v["passed"] for v in verdicts),
            }
    return {"priority": order, "lands_on": None, "correct": False}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--longest", default="448,512", help="longest lengths, comma-separated")
    p.add_argument("--batch", type=int, default=8)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    record = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "command": " ".join(["probe_sdpa.py", *(argv or sys.argv[1:])]),
        "heads": HEADS,
        "head_dim": HEAD_DIM,
        "cases": [],
    }
    for longest in (int(n) for n in args.longest.split(",")):
        for dtype_name in DTYPES:
            record["cases"].append(probe_case(longest, args.batch, dtype_name, device))
            write_json(args.out, record)
    record["pin"] = (
        pinned_kernel(record["cases"])
        if device.type == "cuda"
        else {
            "applies": False,
            "note": "the pin is CUDA's; on the CPU padded_sdpa takes PyTorch's choice",
        }
    )
    record["padded_sdpa_correct"] = all(c["padded_sdpa"]["passed"] for c in record["cases"])
    write_json(args.out, record)
    for case in record["cases"]:
        verdicts = ", ".join(
            f"{n} {'-' if not v['accepted'] else 'ok' if v['passed'] else 'WRONG'}"
            for n, v in case["kernels"].items()
        )
        print(
            f"S={case['longest']} {case['dtype']}: {verdicts}; padded_sdpa "
            f"{'ok' if case['padded_sdpa']['passed'] else 'WRONG'}"
        )
    print(f"pin {record['pin']}; wrote {args.out}")
    return 0 if record["padded_sdpa_correct"] else 1
