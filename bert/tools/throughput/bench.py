"""Training throughput of BERT pretraining: this project's paths against HuggingFace, one process.

    python scripts/bench_throughput.py                        # BERT-Large, GPU if there is one
    python scripts/bench_throughput.py --device cpu --model tiny --profile
    python scripts/bench_throughput.py --hf-compile --include-unvalidated   # on a GPU

`--model tiny` is the default run's model (configs/tiny_cpu.yaml: hidden 128, 2 layers, its
vocabulary and 128 positions); the others are BERT shapes with MLPerf's vocabulary
(bert/tools/throughput/workload.py: MODEL_SIZES). The JSON goes to results/bench/ (git
ignores it) unless --json names a file; recorded results go to benchmarks/results/ that way.

Every variant runs full training steps (forward, backward, LAMB) on the same synthetic batches
(REFERENCE 2 length mix, 15% masked up to 76, max length 512), built on the device before any
timing, in the same precision and from the same initial weights:

    fastest     this project's fastest path: the unpadded model with the best validated options
                (`--fastest auto` times the candidates for this device and keeps the fastest:
                the attention backends a GPU window validated (flash_varlen, grouped_flash on
                CUDA since 2026-11-26); with --include-unvalidated on CUDA, also, for hidden
                size 1024, every fused kernel of kernels/ valid for the model at once: not
                fused_dense_gelu, whose GeLU is tanh while this BERT's is erf, as MLPerf's.
                The optimizer is LAMB on torch's foreach ops unless --fastest names +sharded
                or +fusedlamb)
    reference   the unpadded model with the reference attention (padded_sdpa), not compiled
    hf_eager    HF BertForPreTraining, padded to each batch's longest sequence, SDPA attention
    hf_compile  hf_eager under torch.compile (with --hf-compile)
    ATTENTION[+FLAG...]  an option set named in --variants (--fastest's syntax), a variant of
                its own: e.g. `--variants fastest,flash_varlen+fused,hf_eager,hf_compile`
                times the fused path in every round beside both HF baselines, so its ratio to
                each (JSON ratios: "flash_varlen+fused/hf_compile") comes from this process.
                +graphs replays forward and backward as CUDA graphs (run.cuda_graphs; on the
                CPU its eager emulation): a set graphs refuse (+sharded, +fusedlamb, +subset,
                grouped_flash, +compile) is not built, its reason recorded (JSON:
                variants_refused), and the others run

`--dry-run` prints the variants the command would build (their options, or why one is refused)
as JSON and builds nothing: the GPU window's dry run checks its command with it.

Variants run in rounds: each round times `--steps` steps of every variant, in a rotated order,
and each figure is the median over `--repeats` rounds, so drifting load on a shared machine
hits all variants alike. Throughput counts real samples and tokens; MFU divides the useful
FLOPs (bert/tools/throughput/workload.py: FLOP_FORMULA; padding is not credited) by the
time and by a large matmul's rate measured in the same process; mfu_executed divides what the
variant computes instead (HF's padding, padded_sdpa's, a CUDA graph's; workload.executed_flops),
and the *_datasheet figures divide by the card's datasheet peak (measure.datasheet_peak). Every
round's rate is in the JSON (samples_per_s_per_round), which is rewritten after each round.
One JSON file per run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import re
import time
from pathlib import Path

import torch

from bert.tools.common import ROOT, write_json
from bert.tools.throughput.measure import (
    MemoryMeter,
    device_name,
    matmul_peak_tflops,
    synchronize,
    timed_block,
)
from bert.tools.throughput.profiling import profile_step
from bert.tools.throughput.record import build_payload, print_summary
from bert.tools.throughput.settings import (
    VARIANTS,
    Candidate,
    VariantRefused,
    fastest_candidates,
    graphs_refusal,
    resolve,
    variant_plan,
)
from bert.tools.throughput.variants import build_hf, build_ours, init_state
from bert.tools.throughput.workload import MODEL_SIZES, build_workload, model_config


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--model", choices=sorted(MODEL_SIZES), default="large")
    p.add_argument("--batch", type=int, help="local batch (default: per device and model)")
    p.add_argument("--steps", type=int, help="timed steps per variant per round")
    p.add_argument(
        "--warmup",
        type=int,
        help="untimed steps per variant first (>= 1; at least one per workload batch)",
    )
    p.add_argument("--repeats", type=int, help="rounds; figures are medians over rounds")
    p.add_argument("--num-batches", type=int, help="distinct batches (default: --steps)")
    p.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        help="default: fp32 on CPU, bf16 (autocast) on CUDA",
    )
    p.add_argument(
        "--variants",
        default="fastest,reference,hf_eager",
        help=f"comma-separated: of {','.join(VARIANTS)}, or option sets in --fastest's "
        "syntax (ATTENTION[+FLAG...]), each a variant of its own",
    )
    p.add_argument("--hf-compile", action="store_true", help="add the hf_compile variant")
    p.add_argument(
        "--fastest",
        default="auto",
        help="auto, or ATTENTION[+compile][+fused]"
        "[+subset][+sublayers][+sharded|+fusedlamb][+fp8][+graphs], e.g. per_sequence or "
        "flash_varlen+compile+fused+subset (subset: model.last_layer_subset; "
        "sublayers: model.compile_sublayers, not with fused; sharded: the "
        "ShardedOptimizer's flat LAMB; fusedlamb: its CUDA kernels; fp8: "
        "model.fp8_linear; graphs: run.cuda_graphs); several, "
        "comma-separated, are each timed for one block in this process (JSON: "
        "fastest_selection) and the fastest is the variant",
    )
    p.add_argument(
        "--include-unvalidated",
        action="store_true",
        help="let --fastest auto also try backends and fused kernels not yet "
        "validated on this device",
    )
    p.add_argument(
        "--no-fused",
        action="store_true",
        help="keep the fused kernels out of --fastest auto's candidates",
    )
    p.add_argument(
        "--no-subset",
        action="store_true",
        help="keep model.last_layer_subset out of --fastest auto's candidates",
    )
    p.add_argument(
        "--hf-padding",
        choices=("batch_max", "max_length"),
        default="batch_max",
        help="pad HF batches to the batch's longest sequence or to --max-length",
    )
    p.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="longest sequence; the length mix scales with it (default: the "
        "model's positions, 512 = MLPerf; 128 for tiny)",
    )
    p.add_argument("--threads", type=int, help="CPU intra-op threads (default: torch's)")
    p.add_argument(
        "--profile",
        action="store_true",
        help="record a per-op profile of one step of the fastest variant",
    )
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the variants this command would build (options, or why one is "
        "refused) as JSON; build and write nothing",
    )
    p.add_argument(
        "--json",
        type=Path,
        help="output file (default: results/bench/..., "
        "which git ignores; name benchmarks/results/... to record a result)",
    )
    return p.parse_args(argv)


def warmup_steps(requested: int, num_batches: int) -> int:
    """Untimed steps before a variant's first timed block: what was asked, and at least one
    pass over the workload's batches (each a shape of its own)."""
    return max(requested, num_batches)


