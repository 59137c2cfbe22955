"""How `bert/plan/published_results.json` was made; not used at run time.

Reads every closed-division BERT result folder of the mlcommons training results repositories
v3.0 to v5.0 (each a local git mirror: `python -m bert.plan.collect_published MIRROR_ROOT`,
MIRROR_ROOT holding `mlcommons+training_results_v<round>/repo`), and keeps one row per result
whose GPU kind the planner knows: the system's GPU count (systems/<system>.json:
number_of_nodes x accelerators_per_node), the global batch and hyperparameters the logs print,
every run's run_start..run_stop minutes, samples at its last eval (epoch_num) and its evals.
A folder repeated unchanged in a later round (same minutes) is kept once, in its first round.
Each multi-node result's network (NICs per node, SHARP) is not read here: it was entered by
hand, with the file it comes from, in published_topology.json (bert/plan/network.py).
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

from bert.mlperf import constants as C
from bert.mlperf.constants import MLLOG_MARKER

OUT = Path(__file__).with_name("published_results.json")
ROUNDS = ("3.0", "3.1", "4.0", "4.1", "5.0")
HP_KEYS = (
    C.GLOBAL_BATCH_SIZE,
    C.OPT_BASE_LR,
    C.OPT_LAMB_BETA_1,
    C.OPT_LAMB_BETA_2,
    C.OPT_LAMB_WEIGHT_DECAY,
    "opt_epsilon",  # what the published logs call it
    C.OPT_LR_TRAINING_STEPS,
    C.NUM_WARMUP_STEPS,
    C.START_WARMUP_STEP,
    C.EVAL_SAMPLES,
)


def kind_of(accelerator: str) -> str | None:
    """The planner's GPU kind for a systems/*.json accelerator_model_name (None: not known)."""
    a = accelerator.lower()
    rules = (
        ("gb200", "gb200"),
        ("b200", "b200"),
        ("h200", "h200"),
        ("h100-pcie", "h100-pcie"),
        ("h100", "h100"),
        ("gaudi2", "gaudi2"),
    )
    for needle, kind in rules:
        if needle in a:
            return kind
    if "a100-sxm" in a:
        return "a100-40gb" if "40gb" in a else "a100-80gb"
    return None


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True).stdout


def _run(text: str) -> dict | None:
    first, last, evals, start = {}, {}, [], None
    for line in text.splitlines():
        i = line.find(MLLOG_MARKER)
        if i < 0:
            continue
        try:
            rec = json.loads(line[i + 8 :])
        except ValueError:
            continue
        key = rec["key"]
        first.setdefault(key, rec)
        last[key] = rec
        if key == C.EVAL_START:
            start = rec["time_ms"]
        elif key == C.EVAL_STOP and start is not None:
            evals.append((rec["time_ms"] - start) / 1000)
            start = None
    if C.RUN_START not in first or C.RUN_STOP not in last:
        return None
    stop = last[C.RUN_STOP]
    return {
        "minutes": round((stop["time_ms"] - first[C.RUN_START]["time_ms"]) / 6e4, 5),
        "status": stop.get("metadata", {}).get(C.STATUS),
        "samples": last.get(C.EVAL_ACCURACY, {}).get("metadata", {}).get(C.EPOCH_NUM),
        "evals": sum(1 for line in text.splitlines() if f'"key": "{C.EVAL_ACCURACY}"' in line),
        "eval_s": round(statistics.median(evals), 4) if evals else None,
        "hyperparameters": {k: first[k]["value"] for k in HP_KEYS if k in first},
    }


def collect(root: str) -> list[dict]:
    rows, seen = [], set()
    for rnd in ROUNDS:
        repo = f"{root}/mlcommons+training_results_v{rnd}/repo"
        commit = _git(repo, "rev-parse", "HEAD").strip()
        files = _git(repo, "ls-tree", "-r", "--name-only", "HEAD").split("\n")
        pattern = re.compile(r"/results/[^/]+/bert/result_\d+\.txt$")
        for folder in sorted({f.rsplit("/", 1)[0] for f in files if pattern.search(f)}):
            submitter, _, system, _ = folder.split("/")
            try:
                spec = json.loads(_git(repo, "show", f"HEAD:{submitter}/systems/{system}.json"))
            except ValueError:
                continue
            kind = kind_of(spec.get("accelerator_model_name", ""))
            if kind is None or spec.get("division") != "closed":
                continue
            logs = sorted(f for f in files if f.startswith(folder + "/result_"))
            runs = [r for r in (_run(_git(repo, "show", f"HEAD:{f}")) for f in logs) if r]
            ok = sorted(r["minutes"] for r in runs if r["status"] == C.SUCCESS)
            if len(ok) < 3:
                continue
            gpus = int(spec["number_of_nodes"]) * int(spec["accelerators_per_node"])
            olympic = statistics.mean(ok[1:-1])
            key = (gpus, round(olympic, 3))
            if key in seen:
                continue
            seen.add(key)
            samples = [r["samples"] for r in runs if r["status"] == C.SUCCESS and r["samples"]]
            eval_s = [r["eval_s"] for r in runs if r["eval_s"]]
            rows.append(
                {
                    "round": f"v{rnd}",
                    "submitter": submitter,
                    "system": system,
                    "gpu": kind,
                    "accelerator": spec.get("accelerator_model_name"),
                    "gpus": gpus,
                    "gpus_per_node": int(spec["accelerators_per_node"]),
                    C.GLOBAL_BATCH_SIZE: int(runs[0]["hyperparameters"][C.GLOBAL_BATCH_SIZE]),
                    "olympic_mean_minutes": round(olympic, 4),
                    "runs_minutes": [r["minutes"] for r in runs],
                    "mean_samples": round(statistics.mean(samples)) if samples else None,
                    "evals_mean": round(statistics.mean(r["evals"] for r in runs), 2),
                    "eval_s_median": round(statistics.median(eval_s), 4) if eval_s else None,
                    "hyperparameters": runs[0]["hyperparameters"],
                    "source": f"mlcommons/training_results_v{rnd}@{commit[:12]}:{folder}",
                }
            )
    return rows


if __name__ == "__main__":
    result = collect(sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror")
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{len(result)} results -> {OUT}")
