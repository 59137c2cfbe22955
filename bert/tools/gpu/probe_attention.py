"""Every varlen attention path torch offers without new packages, timed and checked on the packed
BERT-Large shapes: the GPU window's attention probe.

    python scripts/bench/probe_attention.py --out attention_probe.json        # the window's step
    python scripts/bench/probe_attention.py --device cpu --batch 4 --max-length 64 --out p.json

The paths (PATHS), each on the same packed tokens (T, heads, head_dim):

    flash_varlen, grouped_flash, padded_sdpa, per_sequence
                     the model's backends, called as the model calls them (attention_backends)
    varlen_attn      torch.nn.attention.varlen.varlen_attn, the public flash varlen (no dropout)
    efficient_varlen the memory-efficient kernel's own varlen entry (cu_seqlens, no padding)
    njt_flash, njt_efficient, njt_cudnn, njt_math
                     SDPA on a jagged nested tensor over the packed tokens, one kernel allowed

One batch of the throughput bench's workload (the MLPerf length mix; on CUDA BERT-Large's
batch of 56, 16 heads of 64), in each dtype. Each path runs forward and backward once against
an fp64 yardstick (every sequence's attention in fp64 math) and passes when every tensor (the
output and the q/k/v gradients) is finite and within probe_sdpa.py's bound: twice the
low-precision math kernel's own error plus one rounding of the largest value. Then it is
timed, median of `--iters` runs: forward alone, forward and backward, and forward and backward
at the model's attention dropout (`train_ms`, for the paths that take dropout). A path that
has no kernel for the device or dtype is recorded unavailable with the error's first line.
The JSON is rewritten after every case, so a killed probe keeps what it finished.

`pick` (bert/model/attention_backends.py) reads such records: the fastest passing backend on a
device; `picked` below asks the committed windows.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bert.model.attention_backends import pick, resolve
from bert.tools.common import git_commit, write_json
from bert.tools.gpu.probe_sdpa import DTYPES, HEAD_DIM, HEADS, judge
from bert.tools.gpu.report import attention_verdicts
from bert.tools.throughput.workload import make_samples
from data.packing import pack_samples

DROPOUT = 0.1  # the model's attention dropout (model.attention_probs_dropout_prob)


@dataclass(frozen=True)
class Packed:
    """The probe's batch: the model's PackedBatch, the same offsets as int64 for nested
    tensors, and the host lengths (no path reads anything back from the device)."""

    batch: object  # data.packing.PackedBatch on the device
    offsets: torch.Tensor  # (B+1,) int64
    lengths: list[int]


# (q, k, v (T, heads, head_dim), packed, dropout_p) -> (T, heads, head_dim)
Run = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Packed, float], torch.Tensor]


@dataclass(frozen=True)
class AttentionPath:
    name: str
    run: Run
    backend: str | None = None  # the model.attention name it is, for pick
    dropout: bool = True  # takes a dropout probability


def backend_path(name: str) -> AttentionPath:
    def run(q, k, v, packed: Packed, dropout_p: float):
        return resolve(name).attend(q, k, v, packed.batch, dropout_p)

    return AttentionPath(name, run, backend=name)


def _varlen_attn(q, k, v, packed: Packed, dropout_p: float):
    from torch.nn.attention.varlen import varlen_attn

    cu, longest = packed.batch.cu_seqlens, max(packed.lengths)
    return varlen_attn(q, k, v, cu, cu, longest, longest)


def _efficient_varlen(q, k, v, packed: Packed, dropout_p: float):
    # (1, T, heads, head_dim) with cu_seqlens: the kernel's varlen mode, nothing padded; the
    # log-sum-exp kept for the backward (custom_mask_type 0: no mask)
    cu, longest = packed.batch.cu_seqlens, max(packed.lengths)
    out = torch.ops.aten._efficient_attention_forward(
        q[None], k[None], v[None], None, cu, cu, longest, longest, dropout_p, 0, True
    )[0]
    return out[0]


def njt_path(name: str, kernel: SDPBackend) -> AttentionPath:
    def run(q, k, v, packed: Packed, dropout_p: float):
        def nest(t):  # (T, h, d) -> (B, h, jagged, d), a view; the length hints avoid a read
            return torch.nested.nested_tensor_from_jagged(
                t, packed.offsets, min_seqlen=min(packed.lengths), max_seqlen=max(packed.lengths)
            ).transpose(1, 2)

        with sdpa_kernel([kernel]):
            out = F.scaled_dot_product_attention(nest(q), nest(k), nest(v), dropout_p=dropout_p)
        return out.transpose(1, 2).values()

    return AttentionPath(name, run)


PATHS = (
    backend_path("flash_varlen"),
    backend_path("grouped_flash"),
    backend_path("padded_sdpa"),
    backend_path("per_sequence"),
    AttentionPath("varlen_attn", _varlen_attn, dropout=False),
    AttentionPath("efficient_varlen", _efficient_varlen),
    njt_path("njt_flash", SDPBackend.FLASH_ATTENTION),
    njt_path("njt_efficient", SDPBackend.EFFICIENT_ATTENTION),
    njt_path("njt_cudnn", SDPBackend.CUDNN_ATTENTION),
    njt_path("njt_math", SDPBackend.MATH),
)


# ---- the yardstick ---------------------------------------------------------------------------
def per_sequence_math(q, k, v, upstream, lengths: list[int], kernel: SDPBackend | None):
    """Each sequence's attention alone, output and q/k/v gradients: explicit math (kernel None,
    the fp64 yardstick) or SDPA with one kernel (the low-precision math baseline)."""
    inputs = [t.detach().requires_grad_() for t in (q, k, v)]
    outs = []
    for qi, ki, vi in zip(*(t.split(lengths) for t in inputs)):
        qi, ki, vi = (t.transpose(0, 1) for t in (qi, ki, vi))  # (h, l, d)
        if kernel is None:
            probs = torch.softmax(qi @ ki.transpose(1, 2) * qi.shape[-1] ** -0.5, dim=-1)
            outs.append((probs @ vi).transpose(0, 1))
        else:
            with sdpa_kernel([kernel]):
                outs.append(F.scaled_dot_product_attention(qi, ki, vi).transpose(0, 1))
    out = torch.cat(outs)
    return [out.detach(), *torch.autograd.grad(out, inputs, upstream)]


def forward_backward(
    path: AttentionPath, q, k, v, upstream, packed: Packed, dropout_p: float = 0.0
):
    inputs = [t.detach().requires_grad_() for t in (q, k, v)]
    out = path.run(*inputs, packed, dropout_p)
    return [out.detach(), *torch.autograd.grad(out, inputs, upstream)]


# ---- timing ----------------------------------------------------------------------------------
def median_ms(fn: Callable[[], object], device: torch.device, iters: int, warmup: int = 2):
    """The median of `iters` runs of fn in milliseconds (CUDA events on a GPU)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            began = time.perf_counter()
            fn()
            times.append(1000 * (time.perf_counter() - began))
    return statistics.median(times)


