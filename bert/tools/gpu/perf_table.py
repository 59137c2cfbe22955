"""The README's GPU performance table, generated from the committed windows' throughput records.

Each bench_throughput.py run (`throughput_<run>.json`) is read from the newest window that has
it complete, so a run the newest window did not finish keeps an older window's row, which names
its window (date, device, commit). Each run compares its variants in one process: ratios are
read within a run only. The rate is records.STATISTIC, and the table shows every round.
`python -m bert.tools.gpu.gpu_docs --write` puts the table into README.md.
"""

from __future__ import annotations

from bert.tools.gpu.records import STATISTIC, Window, newest_record, steady

RUNS = (
    "throughput_eager",
    "throughput_fused",
    "throughput_compiled",
    "throughput_sublayers",
    "throughput_sharded",
)
HF = ("hf_eager", "hf_compile")
# the speed goals on one H100: samples/s, and each ratio to HF measured in one run
TARGETS = {"samples_per_s": 1000.0, "fastest/hf_eager": 3.0, "fastest/hf_compile": 2.0}
VARIANT_NAMES = {
    "fastest": "this project",
    "hf_eager": "HF BertForPreTraining, padded, eager",
    "hf_compile": "HF BertForPreTraining, padded, torch.compile",
    "reference": "this project, unpadded reference (no custom kernels)",
}
OPTIMIZERS = {
    "sharded": "sharded LAMB (flat shard, torch ops)",
    "fusedlamb": "sharded LAMB with the fused CUDA kernels",
}  # "lamb": the default


def describe(options: dict) -> str:
    """What a variant ran, in a few words (from the options bench_throughput records)."""
    if "transformers" in options:
        return f"transformers {options['transformers']}, {options.get('attention', '')}"
    parts = [options.get("attention", "")]
    if options.get("compile"):
        parts.append("torch.compile")
    if options.get("fused_flags"):
        names = ", ".join(flag.removeprefix("fused_") for flag in options["fused_flags"])
        parts.append(f"fused kernels (run with --include-unvalidated): {names}")
    if options.get("compile_sublayers"):
        parts.append("compile_sublayers")
    if options.get("fp8_linear"):
        parts.append("FP8 encoder GEMMs (model.fp8_linear)")
    if options.get("last_layer_subset"):
        parts.append("last-layer subset")
    if options.get("cuda_graphs"):
        parts.append(f"CUDA graphs ({options['cuda_graphs']})")
    if options.get("optimizer") in OPTIMIZERS:
        parts.append(OPTIMIZERS[options["optimizer"]])
    return "; ".join(p for p in parts if p)


def ratios(run: dict) -> dict[str, float]:
    """fastest/<other> for every other variant of the run, both rates by STATISTIC."""
    variants = run["variants"]
    if "fastest" not in variants:
        return {}
    mine = steady(variants["fastest"])
    return {f"fastest/{k}": mine / steady(v) for k, v in variants.items() if k != "fastest"}


def run_rows(name: str, window: Window, run: dict) -> list[str]:
    rows = []
    for variant, result in run["variants"].items():
        rate = steady(result)
        # MFU is proportional to the rate within a run (same batches every round)
        mfu = result["mfu"] * rate / result["samples_per_s"]
        rounds = ", ".join(f"{r:.0f}" for r in result.get("samples_per_s_per_round", []))
        ratio = ""
        if variant == "fastest":
            ratio = "; ".join(f"{v:.2f}x {k.split('/')[1]}" for k, v in ratios(run).items())
        rows.append(
            f"| `{name}` | {window.label} | {VARIANT_NAMES.get(variant, variant)} | "
            f"{describe(result['options'])} | {rounds} | {rate:.0f} | {mfu:.3f} | {ratio} |"
        )
    return rows


def selection_lines(name: str, window: Window, run: dict) -> list[str]:
    """The candidates a run timed to pick its fastest variant (one block each, no round
    dropped: an ordering, not a steady rate)."""
    timed = [c for c in run.get("fastest_selection", []) if "seconds_per_step" in c]
    if not timed:
        return []
    parts = [
        f"{c.get('optimizer', 'lamb')} {1000 * c['seconds_per_step']:.1f} ms/step" for c in timed
    ]
    return [
        f"`{name}` in {window.label} picked its fastest among candidates timed once each "
        f"(one block of {run['steps']} steps right after building, by optimizer): "
        + ", ".join(parts)
        + "."
    ]


