"""The settings of one throughput benchmark run, settled before anything is built: the variants
(VARIANTS' names, or option sets named ATTENTION[+FLAG...], each a variant of its own),
the per-device defaults that complete its command line (bench.py: parse_args), and the option
sets that compete for the `fastest` variant (--fastest: auto, or one set named).
"""

from __future__ import annotations

import argparse
import sys
from typing import NamedTuple

import torch

from bert.model.attention import BACKENDS
from bert.model.config import FUSED_HIDDEN_SIZE
from bert.train.graphs.config import refused_setting
from bert.tools.throughput.workload import model_config

VARIANTS = ("fastest", "reference", "hf_eager", "hf_compile")
# Per device: local batch by model size, timed steps per round, warmup steps, rounds.
DEFAULTS = {
    "cpu": {
        "batch": {"mini": 16, "tiny": 16, "l4_h256": 16, "base": 16, "large": 16},
        "steps": 3,
        "warmup": 1,
        "repeats": 5,
        "precision": "fp32",
    },
    "cuda": {
        "batch": {"mini": 128, "tiny": 128, "l4_h256": 128, "base": 96, "large": 56},
        "steps": 20,
        "warmup": 5,
        "repeats": 3,
        "precision": "bf16",
    },
}
# Attention backends for `fastest`: the reference ones, plus those whose GPU tests passed in a
# window (their records, bert/model/attention.py); the others only with --include-unvalidated.
ATTENTION_CANDIDATES = {
    "cpu": ("per_sequence",),
    "cuda": ("padded_sdpa", "flash_varlen", "grouped_flash"),
}
FLAGS = ("compile", "fused", "subset", "sublayers", "sharded", "fusedlamb", "fp8", "graphs")


class Candidate(NamedTuple):
    """One set of options for the `fastest` variant (bench_throughput's --fastest syntax:
    ATTENTION[+FLAG...]; sharded/fusedlamb pick the optimizer, variants.OPTIMIZER_KINDS)."""

    attention: str
    compile: bool = False
    fused: bool = False
    subset: bool = False
    sublayers: bool = False
    optimizer: str = "lamb"
    # model.fp8_linear: the encoder's GEMMs in FP8 (with +fused, the fused kernels that do not
    # replace those GEMMs: fp8 and fused_dense are exclusive)
    fp8: bool = False
    # run.cuda_graphs: forward and backward replayed as CUDA graphs over bucketed batch shapes
    # (bert/train/graphs), the optimizer step eager; on the CPU the eager emulation
    graphs: bool = False


def validated(kind: str, attention: str) -> bool:
    backend = BACKENDS[attention]
    return backend.reference or (kind == "cuda" and backend.gpu_validated is not None)


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill device-dependent defaults and check the combination."""
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    kind = torch.device(args.device).type
    if kind not in DEFAULTS:
        sys.exit(f"--device {args.device}: only cpu and cuda are supported")
    d = DEFAULTS[kind]
    args.batch = args.batch or d["batch"][args.model]
    args.steps = args.steps or d["steps"]
    args.warmup = d["warmup"] if args.warmup is None else args.warmup
    args.repeats = args.repeats or d["repeats"]
    args.num_batches = args.num_batches or args.steps
    args.precision = args.precision or d["precision"]
    names = [v for v in args.variants.split(",") if v]
    if args.hf_compile and "hf_compile" not in names:
        names.append("hf_compile")
    unknown = {n for n in names if n not in VARIANTS and not is_spec(n)}
    if unknown or not names:
        sys.exit(
            f"--variants: unknown {sorted(unknown)}; choose from {VARIANTS} or name option sets "
            "as --fastest does (ATTENTION[+FLAG...])"
        )
    # Each option set named in --variants is a variant of its own, timed in every round beside
    # the others, so its ratios to both HF baselines come from this one process.
    fusable = model_config(args.model).hidden_size == FUSED_HIDDEN_SIZE
    args.spec_variants = {n: named_candidate(n, fusable) for n in names if n not in VARIANTS}
    positions = model_config(args.model).max_position_embeddings
    args.max_length = args.max_length or positions
    if not 20 <= args.max_length <= positions:
        sys.exit(
            f"--max-length {args.max_length}: expected 20..{positions} (the model has "
            f"{positions} positions; the synthetic length mix needs 20)"
        )
    if args.warmup < 1:
        sys.exit("--warmup must be >= 1 (the first step allocates the optimizer state)")
    args.variant_names = names
    return args


def fastest_candidates(args: argparse.Namespace, kind: str) -> list[Candidate]:
    """The option sets that compete for the `fastest` variant. `sublayers`
    (model.compile_sublayers) and the sharded optimizers only when --fastest names them."""
    # The fused kernels are built for hidden size 1024 only.
    fusable = model_config(args.model).hidden_size == FUSED_HIDDEN_SIZE
    if args.fastest != "auto":  # one set, or several to time against each other in this run
        return [named_candidate(spec, fusable) for spec in args.fastest.split(",")]
    backends = [
        b for b in ATTENTION_CANDIDATES[kind] if validated(kind, b) or args.include_unvalidated
    ]
    # torch.compile on the CPU is not a candidate: per_sequence reads lengths on the host,
    # which breaks the graph at every layer. The fused kernels are not yet GPU-validated.
    compiles = (False, True) if kind == "cuda" else (False,)
    fuses = (
        (False, True)
        if kind == "cuda" and args.include_unvalidated and fusable and not args.no_fused
        else (False,)
    )
    # model.last_layer_subset is exact (tests/unit/test_last_layer_subset.py): a candidate unless
    # --no-subset (its CUDA path, flash with separate query lengths, is timed like the rest).
    subsets = (False,) if args.no_subset else (False, True)
    return [
        Candidate(b, c, f, s) for b in backends for c in compiles for f in fuses for s in subsets
    ]


def is_spec(name: str) -> bool:
    """An option set (ATTENTION[+FLAG...]) rather than one of VARIANTS' names."""
    return name.split("+")[0] in BACKENDS


