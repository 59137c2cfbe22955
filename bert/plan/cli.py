"""`open-bert-plan`: candidates for a cluster (hyperparameters from RCPs, published submissions or
interpolation; the RCP convergence check each faces), with memory per GPU, step time and
predicted time to train; `--json` for machines, `--write-config` for a runnable config.

    open-bert-plan --gpus 8 --gpu a100-80gb
    open-bert-plan --gpus 64 --gpus-per-node 8 --gpu h100 --batch 3072 --write-config configs/
    open-bert-plan --gpus 8 --gpu mygpu --memory-gib 48 --tflops 362 --efficiency 0.3

Exit status: 0 a plan was printed (and written); 2 bad input, with one `error:` line.
"""

from __future__ import annotations

import argparse
import json
import sys

from bert.core.inputs import Parser as InputParser, float_arg, int_arg, parse_float, parse_int
from bert.core import gpus
from bert.plan import scale
from bert.plan.planner import GIB, Assumptions, Candidate, Cluster, PlanError, plan


class ArgumentError(Exception):
    pass


class Parser(InputParser):
    def error(self, message: str):  # one `error:` line and status 2, like every bad input
        raise ArgumentError(message)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="open-bert-plan",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--gpus", type=int_arg(), required=True, help="GPUs in the cluster")
    p.add_argument("--gpus-per-node", type=int_arg(), default=None, help="default: min(8, --gpus)")
    p.add_argument(
        "--gpu",
        required=True,
        help=f"GPU kind: {', '.join(gpus.GPUS)}; or any name with --memory-gib and --tflops",
    )
    p.add_argument(
        "--memory-gib", type=float_arg(0.0), help="device memory of a kind not in the table"
    )
    p.add_argument(
        "--tflops", type=float_arg(0.0), help="dense bf16 TFLOP/s of a kind not in the table"
    )
    p.add_argument(
        "--link-gbps",
        type=float_arg(0.0),
        default=50.0,
        help="per-GPU link bandwidth (GB/s, one direction) of a kind not in the table",
    )
    p.add_argument(
        "--efficiency",
        type=float_arg(0.0),
        help="fraction of the dense peak the step reaches: selects the FLOP model "
        "(default: the scale model, calibrated as --calibrate says)",
    )
    p.add_argument(
        "--calibrate",
        metavar="GPUS:SAMPLES_PER_S_PER_GPU[:LOCAL_BATCH]",
        help="one measured point (training samples/s per GPU, evals excluded, at that GPU "
        "count; local batch default 96); default: the kind's published 8-GPU result, named",
    )
    p.add_argument("--sharp", action="store_true", help="in-network reduction (SHARP)")
    p.add_argument(
        "--nics-per-node",
        type=int_arg(),
        help="network cards per node that carry the gradients (default: one per GPU)",
    )
    p.add_argument(
        "--nic-gbps",
        type=float_arg(0.0),
        help="each NIC's rate in Gb/s, e.g. 400 for NDR (default: the kind's datasheet network)",
    )
    p.add_argument("--precision", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--sharded", action="store_true", help="optim.sharded=true (ZeRO-2 LAMB)")
    p.add_argument("--batch", type=int_arg(), help="plan only this global batch")
    p.add_argument("--max-micro-batch", type=int_arg(), default=256)
    p.add_argument(
        "--init-minutes",
        type=float_arg(0.0, inclusive=True),
        default=3.0,
        help="initialization time, shown apart (not scored)",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument(
        "--write-config",
        metavar="PATH",
        help="write the first candidate (or --batch's) as a config; PATH a file or "
        "a folder (then named bert_large_<n>x<g>x<gpu>_lb<m>_ga<a>.yaml)",
    )
    return p


def parse_calibrate(text: str | None) -> tuple | None:
    """GPUS:SAMPLES_PER_S_PER_GPU[:LOCAL_BATCH] -> (int, float[, float]), each bounded."""
    if text is None:
        return None
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise PlanError(f"--calibrate {text!r}: want GPUS:SAMPLES_PER_S_PER_GPU[:LOCAL_BATCH]")
    count = parse_int(parts[0], "--calibrate GPUS", PlanError)
    if count < 1:
        raise PlanError(f"--calibrate GPUS={count}: must be >= 1")
    names = ("--calibrate SAMPLES_PER_S_PER_GPU", "--calibrate LOCAL_BATCH")
    return (count, *(parse_float(p, n, PlanError, low=0.0) for p, n in zip(parts[1:], names)))


def kind_from(args) -> gpus.GPUKind:
    if args.memory_gib is not None or args.tflops is not None:
        if args.memory_gib is None or args.tflops is None:
            raise PlanError("--memory-gib and --tflops go together")
        return gpus.custom(args.gpu, args.memory_gib, args.tflops, args.link_gbps, None)
    return gpus.lookup(args.gpu)


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from bert.model.config import ModelConfig
    from bert.plan.configfile import check_target, write_config

    if args.write_config:
        check_target(args.write_config)
    per_node = args.gpus_per_node or max(1, min(8, args.gpus))
    cluster = Cluster(args.gpus, per_node, kind_from(args))
    if args.max_micro_batch < 1:
        raise PlanError(f"--max-micro-batch {args.max_micro_batch}: must be >= 1")
    assumptions = Assumptions(
        args.precision,
        args.sharded,
        args.efficiency,
        args.init_minutes,
        max_micro_batch=args.max_micro_batch,
        calibrate=parse_calibrate(args.calibrate),
        sharp=args.sharp,
        nics_per_node=args.nics_per_node,
        nic_gbps=args.nic_gbps,
    )
    candidates, rates = plan(cluster, ModelConfig(), assumptions, args.batch)
    if args.json:
        print(json.dumps(as_json(cluster, candidates, rates, assumptions), indent=1))
    else:
        print(table(cluster, candidates, rates, assumptions))
    if args.write_config:
        path = write_config(args.write_config, cluster, candidates[0], assumptions)
        print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def main(argv: list[str] | None = None) -> int:
    from bert.mlperf.rcp import RCPError

    try:
        return run(argv)
    except (ArgumentError, PlanError, gpus.GPUError, RCPError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


# -- output -----------------------------------------------------------------------------------


def _gib(value: float) -> str:
    return f"{value / GIB:.1f}"


def row(c: Candidate) -> str:
    flag = {"interpolated": "*", "published submissions": "+"}.get(c.hyper.basis, " ")
    if not c.fits:
        return f"{c.global_batch_size:>6}{flag} {'-':>9}  does not fit ({c.hyper.source})"
    s = c.hyper.settings
    return (
        f"{c.global_batch_size:>6}{flag} {c.micro_batch:>4}x{c.accumulation:<4} "
        f"{s['optim.lr']:>9.3g} {s['schedule.total_steps']:>6} "
        f"{_gib(c.memory.total()):>6} {_gib(c.memory.total(worst=True)):>6} "
        f"{c.step.step_s * 1e3:>8.0f} {c.samples_per_s:>8.0f} "
        f"{c.hyper.samples_mean / 1e6:>5.2f}M {c.train.evals:>5} "
        f"{c.train.score_min:>7.2f} ({c.train_low.score_min:.2f}-"
        f"{c.train_high.score_min:.2f})"
    )


def table(cluster: Cluster, candidates: list[Candidate], rates, a: Assumptions) -> str:
    kind = cluster.kind
    scaled = hasattr(rates, "peak")
    assumed = (
        f"scale model: R {rates.peak:.0f} samples/s per GPU ({rates.source}); "
        f"overhead {scale.FITTED.overhead_samples:g} samples per step, "
        f"{'SHARP' if a.sharp else 'ring'} between NVLink domains of "
        f"{rates.topology.nvlink_domain} over {rates.topology.network_gbs:g} GB/s of network per "
        f"GPU; init {a.init_minutes:g} min (not scored)"
        if scaled
        else None
    )
    lines = [
        f"{cluster.gpus} x {kind.name} ({cluster.nodes} node(s) x {cluster.gpus_per_node}), "
        f"{kind.memory_gib:g} GiB, {kind.bf16_tflops:g} TFLOP/s bf16 dense, {a.precision}, "
        f"optimizer {'sharded' if a.sharded else 'replicated'}",
        assumed
        or f"assumed: efficiency {rates.efficiency:.3f} of the peak"
        + (
            f" (implied by {kind.throughput_basis()[0]:g} samples/s per GPU, "
            f"{kind.throughput_basis()[1]})"
            if a.efficiency is None
            else " (given)"
        )
        + f"; gradient link {rates.link_gbs:g} GB/s; init {a.init_minutes:g} min (not scored)",
        "",
        f"{'GBS':>7} {'micro':>9} {'lr':>9} {'steps':>6} {'GiB':>6} {'worst':>6} "
        f"{'step ms':>8} {'samp/s':>8} {'conv':>6} {'evals':>5} {'minutes (range)':>7}",
    ]
    lines += [row(c) for c in candidates]
    best = candidates[0]
    lines += [
        "",
        "hyperparameters: unmarked from the batch's reference point (RCP); + from published "
        "converged submissions at that batch; * interpolated between two RCPs (no run has tried "
        "them)",
        "GiB: memory per GPU at the MLPerf length mix; worst: all sequences 512 tokens",
        "conv: the RCP's mean samples to 0.720; minutes: run_start..run_stop for the mean "
        "(fastest-slowest reference run)",
    ]
    if best.fits:
        lines += [
            "",
            f"fastest: global batch {best.global_batch_size} "
            f"({best.hyper.source}); RCP convergence check against {best.hyper.reference.name} "
            f"({best.hyper.reference_rule}); memory per GPU:",
        ]
        lines += [f"  {name:<42} {_gib(v):>6} GiB" for name, v in best.memory.parts.items()]
        m = best.memory
        lines += [
            f"  {'activations, MLPerf mix (counted)':<42} {_gib(m.activations_mix):>6} GiB",
            f"  {'activations, all 512 tokens (counted)':<42} {_gib(m.activations_512):>6} GiB",
            f"  {'eval working set (estimate)':<42} {_gib(m.eval_working_set):>6} GiB",
            f"  {'CUDA context, workspaces, NCCL (assumed)':<42} {_gib(m.runtime):>6} GiB",
        ]
    return "\n".join(lines)


def as_json(cluster: Cluster, candidates: list[Candidate], rates, a: Assumptions) -> dict:
    def one(c: Candidate) -> dict:
        out = {
            "global_batch_size": c.global_batch_size,
            "fits": c.fits,
            "micro_batch": c.micro_batch,
            "gradient_accumulation_steps": c.accumulation,
            "hyperparameters": c.hyper.settings,
            "hyperparameter_source": c.hyper.source,
            "interpolated": c.hyper.interpolated,
            "hyperparameter_basis": c.hyper.basis,
            "rcp_check": {
                "against": c.hyper.reference.name,
                "rule": c.hyper.reference_rule,
                "min_acceptable_mean_samples": c.hyper.reference.min_acceptable_mean,
            },
            "samples_to_converge": {
                "mean": c.hyper.samples_mean,
                "low": c.hyper.samples_low,
                "high": c.hyper.samples_high,
            },
        }
        if c.memory is not None:
            out["memory_gib"] = {
                **{k: v / GIB for k, v in c.memory.parts.items()},
                "activations_mix": c.memory.activations_mix / GIB,
                "activations_512": c.memory.activations_512 / GIB,
                "eval_working_set": c.memory.eval_working_set / GIB,
                "runtime": c.memory.runtime / GIB,
                "total_mix": c.memory.total() / GIB,
                "total_worst": c.memory.total(worst=True) / GIB,
            }
        if c.fits:
            out.update(
                step_s=c.step.step_s,
                compute_s=c.step.compute_s,
                communication_s=c.step.communication_s,
                exposed_s=c.step.exposed_s,
                samples_per_s=c.samples_per_s,
                evals=c.train.evals,
                minutes={
                    "mean": c.train.score_min,
                    "low": c.train_low.score_min,
                    "high": c.train_high.score_min,
                },
            )
        return out

    return {
        "cluster": {
            "gpus": cluster.gpus,
            "gpus_per_node": cluster.gpus_per_node,
            "gpu": cluster.kind.name,
            "memory_gib": cluster.kind.memory_gib,
            "bf16_tflops": cluster.kind.bf16_tflops,
        },
        "assumptions": {
            "precision": a.precision,
            "sharded": a.sharded,
            "efficiency": rates.efficiency,
            "scale_model": {
                "peak_samples_per_s": rates.peak,
                "source": rates.source,
                "sharp": a.sharp,
                "network_gbs_per_gpu": rates.topology.network_gbs,
            }
            if hasattr(rates, "peak")
            else None,
            "efficiency_source": cluster.kind.throughput_basis()[1]
            if a.efficiency is None
            else "given",
            "link_gbs": rates.link_gbs,
            "init_minutes": a.init_minutes,
        },
        "candidates": [one(c) for c in candidates],
    }
