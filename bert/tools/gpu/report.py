"""What the GPU harness (validate_gpu.py) puts in summary.json: test counts, speedups, targets."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

from bert.tools.common import ROOT

OUTCOMES = ("passed", "failed", "skipped", "errored", "crashed")  # crashed: journal only
FAILURE_LINES = 12  # of a failed test's text kept in summary.json (the log has it all)
# The throughput targets for one H100, bf16, BERT-Large on the MLPerf length mix.
TARGETS = {"fastest_samples_per_s": 1000.0, "fastest/hf_eager": 3.0, "fastest/hf_compile": 2.0}


def collected(log: Path) -> dict:
    """Counts from `pytest --collect-only -q` output: node ids per file, and collection errors."""
    text = log.read_text() if log.is_file() else ""
    per_file = Counter(
        line.split("::")[0]
        for line in text.splitlines()
        if "::" in line and not line.startswith(("ERROR", "FAILED"))
    )
    errors = re.search(r"(\d+) errors?", text.splitlines()[-1] if text.strip() else "")
    return {
        "collected": sum(per_file.values()),
        "errored": int(errors.group(1)) if errors else 0,
        "per_file": {name: {"collected": n} for name, n in sorted(per_file.items())},
    }


def junit_counts(xml: Path) -> dict:
    """Passed, failed, skipped and errored tests, in all and per test file, from JUnit XML."""
    if not xml.is_file():
        return {
            "collected": 0,
            **dict.fromkeys(OUTCOMES, 0),
            "per_file": {},
            "note": "no JUnit file: pytest did not finish (see gpu-tests.log)",
        }
    per_file: dict[str, Counter] = defaultdict(Counter)
    for case in ET.parse(xml).getroot().iter("testcase"):
        per_file[test_file(case.get("classname", ""))][outcome(case)] += 1
    totals = Counter()
    for counts in per_file.values():
        totals.update(counts)
    files = {name: {k: counts[k] for k in OUTCOMES} for name, counts in sorted(per_file.items())}
    return {
        "collected": sum(totals.values()),
        **{k: totals[k] for k in OUTCOMES},
        "per_file": files,
    }


def journal_counts(tests: dict[str, dict]) -> dict[str, int]:
    """One file's counts from its test journal (bert.tools.gpu.pytest_journal.read_journal)."""
    counts = Counter(test["outcome"] for test in tests.values())
    return {k: counts[k] for k in OUTCOMES}


def journal_failures(tests: dict[str, dict]) -> dict[str, str]:
    """nodeid -> the end of its failure text, for every test that failed, errored or crashed."""
    failures = {}
    for nodeid, test in tests.items():
        if test["outcome"] == "crashed":
            failures[nodeid] = "crashed: the pytest process died in this test (see the log)"
        elif test["outcome"] in ("failed", "errored"):
            lines = test.get("longrepr", "").strip().splitlines()
            failures[nodeid] = "\n".join(lines[-FAILURE_LINES:])
    return failures


def outcome(case: ET.Element) -> str:
    tags = {child.tag for child in case}
    if "error" in tags:
        return "errored"
    if "failure" in tags:
        return "failed"
    return "skipped" if "skipped" in tags else "passed"