def timings(
    path: AttentionPath, q, k, v, upstream, packed: Packed, iters: int, flops: float
) -> dict:
    """forward_ms, forward_backward_ms and (with dropout) train_ms, with their TFLOP/s on the
    useful attention FLOPs (bench_throughput's count: 4*h*d*sum(l^2) forward, 3x that with
    the backward)."""
    device = q.device

    def forward():
        with torch.no_grad():
            path.run(q, k, v, packed, 0.0)

    out = {"forward_ms": median_ms(forward, device, iters)}
    out["forward_backward_ms"] = median_ms(
        lambda: forward_backward(path, q, k, v, upstream, packed), device, iters
    )
    if path.dropout:
        out["train_ms"] = median_ms(
            lambda: forward_backward(path, q, k, v, upstream, packed, DROPOUT), device, iters
        )
    out["forward_tflops"] = flops / out["forward_ms"] / 1e9
    out["forward_backward_tflops"] = 3 * flops / out["forward_backward_ms"] / 1e9
    return out


# ---- the probe -------------------------------------------------------------------------------
def make_packed(batch: int, max_length: int, seed: int, device: torch.device) -> Packed:
    samples = make_samples(1, batch, seed, max_length)[0]
    packed = pack_samples(samples, attention_groups=True).to(device)
    lengths = [int(s.input_ids.shape[0]) for s in samples]
    return Packed(packed, packed.cu_seqlens.to(torch.int64), lengths)