class Bench:
    """Builds the variants, runs the rounds and turns the timings into the JSON record."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.device = torch.device(args.device)
        self.meter = MemoryMeter(self.device)
        self.workload = build_workload(
            args.num_batches,
            args.batch,
            args.seed,
            self.device,
            args.hf_padding,
            args.max_length,
            model_config(args.model).vocab_size,
        )
        self.state = init_state(args.model, args.seed)
        self.variants: dict[str, object] = {}
        self.resident: dict[str, int] = {}
        self.selection: list[dict] = []
        self.errors: dict[str, str] = {}  # option-set variants that could not be built
        self.refused: dict[str, str] = {}  # option sets not built by design, and why

    # -- building ------------------------------------------------------------------------------

    def build(self, name: str, options: Candidate = Candidate("padded_sdpa")):
        """Build a variant, warm it up, and record the memory it keeps between steps.
        VariantRefused (before anything is built): a combination the bench does not run."""
        a = self.args
        refusal = graphs_refusal(options, a.precision)
        if refusal is not None:
            raise VariantRefused(refusal)
        before = self._settled_memory()
        if name.startswith("hf"):
            variant = build_hf(
                a.model, options.compile, self.state, self.workload, self.device, a.precision, name
            )
        else:
            variant = build_ours(
                a.model,
                options.attention,
                options.compile,
                self.state,
                self.workload,
                self.device,
                a.precision,
                name,
                options.fused,
                options.subset,
                options.sublayers,
                options.optimizer,
                options.fp8,
                options.graphs,
            )
        # Every variant sees every batch shape once before timing, so nothing a new shape costs
        # once lands inside a timed block: a compile, the caching allocator's new blocks, a
        # GEMM's heuristic query. With 5 of 10 shapes warmed, the fused variant's first round
        # ran 425 samples/s and its second 715 on one H100 (2026-11-26b window).
        warmup = warmup_steps(a.warmup, a.num_batches)
        started = time.perf_counter()
        for i in range(warmup):
            variant.step(i)
        synchronize(self.device)
        variant.release()
        variant.options["warmup_steps"] = warmup
        # compilation happens here, so compile time is recorded apart from the timed steps
        variant.options["warmup_seconds"] = round(time.perf_counter() - started, 2)
        self.resident[name] = self._settled_memory() - before
        return variant

    def _settled_memory(self) -> int:
        gc.collect()
        synchronize(self.device)
        return self.meter.current()

    def build_fastest(self) -> object:
        """The fastest candidate, timed for one block each when there is a choice."""
        candidates = fastest_candidates(self.args, self.device.type)
        if len(candidates) == 1:
            return self.build("fastest", candidates[0])
        best, best_time, best_resident = None, float("inf"), 0
        for candidate in candidates:
            choice = {
                "attention": candidate.attention,
                "compile": candidate.compile,
                "fused": candidate.fused,
                "last_layer_subset": candidate.subset,
                "compile_sublayers": candidate.sublayers,
                "optimizer": candidate.optimizer,
                "fp8": candidate.fp8,
                "graphs": candidate.graphs,
            }
            try:
                variant = self.build("fastest", candidate)
            except VariantRefused as why:
                self.selection.append({**choice, "refused": str(why)})
                continue
            except RuntimeError as err:  # e.g. an unbuilt extension: record it, try the rest
                self.selection.append({**choice, "error": str(err).splitlines()[0]})
                self._collect()
                continue
            wall, _ = timed_block(variant.step, 0, self.args.steps, self.device)
            variant.release()
            self.selection.append({**choice, "seconds_per_step": wall / self.args.steps})
            if wall < best_time:
                best, best_time, best_resident = variant, wall, self.resident["fastest"]
            # Free the slower candidate before the next one is built and measured.
            variant = None
            self._collect()
        self.resident["fastest"] = best_resident
        return best

    def _collect(self) -> None:
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def build_all(self) -> None:
        """Every variant named; one that cannot be built (an unbuilt extension, no memory
        left) is recorded and left out, and so is one the bench refuses (VariantRefused), so
        the others' figures still come back."""
        for name in self.args.variant_names:
            try:
                self.variants[name] = self._build_named(name)
            except VariantRefused as why:
                self.refused[name] = str(why)
            except RuntimeError as err:  # torch.OutOfMemoryError is one
                self.errors[name] = str(err).splitlines()[0]
                self._collect()

    def _build_named(self, name: str):
        if name == "fastest":
            fastest = self.build_fastest()
            if fastest is None:
                raise RuntimeError("no candidate could be built (fastest_selection)")
            return fastest
        if name == "reference":
            return self.build(name, Candidate("padded_sdpa"))
        if name in self.args.spec_variants:
            return self.build(name, self.args.spec_variants[name])
        return self.build(name, Candidate("padded_sdpa", compile=name == "hf_compile"))

    # -- measuring -----------------------------------------------------------------------------

    def run_rounds(self, after_round=None) -> tuple[dict, list[dict]]:
        """Per variant: wall and CPU seconds per round, and the peak memory over rounds.
        after_round(timings, peaks): called after each round (the partial JSON)."""
        names = list(self.variants)
        timings = {n: {"wall": [], "cpu": [], "peak": 0} for n in names}
        peaks = []
        for r in range(self.args.repeats):
            peaks.append(matmul_peak_tflops(self.device, self.args.precision))
            for name in names[r % len(names) :] + names[: r % len(names)]:
                if name in self.variants:
                    self._time_variant(name, timings[name], r)
            for name in set(timings) - set(self.variants):  # dropped in this round
                del timings[name]
            if after_round is not None:
                after_round(timings, peaks)
        return timings, peaks

    def _time_variant(self, name: str, record: dict, round_index: int) -> None:
        start = self._settled_memory()
        self.meter.reset_peak()
        try:
            wall, cpu = timed_block(self.variants[name].step, 0, self.args.steps, self.device)
        except torch.OutOfMemoryError as err:
            # Out of memory beside the others (the GPU is smaller than the one the list was
            # made for): this variant is dropped from the run and the rest go on.
            self.errors[name] = f"round {round_index + 1}: {str(err).splitlines()[0]}"
            del self.variants[name]
            self._collect()
            return
        self.variants[name].release()
        # Memory above what every variant keeps resident, plus this variant's own resident part:
        # what the variant would need alone (input batches excluded).
        peak = self.meter.peak() - start + self.resident[name]
        record["wall"].append(wall)
        record["cpu"].append(cpu)
        record["peak"] = max(record["peak"], peak)