def not_finished(newest: Window) -> str:
    """The throughput steps the newest window did not finish, and why."""
    parts = []
    for step in newest.summary.get("steps", []):
        if step["name"] in RUNS and step.get("status") != "ok":
            why = (
                step.get("reason") or f"{step['status']} at its {step.get('timeout_s', '?')} s cap"
            )
            parts.append(f"`{step['name']}` {why}")
    if not parts:
        return ""
    return f"Not finished in the newest window, {newest.label}: " + "; ".join(parts) + "."


def render(found: list[Window]) -> str:
    runs = [(name, *hit) for name in RUNS if (hit := newest_record(found, name))]
    if not runs:
        raise SystemExit("error: perf_table: no complete throughput_*.json in any window")
    first = runs[0][2]
    header = [
        f"BERT-Large, {first['precision']}, batch {first['batch']}, the MLPerf length mix "
        f"(mean length {first['workload']['mean_length']:.0f}), the whole training step with "
        f"the optimizer, one process; each run from the newest window that finished it "
        f"(records: `benchmarks/results/gpu/<window>_window/`). samples/s is {STATISTIC}; MFU "
        f"against the bf16 matmul rate measured in the same run. Ratios compare variants of "
        f"one run only.",
        "",
        "| run | window | variant | what runs | rounds (samples/s) | samples/s | MFU | ratio "
        "in the run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = [row for name, window, run in runs for row in run_rows(name, window, run)]
    notes = [line for name, window, run in runs for line in selection_lines(name, window, run)]
    one_process = newest_record(found, ABLATION_RUN)
    every_run = runs + ([(ABLATION_RUN, *one_process)] if one_process else [])
    notes += [not_finished(found[-1]), ablation(found), goals(every_run)]
    return "\n".join(header + rows) + "\n\n" + "\n\n".join(n for n in notes if n)


def ours(run: dict) -> dict[str, dict]:
    """The run's variants of this project (every one but the HF baselines)."""
    return {k: v for k, v in run["variants"].items() if k not in HF}


def goals(runs: list[tuple[str, Window, dict]]) -> str:
    """Each goal against the best of this project's variants, a ratio within one run only."""
    measured: dict[str, tuple[float, Window]] = {}
    executed = None  # (ours, HF compiled, window): executed-FLOP MFU of our best bf16 step
    for _, window, run in runs:
        mine = {k: steady(v) for k, v in ours(run).items()}
        if not mine:
            continue
        best = max(mine.values())
        figures = {"samples_per_s": best}
        for hf in HF:
            if hf in run["variants"]:
                figures[f"fastest/{hf}"] = best / steady(run["variants"][hf])
        for key, value in figures.items():
            if key in TARGETS and value > measured.get(key, (0.0, None))[0]:
                measured[key] = (value, window)
        bf16 = [
            executed_mfu(v, run) for v in ours(run).values() if not v["options"].get("fp8_linear")
        ]
        bf16 = [m for m in bf16 if m is not None]
        hf = run["variants"].get("hf_compile")
        hf_mfu = None if hf is None else executed_mfu(hf, run)
        if bf16 and hf_mfu is not None and (executed is None or max(bf16) > executed[0]):
            executed = (max(bf16), hf_mfu, window)
    parts = []
    for key, goal in TARGETS.items():
        if key not in measured:
            parts.append(f"{key}: not measured")
            continue
        value, window = measured[key]
        verdict = "met" if value >= goal else "not met"
        parts.append(f"{key} {value:.2f} on {window.device} (goal {goal:g}: {verdict})")
    if executed is None:
        parts.append("executed-FLOP MFU of the bf16 step against HF compiled: not measured")
    else:
        mine_mfu, hf_mfu, window = executed
        verdict = "met" if mine_mfu > hf_mfu else "not met"
        parts.append(
            f"executed-FLOP MFU of the bf16 step {mine_mfu:.3f} against HF compiled's "
            f"{hf_mfu:.3f} on {window.device} (goal: above it: {verdict})"
        )
    return (
        "Goals (on one H100; our best variant of a run, ratios within a run): "
        + "; ".join(parts)
        + "."
    )


def scaled(variant: dict, key: str) -> float | None:
    """A per-variant figure at the steady rate (MFU is proportional to the rate within a run:
    the same batches every round); None where the record lacks it (older runs)."""
    if variant.get(key) is None:
        return None
    return variant[key] * steady(variant) / variant["samples_per_s"]


def executed_mfu(variant: dict, run: dict) -> float | None:
    """MFU on executed FLOPs at the steady rate: as recorded, or for a record older than that
    figure, derived from its FLOP counts where they say it (HF computes the workload's
    hf_executed_flops_per_step; ours without padding, graphs or the last-layer subset computes
    exactly the useful FLOPs); None otherwise."""
    if variant.get("mfu_executed") is not None:
        return scaled(variant, "mfu_executed")
    options, workload = variant["options"], run.get("workload", {})
    if "transformers" in options:
        executed, useful = (
            workload.get("hf_executed_flops_per_step"),
            workload.get("useful_flops_per_step"),
        )
        return scaled(variant, "mfu") * executed / useful if executed and useful else None
    padded = options.get("attention") == "padded_sdpa"
    if padded or options.get("last_layer_subset") or options.get("cuda_graphs"):
        return None
    return scaled(variant, "mfu")


# ---- the ablation: the window's one throughput process ---------------------------------------
ABLATION_RUN = "throughput"  # bert/tools/gpu/window.py: THROUGHPUT_VARIANTS in one process
LEVERS = {  # options bench_throughput records -> the lever's flag in its option-set syntax
    "fused": lambda o: bool(o.get("fused")),
    "fp8": lambda o: bool(o.get("fp8_linear")),
    "graphs": lambda o: bool(o.get("cuda_graphs")),
    "fusedlamb": lambda o: o.get("optimizer") == "fusedlamb",
    "sharded": lambda o: o.get("optimizer") == "sharded",
    "subset": lambda o: bool(o.get("last_layer_subset")),
    "compile": lambda o: bool(o.get("compile")),
    "sublayers": lambda o: bool(o.get("compile_sublayers")),
}


def lever_set(options: dict) -> tuple[str, frozenset[str]]:
    """A variant of ours as (attention, its levers), read from its options."""
    return options.get("attention", ""), frozenset(k for k, on in LEVERS.items() if on(options))


def adds(name: str, run: dict) -> str:
    """What each of the variant's levers adds: its rate over the same variant without that
    lever, where the run has one."""
    mine = ours(run)
    by_levers = {lever_set(v["options"]): k for k, v in mine.items() if k != "reference"}
    attention, levers = lever_set(mine[name]["options"])
    parts = []
    for lever in sorted(levers):
        base = by_levers.get((attention, levers - {lever}))
        if base is not None:
            gain = steady(mine[name]) / steady(mine[base])
            parts.append(f"+{lever} {gain:.2f}x over `{base}`")
    return "; ".join(parts)


def figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def ablation(found: list[Window]) -> str:
    """The newest complete one-process run: every variant, its MFU four ways, what each lever
    adds, its ratio to both HF baselines of the same process."""
    hit = newest_record(found, ABLATION_RUN)
    if hit is None:
        return (
            "The ablation (the GPU window's one `throughput` process: each lever alone and "
            "together beside both HF baselines) has no complete record yet."
        )
    window, run = hit
    datasheet = (run.get("datasheet_peak") or {}).get("tflops")
    measured = run.get("matmul_peak_tflops")
    lines = [
        f"The ablation, one process, {window.label}: samples/s is {STATISTIC}; MFU on useful "
        f"FLOPs (padding not credited) and on executed FLOPs (what the variant computes), "
        f"against the bf16 matmul rate measured in the run "
        f"({f'{measured:.0f} TFLOP/s' if measured else 'not recorded'}) and the datasheet "
        f"({f'{datasheet:g} TFLOP/s' if datasheet else 'none for this device'}).",
        "",
        "| variant | what runs | rounds (samples/s) | samples/s | MFU useful: measured, "
        "datasheet | MFU executed: measured, datasheet | what each lever adds | x HF eager "
        "| x HF compiled |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, v in run["variants"].items():
        rate = steady(v)
        rounds = ", ".join(f"{r:.0f}" for r in v.get("samples_per_s_per_round", []))
        against = [
            f"{rate / steady(run['variants'][hf]):.2f}x"
            if hf in run["variants"] and name not in HF
            else ""
            for hf in HF
        ]
        lines.append(
            f"| `{name}` | {describe(v['options'])} | {rounds} | {rate:.0f} | "
            f"{figure(scaled(v, 'mfu'))}, {figure(scaled(v, 'mfu_datasheet'))} | "
            f"{figure(executed_mfu(v, run))}, {figure(scaled(v, 'mfu_executed_datasheet'))} | "
            f"{adds(name, run) if name not in HF else ''} | {' | '.join(against)} |"
        )
    refused = run.get("variants_refused") or {}
    errors = run.get("variant_errors") or {}
    if refused or errors:
        left = [f"`{k}` refused: {v}" for k, v in refused.items()]
        left += [f"`{k}` failed: {v}" for k, v in errors.items()]
        lines += ["", "Not in the run: " + "; ".join(left) + "."]
    return "\n".join(lines)