def test_file(classname: str) -> str:
    """'tests.kernels.test_dense.TestX' -> 'tests/kernels/test_dense.py' (the longest prefix that
    names a file of the project)."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = "/".join(parts[:end]) + ".py"
        if (ROOT / candidate).is_file():
            return candidate
    return classname


def speedups(payload: dict) -> list[dict]:
    """Per microbenchmark row: each of our implementations against each PyTorch one
    (torch_eager, torch_compile), as time ratios (> 1: ours is faster)."""
    rows = []
    for row in payload.get("results", []):
        times = {k[:-3]: v for k, v in row.items() if k.endswith("_ms") and v}
        case = {
            k: v
            for k, v in row.items()
            if not k.endswith(("_ms", "_gbps")) and not isinstance(v, bool)
        }
        ours = [name for name in times if not name.startswith("torch_")]
        theirs = [name for name in times if name.startswith("torch_")]
        case.update(
            {
                f"{mine}_vs_{base}": round(times[base] / times[mine], 3)
                for mine in ours
                for base in theirs
            }
        )
        rows.append(case)
    return rows


def throughput(payload: dict) -> dict:
    """samples/s and MFU per variant, the ratios, and what the fastest variant was."""
    variants = {
        name: {
            "samples_per_s": round(v["samples_per_s"], 2),
            "samples_per_s_per_round": [round(r, 1) for r in v.get("samples_per_s_per_round", [])],
            "mfu": round(v["mfu"], 4),
            "mfu_executed": v.get("mfu_executed") and round(v["mfu_executed"], 4),
            "options": v.get("options"),
        }
        for name, v in payload.get("variants", {}).items()
    }
    return {
        "device": payload.get("device"),
        "variants": variants,
        "partial": payload.get("partial", False),
        "rounds_done": payload.get("rounds_done"),
        "ratios": {
            k: round(v, 3)
            for k, v in payload.get("ratios", {}).items()
            if not k.endswith("_paired_median")
        },
        "fastest_selection": payload.get("fastest_selection", []),
        "variants_refused": payload.get("variants_refused", {}),
        "variant_errors": payload.get("variant_errors", {}),
    }


def targets(results: dict) -> dict:
    """Each target with the best value measured in this stage (None: not measured)."""
    best = dict.fromkeys(TARGETS)
    for result in results.values():
        fastest = result["variants"].get("fastest")
        if fastest:
            best["fastest_samples_per_s"] = max(
                best["fastest_samples_per_s"] or 0, fastest["samples_per_s"]
            )
        for key in ("fastest/hf_eager", "fastest/hf_compile"):
            if key in result["ratios"]:
                best[key] = max(best[key] or 0, result["ratios"][key])
    return {
        key: {
            "target": goal,
            "measured": best[key],
            "met": None if best[key] is None else best[key] >= goal,
        }
        for key, goal in TARGETS.items()
    }


def totals(per_file: dict) -> dict:
    """Counts over every file of a per-file table (files without counts are listed apart)."""
    counted = {name: c for name, c in per_file.items() if "passed" in c}
    sums = {k: sum(c[k] for c in counted.values()) for k in OUTCOMES}
    return {
        "collected": sum(sums.values()),
        **sums,
        "files_without_counts": sorted(set(per_file) - set(counted)),
    }


def probe_verdicts(probe: dict) -> list[str]:
    """probe_sdpa.py's cases in one line each: kernel -> ok / WRONG / refused."""
    lines = []
    for case in probe.get("cases", []):
        kernels = ", ".join(
            f"{name} {'refused' if not v['accepted'] else 'ok' if v['passed'] else 'WRONG'}"
            for name, v in case["kernels"].items()
        )
        lines.append(
            f"S={case['longest']} {case['dtype']}: {kernels}; padded_sdpa "
            f"{'ok' if case['padded_sdpa']['passed'] else 'WRONG'}"
        )
    return lines


def attention_verdicts(record: dict) -> list[str]:
    """probe_attention.py's cases, one line per dtype: each path ok (with its training-step
    time, else its forward and backward), WRONG, or - (unavailable)."""
    lines = []
    for dtype in dict.fromkeys(c["dtype"] for c in record.get("cases", [])):
        parts = []
        for case in (c for c in record["cases"] if c["dtype"] == dtype):
            if not case["available"]:
                parts.append(f"{case['path']} -")
            elif not case["check"]["passed"]:
                parts.append(f"{case['path']} WRONG")
            else:
                ms = case.get("train_ms", case.get("forward_backward_ms"))
                parts.append(f"{case['path']} ok" + (f" {ms:.2f} ms" if ms is not None else ""))
        lines.append(f"{dtype}: " + ", ".join(parts))
    return lines
