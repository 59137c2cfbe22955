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
# the speed goals, on one H100 in bf16, each measured in one run
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
    notes += [not_finished(found[-1]), goals(runs)]
    return "\n".join(header + rows) + "\n\n" + "\n\n".join(n for n in notes if n)


def goals(runs: list[tuple[str, Window, dict]]) -> str:
    measured: dict[str, tuple[float, Window]] = {}
    for _, window, run in runs:
        figures = dict(ratios(run))
        if "fastest" in run["variants"]:
            figures["samples_per_s"] = steady(run["variants"]["fastest"])
        for key, value in figures.items():
            if key in TARGETS and value > measured.get(key, (0.0, None))[0]:
                measured[key] = (value, window)
    parts = []
    for key, goal in TARGETS.items():
        if key not in measured:
            parts.append(f"{key}: not measured")
            continue
        value, window = measured[key]
        verdict = "met" if value >= goal else "not met"
        parts.append(f"{key} {value:.2f} on {window.device} (goal {goal:g}: {verdict})")
    return "Goals (on one H100): " + "; ".join(parts) + "."