def default_path(device: str, model: str, date: dt.datetime) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    # results/ is git-ignored: a run records nothing in the repository unless --json asks
    return ROOT / "results" / "bench" / f"{slug}_{model}_{date:%Y%m%d-%H%M%S}.json"


def main(argv: list[str] | None = None) -> dict:
    args = resolve(parse_args(argv))
    if args.dry_run:  # before anything touches the device
        plan = variant_plan(args)
        print(json.dumps(plan))  # one line, the last: what the window's dry run reads
        return plan
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    date = dt.datetime.now(dt.timezone.utc)
    load_before = os.getloadavg()[0]  # context for CPU runs on shared machines
    bench = Bench(args)
    bench.build_all()
    name = device_name(bench.device)
    path = args.json or default_path(name, args.model, date)
    context = {"argv": argv, "date": date, "load_before": load_before, "device": name}

    def write_partial(timings: dict, peaks: list[dict]) -> None:
        # Each round's figures are on disk at once: a killed run still leaves what it measured.
        write_json(path, build_payload(bench, timings, peaks, context, partial=True))

    timings, peaks = bench.run_rounds(write_partial)
    payload = build_payload(bench, timings, peaks, context, partial=False)
    write_json(path, payload)
    if args.profile and "fastest" in bench.variants:
        # After the figures are written: a profiler failure cannot lose them.
        payload["profile"] = profile_step(bench.variants["fastest"].step, 0, bench.device)
        write_json(path, payload)
    print_summary(payload, path)
    return payload
