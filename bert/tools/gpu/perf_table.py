"""The README's GPU performance table, generated from a window's throughput JSON files.

    python -m bert.tools.gpu.perf_table benchmarks/results/gpu/2026-11-26_window [--write-readme]

Every row is one variant of one bench_throughput.py run as recorded (device, commit, command in
the JSON); each run compares its variants in the same process, so ratios are read within a run
only. Without --write-readme the table is printed; with it, the README's block between the
markers below is replaced (tests/tools/test_perf_table.py checks the README equals the records).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bert.core.files import write_text_atomic
from bert.tools.common import ROOT

BEGIN, END = "<!-- perf-table:begin -->", "<!-- perf-table:end -->"
# issue 23's goals, on one H100 in bf16, each measured in one run
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
    if options.get("last_layer_subset"):
        parts.append("last-layer subset")
    if options.get("optimizer") in OPTIMIZERS:
        parts.append(OPTIMIZERS[options["optimizer"]])
    return "; ".join(p for p in parts if p)


def run_rows(name: str, run: dict) -> list[str]:
    rows = []
    for variant, result in run["variants"].items():
        ratio = next(
            (
                f"{value:.2f}x {key.split('/')[1]}"
                for key, value in run["ratios"].items()
                if key.startswith(f"{variant}/") and "paired" not in key
            ),
            "",
        )
        rows.append(
            f"| `{name}` | {VARIANT_NAMES.get(variant, variant)} | "
            f"{describe(result['options'])} | {result['samples_per_s']:.0f} | "
            f"{result['mfu']:.3f} | {ratio} |"
        )
    return rows


def render(folder: Path) -> str:
    runs = {
        path.stem: json.loads(path.read_text()) for path in sorted(folder.glob("throughput_*.json"))
    }
    if not runs:
        raise SystemExit(f"error: perf_table: no throughput_*.json in {folder}")
    first = next(iter(runs.values()))
    header = [
        f"BERT-Large, {first['precision']}, batch {first['batch']}, the MLPerf length mix "
        f"(mean length {first['workload']['mean_length']:.0f}), the whole training step with "
        f"the optimizer, one process; {first['device']}, torch {first['torch']}, "
        f"{first['date'][:10]}, commit `{first['commit']}`; records: "
        f"`{folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder}`. MFU against "
        f"the bf16 matmul rate measured in the same run "
        f"({first['matmul_peak_tflops']:.0f} TFLOP/s). Ratios compare variants of one run only.",
        "",
        "| run | variant | what runs | samples/s | MFU | ratio in the run |",
        "|---|---|---|---|---|---|",
    ]
    rows = [row for name, run in runs.items() for row in run_rows(name, run)]
    return "\n".join(header + rows + ["", goals(runs)])


def goals(runs: dict[str, dict]) -> str:
    best = max(
        v["samples_per_s"]
        for run in runs.values()
        for k, v in run["variants"].items()
        if k == "fastest"
    )
    measured = {"samples_per_s": best}
    for run in runs.values():
        for key, value in run["ratios"].items():
            if key in TARGETS and "paired" not in key:
                measured[key] = max(measured.get(key, 0.0), value)
    parts = []
    for key, goal in TARGETS.items():
        if key not in measured:
            parts.append(f"{key}: not measured")
            continue
        verdict = "met" if measured[key] >= goal else "not met"
        parts.append(f"{key} {measured[key]:.2f} (goal {goal:g}: {verdict})")
    return "Goals (issue 23): " + "; ".join(parts) + "."


def replace_block(text: str, table: str) -> str:
    if BEGIN not in text or END not in text:
        raise SystemExit(f"error: perf_table: README.md has no {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{table}\n{END}{rest.split(END, 1)[1]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", type=Path, help="a window's records folder")
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args(argv)
    table = render(args.folder.resolve())
    if args.write_readme:
        readme = ROOT / "README.md"
        write_text_atomic(readme, replace_block(readme.read_text(), table))
    else:
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
