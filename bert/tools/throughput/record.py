"""The JSON record of one bench_throughput.py run (bench.py), and its printed summary: each
variant's figures from its rounds, the FLOP counts they are divided by, the ratios between
variants of the run.
"""

from __future__ import annotations

import os
import shlex
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

from bert.tools.common import git_commit
from bert.tools.throughput.graphed import graph_buckets
from bert.tools.throughput.measure import datasheet_peak
from bert.tools.throughput.settings import VARIANTS
from bert.tools.throughput.workload import (
    FLOP_FORMULA,
    MAX_PREDICTIONS,
    MODEL_SIZES,
    executed_flops,
    model_config,
    train_flops,
)
from bert.train.graphs.shapes import select_shape
from bert.train.graphs.static_batch import padding_layout

GB = 1e9
HF_BASELINES = ("hf_eager", "hf_compile")


def counters(variant) -> dict:
    """What a variant counted while it ran (the graphed ones: captures, replays, fallbacks)."""
    counts = variant.counters()
    return {"counters": counts} if counts else {}


def block_flops(bench) -> tuple[float, int, int]:
    """Useful FLOPs, samples and real tokens of one timed block (batches 0..steps-1)."""
    w, cfg = bench.workload, model_config(bench.args.model)
    idx = [i % len(w.lengths) for i in range(bench.args.steps)]
    flops = sum(train_flops(cfg, w.lengths[i], w.masked[i]) for i in idx)
    tokens = sum(int(w.lengths[i].sum()) for i in idx)
    return flops, bench.args.steps * bench.args.batch, tokens


def hf_executed_flops_per_step(bench) -> float:
    """What the padded HF model computes per step: every padded position, MLM head included."""
    w, cfg = bench.workload, model_config(bench.args.model)
    total = 0.0
    for padded in w.padded:
        b, s = padded["input_ids"].shape
        total += train_flops(cfg, np.full(b, s), b * s)
    return total / len(w.padded)


def executed_block_flops(bench, options: dict) -> float:
    """What a variant computes in one timed block (batches 0..steps-1): HF every padded
    position, MLM head included; ours (workload.executed_flops) padded_sdpa's padding inside
    attention, a CUDA graph's padding sequences and masked rows, the last-layer subset."""
    w, cfg = bench.workload, model_config(bench.args.model)
    return sum(
        executed_batch_flops(cfg, w, i % len(w.lengths), options) for i in range(bench.args.steps)
    )


def executed_batch_flops(cfg, w, i: int, options: dict) -> float:
    if "transformers" in options:  # HF: padded, the MLM head on every position
        b, s = w.padded[i]["input_ids"].shape
        return train_flops(cfg, np.full(b, s), b * s)
    lengths, masked = w.lengths[i], w.masked[i]
    pad = int(lengths.max()) if options["attention"] == "padded_sdpa" else None
    if options.get("cuda_graphs"):  # padded to its graph's shape (graphed.py's buckets)
        buckets = graph_buckets(len(lengths), w.max_length, MAX_PREDICTIONS)
        shape = select_shape(int(lengths.sum()), len(lengths), masked, int(lengths.max()), buckets)
        if shape is not None:
            extra, _, _ = padding_layout(
                shape.tokens - int(lengths.sum()),
                shape.sequences - len(lengths),
                shape.max_seqlen,
                torch.device("cpu"),
            )
            lengths, masked = np.concatenate([lengths, extra.numpy()]), shape.masked
            pad = shape.max_seqlen if pad else None
    queries = w.masked_counts[i] + 1 if options.get("last_layer_subset") else None  # [CLS] too
    return executed_flops(cfg, lengths, masked, pad, queries)


def variant_record(
    bench, name: str, record: dict, peak_tflops: float, datasheet: dict | None = None
) -> dict:
    """One variant's figures: medians over its rounds, every round's rate, its options; MFU
    on useful and on executed FLOPs, against the measured matmul rate and the datasheet."""
    flops, samples, tokens = block_flops(bench)
    executed = executed_block_flops(bench, bench.variants[name].options)
    wall = statistics.median(record["wall"])
    nominal = datasheet["tflops"] * 1e12 if datasheet else None
    return {
        "samples_per_s": samples / wall,
        "tokens_per_s": tokens / wall,
        "seconds_per_step": wall / bench.args.steps,
        "useful_tflops_per_s": flops / wall / 1e12,
        "mfu": flops / wall / (peak_tflops * 1e12),
        "executed_flops_per_step": executed / bench.args.steps,
        "executed_tflops_per_s": executed / wall / 1e12,
        "mfu_executed": executed / wall / (peak_tflops * 1e12),
        "mfu_datasheet": flops / wall / nominal if nominal else None,
        "mfu_executed_datasheet": executed / wall / nominal if nominal else None,
        "peak_mem_gb": record["peak"] / GB,
        "resident_mem_gb": bench.resident[name] / GB,
        "cpu_seconds_per_step": statistics.median(record["cpu"]) / bench.args.steps,
        "samples_per_s_per_round": [samples / t for t in record["wall"]],
        "options": bench.variants[name].options,
        **counters(bench.variants[name]),
    }


