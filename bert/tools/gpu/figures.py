"""The GPU figures kernels/VALIDATION.md and the README quote, generated from the windows:
the fused LAMB step (bench_lamb), the fused model's throughput per window, train_compare, and
the README's short GPU status. Every figure names its window (date, device, commit)."""

from __future__ import annotations

from bert.tools.gpu.perf_table import describe
from bert.tools.gpu.records import (
    STATISTIC,
    TARGET_GPU,
    Window,
    newest_record,
    newest_tests,
    steady,
)
from bert.tools.gpu.verdicts import never_on


def lamb_bench(found: list[Window]) -> str:
    lines = [
        "| window | world (rank 0's shard) | parameters | elements | torch reference ms | "
        "fused ms | speedup | fused GB/s | fused <= torch / 3 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for w in found:
        for r in (w.record("bench_lamb") or {}).get("results", []):
            lines.append(
                f"| {w.label} | {r['world']} | {r['param_dtype']} | {r['elements']:,} | "
                f"{r['torch_eager_ms']:.2f} | {r['fused_ms']:.2f} | "
                f"{r['torch_eager_ms'] / r['fused_ms']:.2f}x | {r['fused_gbps']:.0f} | "
                f"{'met' if r['target_met'] else 'not met'} |"
            )
    return "\n".join(lines)


def rate(variant: dict) -> str:
    rounds = ", ".join(f"{r:.0f}" for r in variant.get("samples_per_s_per_round", []))
    return f"{steady(variant):.0f} (rounds {rounds})"


def fused_throughput(found: list[Window]) -> str:
    """The fused model against the same window's eager run, window by window."""
    lines = [
        f"samples/s is {STATISTIC}. The two runs of a window are separate processes.",
        "",
        "| window | fused run: what runs | fused samples/s | eager `flash_varlen` samples/s |",
        "|---|---|---|---|",
    ]
    for w in found:
        fused, eager = w.record("throughput_fused"), w.record("throughput_eager")
        if fused is None or fused.get("partial") or "fastest" not in fused["variants"]:
            continue
        mine = fused["variants"]["fastest"]
        base = rate(eager["variants"]["fastest"]) if eager else "not run"
        lines.append(f"| {w.label} | {describe(mine['options'])} | {rate(mine)} | {base} |")
    return "\n".join(lines)


def train_compare(found: list[Window]) -> str:
    lines = [
        "| window | steps | final MLM accuracy, reference | fused | gap (tolerance) | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for w in found:
        record = w.record("train_compare")
        if record is None:
            continue
        c, acc = record["comparison"], accuracies(record)
        ref, fused = (
            f"{acc[k]:.4f}" if k in acc else "not recorded" for k in ("reference", "fused")
        )
        verdict = "passed" if c["passed"] else "failed"
        if acc and not any(acc.values()):  # a gap of 0 between two runs that learned nothing
            verdict += " as recorded, but neither run learned"
        lines.append(
            f"| {w.label} | {c['steps_compared']} | {ref} | {fused} | "
            f"{c['accuracy_gap']:.4f} ({c['tolerance']}) | {verdict} |"
        )
    return "\n".join(lines)


def accuracies(record: dict) -> dict[str, float]:
    """Final MLM accuracy per run: the comparison's, else each run's own (older records)."""
    if "accuracies" in record["comparison"]:
        return record["comparison"]["accuracies"]
    runs = record.get("runs", {})
    return {
        k: r["final_eval_mlm_accuracy"] for k, r in runs.items() if "final_eval_mlm_accuracy" in r
    }


def status(found: list[Window]) -> str:
    """The README's GPU sentences: the tests (each file's newest run) on each GPU kind, the
    newest learning proof, train_compare and fused LAMB records, the GPU never run."""
    kinds = sorted({w.device for w in found}, key=lambda d: TARGET_GPU not in d)
    parts = [
        f"GPU tests on {kind}, each file's newest run: {newest_tests(found, kind)}"
        for kind in kinds
    ]
    proof = newest_record(found, "learning_proof")
    if proof:
        window, record = proof
        reached = ", ".join(f"{k} {v}" for k, v in record["verdict"]["samples_to_target"].items())
        head = "passed" if record["verdict"]["passed"] else "FAILED"
        parts.append(
            f"learning proof {window.label} {head}: samples to {record['target']}: {reached}"
        )
    smoke = newest_record(found, "smoke")
    if smoke:
        window, record = smoke
        failed = [name for name, c in record["checks"].items() if not c["passed"]]
        parts.append(
            f"end-to-end smoke {window.label}: {len(record['checks']) - len(failed)} of "
            f"{len(record['checks'])} checks passed"
            + (f", failed: {', '.join(f'`{n}`' for n in failed)}" if failed else "")
        )
    compare = newest_record(found, "train_compare")
    if compare:
        window, record = compare
        acc = accuracies(record)
        parts.append(
            f"`train_compare` {window.label} {record['steps']} steps, final MLM accuracy "
            + ", ".join(f"{k} {v:.4f}" for k, v in acc.items())
        )
    lamb = newest_record(found, "bench_lamb")
    if lamb:
        speedups = [r["torch_eager_ms"] / r["fused_ms"] for r in lamb[1].get("results", [])]
        parts.append(
            f"fused LAMB step {min(speedups):.1f}-{max(speedups):.1f}x the torch one "
            f"({lamb[0].label})"
        )
    return f"{'. '.join(parts)}. {never_on(found, 'A100', 'sm_80')}".strip()