def probe_case(
    path: AttentionPath, dtype_name: str, tensors, baselines, packed: Packed, iters: int
):
    """One path in one dtype: available or why not, the check, and (if available) the times."""
    q, k, v, upstream = (t.to(DTYPES[dtype_name]) for t in tensors)
    case = {"path": path.name, "backend": path.backend, "dtype": dtype_name}
    case["dropout"] = path.dropout
    try:
        results = forward_backward(path, q, k, v, upstream, packed)
    except (RuntimeError, NotImplementedError, ValueError, ImportError) as err:
        return {**case, "available": False, "reason": str(err).strip().splitlines()[0][:300]}
    oracle, math_lp = baselines
    case.update(available=True, check=judge(results, math_lp, oracle))
    lengths = np.array(packed.lengths, dtype=np.float64)
    flops = 4.0 * HEADS * HEAD_DIM * float((lengths**2).sum())
    try:
        case.update(timings(path, q, k, v, upstream, packed, iters, flops))
    except (RuntimeError, NotImplementedError) as err:  # e.g. refuses dropout
        case["timing_error"] = str(err).strip().splitlines()[0][:300]
    return case


def run_probe(args: argparse.Namespace, paths: tuple[AttentionPath, ...] | None = None) -> dict:
    """Every path (PATHS unless given) in every dtype; the record, written after each case."""
    paths = PATHS if paths is None else paths
    device = torch.device(args.device)
    packed = make_packed(args.batch, args.max_length, args.seed, device)
    gen = torch.Generator().manual_seed(args.seed)
    shape = (sum(packed.lengths), HEADS, HEAD_DIM)
    tensors = [torch.randn(shape, generator=gen, dtype=torch.float64).to(device) for _ in range(4)]
    record = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "command": " ".join(["probe_attention.py", *(args.argv or [])]),
        "heads": HEADS,
        "head_dim": HEAD_DIM,
        "sequences": len(packed.lengths),
        "tokens": shape[0],
        "longest": max(packed.lengths),
        "iters": args.iters,
        "dropout_p": DROPOUT,
        "cases": [],
    }
    oracle = per_sequence_math(*tensors, packed.lengths, None)
    for dtype_name in args.dtypes.split(","):
        low = [t.to(DTYPES[dtype_name]) for t in tensors]
        math_lp = per_sequence_math(*low, packed.lengths, SDPBackend.MATH)
        for path in paths:
            record["cases"].append(
                probe_case(path, dtype_name, tensors, (oracle, math_lp), packed, args.iters)
            )
            write_json(args.out, record)
    record["pick"] = {d: pick([record], record["device"], None, d) for d in args.dtypes.split(",")}
    write_json(args.out, record)
    return record


def picked(device: str, default: str, dtype: str = "bf16", root: Path | None = None) -> str:
    """`pick` over the committed windows' attention probes (benchmarks/results/gpu, or root)."""
    from bert.tools.gpu.records import RECORDS, windows

    found = windows(root or RECORDS)
    records = [r for w in found if (r := w.record("attention_probe")) is not None]
    return pick(records, device, default, dtype)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--batch", type=int, default=56, help="sequences (the bench's BERT-Large batch)")
    p.add_argument("--max-length", type=int, default=512, help="longest sequence of the mix")
    p.add_argument("--dtypes", default="bf16,fp16", help=f"of {','.join(DTYPES)}")
    p.add_argument("--iters", type=int, default=20, help="timed runs per measurement")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if not set(args.dtypes.split(",")) <= set(DTYPES) or args.batch < 1 or args.iters < 1:
        p.error(f"--dtypes of {sorted(DTYPES)}, --batch and --iters at least 1")
    if not 20 <= args.max_length <= 512:
        p.error("--max-length: 20..512 (the synthetic length mix needs 20)")
    args.argv = argv if argv is not None else sys.argv[1:]
    return args


def wrong_backends(record: dict) -> list[str]:
    """The model's backends that ran and failed their check: what a config may be running."""
    return [
        f"{c['path']} {c['dtype']}"
        for c in record["cases"]
        if c["backend"] and c["available"] and not c["check"]["passed"]
    ]


def main(argv: list[str] | None = None) -> int:
    """0, or 1 when one of the model's backends computed wrong attention (the other paths are
    candidates: a wrong one is reported, not a failure)."""
    args = parse_args(argv)
    record = run_probe(args)
    for line in attention_verdicts(record):
        print(line)
    wrong = wrong_backends(record)
    print(f"pick {record['pick']}; wrong backends: {', '.join(wrong) or 'none'}; wrote {args.out}")
    return 1 if wrong else 0
