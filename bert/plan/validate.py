"""Held-out validation of the scale model (docs/plan.md).

Every published result of bert/plan/published_results.json on 8+ GPUs of a known kind is scored
through the CLI as a user runs it (`--gpus G --gpus-per-node n --gpu KIND --batch B --json`,
default calibration: the kind's named 8-GPU result), except the calibration results themselves
and the TRAINING subset. `python -m bert.plan.validate` prints the table.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

from bert.core import gpus
from bert.plan import scale

# results the scale model's fitted constants (scale.OVERHEAD_SAMPLES, scale.EVAL_SPEED) were
# chosen on (source folders); never scored
TRAINING = (
    "HPE/results/HPE-Cray-XD670-Gen11-H100-SXM5-80GB_n2_pytorch_23.09/bert",
    "NVIDIA/results/dgxh100_n96_ngc23.04_pytorch/bert",
)


def calibration_folders() -> set[str]:
    return {k.calibration for k in gpus.GPUS.values()}


def held_out() -> list[dict]:
    skip = calibration_folders() | set(TRAINING)
    return [
        r
        for r in scale.published_results()
        if r["gpus"] >= 8 and r["source"].split(":", 1)[1] not in skip
    ]


def predict(row: dict) -> float | None:
    from bert.plan.cli import main

    argv = [
        "--gpus",
        str(row["gpus"]),
        "--gpus-per-node",
        str(row["gpus_per_node"]),
        "--gpu",
        row["gpu"],
        "--batch",
        str(row["global_batch_size"]),
        "--json",
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        if main(argv) != 0:
            return None
    candidate = json.loads(out.getvalue())["candidates"][0]
    return candidate.get("minutes", {}).get("mean")


def table() -> list[dict]:
    rows = []
    for r in held_out():
        predicted = predict(r)
        error = None if predicted is None else predicted / r["olympic_mean_minutes"] - 1
        rows.append({**r, "predicted_minutes": predicted, "error": error})
    return rows


def summary(rows: list[dict]) -> dict:
    def share(subset):
        ok = [r for r in subset if r["error"] is not None and abs(r["error"]) <= 0.15]
        return len(ok), len(subset)

    return {
        "all": share(rows),
        "multi_node": share([r for r in rows if r["gpus"] > r["gpus_per_node"]]),
        "512_plus": share([r for r in rows if r["gpus"] >= 512]),
    }


if __name__ == "__main__":
    rows = table()
    print(
        "| submitter, system | round | GPU | GPUs | batch | olympic mean min | predicted | error |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["gpu"], r["gpus"], r["round"])):
        pred = "-" if r["predicted_minutes"] is None else f"{r['predicted_minutes']:.3f}"
        err = "-" if r["error"] is None else f"{r['error']:+.1%}"
        print(
            f"| {r['submitter']}, {r['system']} | {r['round']} | {r['gpu']} | {r['gpus']} | "
            f"{r['global_batch_size']} | {r['olympic_mean_minutes']:.3f} | {pred} | {err} |"
        )
    print(json.dumps(summary(rows)), file=sys.stderr)