def named_candidate(spec: str, fusable: bool) -> Candidate:
    attention, *flags = spec.split("+")
    if attention not in BACKENDS or not set(flags) <= set(FLAGS):
        sys.exit(
            f"--fastest {spec!r}: expected ATTENTION[+FLAG...], ATTENTION one of "
            f"{sorted(BACKENDS)}, FLAG one of {', '.join(FLAGS)}"
        )
    if {"fused", "sublayers"} <= set(flags):
        sys.exit(f"--fastest {spec!r}: +sublayers compiles what +fused replaces; name one of them")
    if {"fp8", "sublayers"} <= set(flags):
        sys.exit(f"--fastest {spec!r}: +sublayers compiles the GEMMs +fp8 replaces; name one")
    if {"sharded", "fusedlamb"} <= set(flags):
        sys.exit(
            f"--fastest {spec!r}: +fusedlamb is the sharded optimizer with its kernels; "
            "name one of them"
        )
    if "fused" in flags and not fusable:
        sys.exit(
            f"--fastest {spec!r}: the fused kernels need hidden size "
            f"{FUSED_HIDDEN_SIZE} (--model large)"
        )
    optimizer = next((flag for flag in ("sharded", "fusedlamb") if flag in flags), "lamb")
    return Candidate(
        attention,
        "compile" in flags,
        "fused" in flags,
        "subset" in flags,
        "sublayers" in flags,
        optimizer,
        "fp8" in flags,
        "graphs" in flags,
    )


class VariantRefused(RuntimeError):
    """An option set the bench does not build (graphs_refusal): recorded, not an error."""


# What the bench's flags turn on, in the words of the settings bert/train/graphs refuses
_GRAPH_SETTINGS = {
    "optim.sharded=true": "+sharded or +fusedlamb",
    "model.attention=grouped_flash": "grouped_flash",
    "model.last_layer_subset=true": "+subset",
    "run.precision=fp16": "fp16",
}


def graphs_refusal(candidate: Candidate, precision: str) -> str | None:
    """Why an option set with +graphs is not run: a combination CUDA graphs refuse
    (bert/train/graphs/config.py, the same rule as run.cuda_graphs's config check), or one the
    bench does not try; None when it runs (and for every set without +graphs). The bench
    records the reason and goes on with the other variants."""
    if not candidate.graphs:
        return None
    if candidate.compile:
        return (
            "+graphs with +compile: the whole torch.compile'd model is not captured here "
            "(torch.compile has its own CUDA graphs, mode='reduce-overhead')"
        )
    setting = refused_setting(
        precision=precision,
        sharded=candidate.optimizer != "lamb",
        attention=candidate.attention,
        last_layer_subset=candidate.subset,
    )
    if setting is None:
        return None
    return (
        f"+graphs with {_GRAPH_SETTINGS[setting]}: CUDA graphs cannot run with {setting} yet "
        "(bert/train/graphs/config.py, docs/cuda_graphs.md)"
    )


def variant_plan(args: argparse.Namespace) -> dict[str, dict]:
    """What each variant of a resolved command line would be, built from nothing (the bench's
    --dry-run): its options, the `fastest` candidates, or why an option set is refused."""
    kind = torch.device(args.device).type

    def entry(candidate: Candidate) -> dict:
        refusal = graphs_refusal(candidate, args.precision)
        return {**candidate._asdict(), **({"refused": refusal} if refusal else {})}

    plan = {}
    for name in args.variant_names:
        if name == "fastest":
            plan[name] = {"candidates": [entry(c) for c in fastest_candidates(args, kind)]}
        elif name == "reference":
            plan[name] = entry(Candidate("padded_sdpa"))
        elif name in args.spec_variants:
            plan[name] = entry(args.spec_variants[name])
        else:
            plan[name] = {"model": "transformers BertForPreTraining", "compile": "compile" in name}
    return {
        "device": args.device,
        "model": args.model,
        "precision": args.precision,
        "batch": args.batch,
        "variants": plan,
    }