def ratios(variants: dict, timings: dict) -> dict:
    """Speedups: ratio of median throughputs, and the median of per-round paired ratios."""
    pairs = [
        ("fastest", "hf_eager"),
        ("fastest", "hf_compile"),
        ("fastest", "reference"),
        ("reference", "hf_eager"),
        ("hf_compile", "hf_eager"),
    ]
    # every option-set variant against each HF baseline
    pairs += [(name, hf) for name in variants if name not in VARIANTS for hf in HF_BASELINES]
    out = {}
    for a, b in pairs:
        if a in variants and b in variants:
            paired = [tb / ta for ta, tb in zip(timings[a]["wall"], timings[b]["wall"])]
            out[f"{a}/{b}"] = variants[a]["samples_per_s"] / variants[b]["samples_per_s"]
            out[f"{a}/{b}_paired_median"] = statistics.median(paired)
    return out


def build_payload(bench, timings: dict, peaks: list[dict], context: dict, partial: bool) -> dict:
    """The JSON record from the rounds measured so far (`partial`: not all of them yet)."""
    args, argv = bench.args, context["argv"]
    peak = max(p["tflops"] for p in peaks)
    datasheet = datasheet_peak(context["device"], args.precision)
    variants = {n: variant_record(bench, n, timings[n], peak, datasheet) for n in bench.variants}
    return {
        "device": context["device"],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "commit": git_commit(),
        "command": shlex.join([sys.executable, *sys.argv])
        if argv is None
        else shlex.join(["bench_throughput.py", *argv]),
        "date": context["date"].isoformat(timespec="seconds"),
        "partial": partial,
        "rounds_done": len(peaks),
        "model": args.model,
        "model_shape": {
            **dict(zip(("hidden", "layers", "heads", "ffn"), MODEL_SIZES[args.model])),
            "vocab": model_config(args.model).vocab_size,
        },
        "precision": args.precision,
        "batch": args.batch,
        "max_length": args.max_length,
        "steps": args.steps,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "threads": torch.get_num_threads() if bench.device.type == "cpu" else None,
        "load_average_1min": [context["load_before"], os.getloadavg()[0]],  # at start and end
        "cpu_count": os.cpu_count(),
        "matmul_peak_tflops": peak,
        "matmul_peak": peaks,
        "datasheet_peak": datasheet,
        "workload": {
            **bench.workload.stats(),
            "hf_executed_flops_per_step": hf_executed_flops_per_step(bench),
            "useful_flops_per_step": block_flops(bench)[0] / args.steps,
        },
        "flop_formula": FLOP_FORMULA,
        "variants": variants,
        "ratios": ratios(variants, timings),
        "fastest_selection": bench.selection,
        "variant_errors": bench.errors,
        "variants_refused": bench.refused,
        "memory_method": bench.meter.method + "; peak_mem_gb = peak during the variant's "
        "timed steps minus what the other variants keep resident",
        "method": f"{args.repeats} rounds x {args.steps} steps per variant, variant order "
        "rotated each round, medians over rounds; batches prebuilt on the device, "
        "data pipeline not timed; samples_per_s counts real samples; every variant warmed "
        "on every batch first (warmup_steps), warmup_seconds (compilation included) apart; "
        "mfu: useful FLOPs (flop_formula) per second over the matmul rate measured in this "
        "process, mfu_executed: the FLOPs the variant computes (HF's padding, padded_sdpa's, "
        "a CUDA graph's) over the same rate, *_datasheet: over datasheet_peak",
    }


def print_summary(payload: dict, path: Path) -> None:
    print(
        f"{payload['device']} | {payload['model']} {payload['precision']} batch "
        f"{payload['batch']} | matmul peak {payload['matmul_peak_tflops']:.3f} TFLOP/s"
    )
    for name, v in payload["variants"].items():
        print(
            f"  {name:11s} {v['samples_per_s']:9.2f} samples/s {v['tokens_per_s']:11.0f} "
            f"tokens/s  MFU {v['mfu']:.3f} (executed {v['mfu_executed']:.3f})  "
            f"peak {v['peak_mem_gb']:.2f} GB  {v['options']}"
        )
    for key, value in payload["ratios"].items():
        print(f"  {key}: {value:.2f}x")
    print(f"wrote {path}")
