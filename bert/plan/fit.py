"""Fits the scale model's free constants (scale.Fitted) on the training subset only.

    python -m bert.plan.fit            # the fitted constants, and the training subset's fit
    python -m bert.plan.fit --list     # the training subset and the calibration points

The split of bert/plan/published_results.json, fixed before any constant was fitted:
- calibration points (`calibration_row`): one per GPU kind, what `open-bert-plan` calibrates on
  by default (bert/core/gpus.py names them; a test checks they follow this rule). Among the
  kind's 8-GPU results, those of the training rounds where the kind has any, else those of its
  first round; single-node ones where any exist; of these, the one with the median whole-run
  throughput (the lower median of an even count; source path breaks ties). Neither fitted on
  nor scored.
- the training subset (`training_rows`): every other result of rounds v3.0 and v3.1
  (TRAINING_ROUNDS), at any GPU count: the past, from which the later rounds are predicted.
- held out: every other result of v4.0 and later on 8 or more GPUs, scored by validate.py.

The fit: for each training result, R of its GPU kind comes from the kind's calibration point
exactly as the planner computes it (scale.calibrate_row), each result on its own network as
its submission records it (NICs and SHARP, bert/plan/network.py), and the model predicts the
result's training time (with the samples and evals it actually took, so the RCPs'
convergence does not enter) and, where its logs time evals, its eval time. The residuals are
logs of predicted over measured; the loss is soft-L1 on them (scale 0.05), because systems of
one kind differ by up to 40% at one scale (a 350 W power-capped PCIe H100, an older software
stack) and plain least squares would follow those outliers. Levenberg-Marquardt in numpy with a
forward-difference Jacobian, each constant kept inside its bounds: deterministic, so the test
refits the same values.
"""

from __future__ import annotations

import math
import statistics

import numpy as np

from bert.core import gpus
from bert.core.inputs import command_parser
from bert.plan import scale

TRAINING_ROUNDS = ("v3.0", "v3.1")
NAMES = ("overhead_samples", "eval_speed", "hidden")
# where the fit starts and what it may reach: bounds that only keep each constant physical
# (`hidden` is a share, 0 to 1); the result lies inside them (a test refits it)
START = (20.0, 1.0, 0.5)
HIDDEN_GRID = tuple(i / 10 for i in range(11))
BOUNDS = ((0.0, 500.0), (0.05, 20.0), (0.0, 1.0))
SOFT_SCALE = 0.05  # log error where the loss turns from quadratic to linear (about 5%)


def _whole_rate(row: dict) -> float:
    return row["mean_samples"] / (row["olympic_mean_minutes"] * 60) / row["gpus"]


def calibration_row(kind: str, rows: list[dict]) -> dict:
    """The kind's calibration point under the rule of the module doc."""
    eight = [r for r in rows if r["gpu"] == kind and r["gpus"] == 8]
    if not eight:
        raise ValueError(f"no 8-GPU result of {kind}")
    pool = [r for r in eight if r["round"] in TRAINING_ROUNDS]
    pool = pool or [r for r in eight if r["round"] == min(x["round"] for x in eight)]
    pool = [r for r in pool if r["gpus_per_node"] == 8] or pool
    pool.sort(key=lambda r: (_whole_rate(r), scale.row_id(r)))
    return pool[(len(pool) - 1) // 2]


def calibration_ids(rows: list[dict]) -> dict[str, str]:
    """GPU kind -> row_id of its calibration point, for every kind with an 8-GPU result."""
    kinds = sorted({r["gpu"] for r in rows if r["gpus"] == 8})
    return {kind: scale.row_id(calibration_row(kind, rows)) for kind in kinds}


def training_rows(rows: list[dict]) -> list[dict]:
    calibration = set(calibration_ids(rows).values())
    return [r for r in rows if r["round"] in TRAINING_ROUNDS and scale.row_id(r) not in calibration]


def _topology(row: dict) -> scale.Topology:
    from bert.plan.planner import row_topology

    return row_topology(gpus.lookup(row["gpu"]), row)


def residuals(k: scale.Fitted, rows: list[dict], params: int) -> np.ndarray:
    """Log(predicted / measured) of every training result's training time, and of its eval time
    where its logs time evals."""
    peaks = _peaks(rows, params, k)
    out = []
    for row in training_rows(rows):
        peak, topo = peaks[row["gpu"]], _topology(row)
        train, _ = scale.predicted_seconds(row, params, topo, peak, k)
        out.append(math.log(train / scale.measured_training_seconds(row, params, topo, peak, k)))
        if row["eval_s_median"]:
            one = scale.eval_seconds(scale.EVAL_SAMPLES, row["gpus"], peak, k)
            out.append(math.log(one / row["eval_s_median"]))
    return np.array(out)


def _peaks(rows: list[dict], params: int, k: scale.Fitted | None) -> dict[str, float]:
    """GPU kind -> R from its calibration point in `rows`, under the constants `k`."""
    by_id = {scale.row_id(r): r for r in rows}
    return {
        kind: scale.calibrate_row(by_id[row_id], params, _topology(by_id[row_id]), k)
        for kind, row_id in calibration_ids(rows).items()
    }


def _run_time_error(row: dict, peaks: dict[str, float], params: int, k) -> float:
    train, evals = scale.predicted_seconds(row, params, _topology(row), peaks[row["gpu"]], k)
    return (train + evals) / (row["olympic_mean_minutes"] * 60) - 1


def in_sample_errors(rows: list[dict], params: int, k: scale.Fitted | None = None) -> list:
    """(training result, relative error of its predicted run time) under the constants `k`,
    with the samples and evals it took: the fit seen from inside, not a validation."""
    peaks = _peaks(rows, params, k)
    return [(row, _run_time_error(row, peaks, params, k)) for row in training_rows(rows)]


def refit_errors_at_scale(rows: list[dict], params: int, gpus: int = 512) -> list:
    """(training result on `gpus` or more, its error when the constants are refitted without
    it, its error when refitted without every such result): how the model predicts a large
    run it was not fitted on, since the held-out rounds hold only one. The run-time error is
    in_sample_errors' (the samples and evals the result took)."""
    large = [r for r in training_rows(rows) if r["gpus"] >= gpus]
    without_all = fit([r for r in rows if all(r is not x for x in large)], params)
    peaks_all = _peaks(rows, params, without_all)
    out = []
    for row in large:
        k = fit([r for r in rows if r is not row], params)
        out.append(
            (
                row,
                _run_time_error(row, _peaks(rows, params, k), params, k),
                _run_time_error(row, peaks_all, params, without_all),
            )
        )
    return out


def _soft(r: np.ndarray) -> np.ndarray:
    """Residuals whose squares sum to the soft-L1 loss: quadratic below SOFT_SCALE, linear above."""
    c = SOFT_SCALE
    return np.sign(r) * np.sqrt(2 * c * c * (np.sqrt(1 + (r / c) ** 2) - 1))


def _least_squares(terms, x: np.ndarray, free: list[int]) -> tuple[np.ndarray, float]:
    """Levenberg-Marquardt on the `free` coordinates of `x`, kept inside BOUNDS."""
    low, high = np.array(BOUNDS).T
    f = terms(x)
    cost, damping = f @ f, 1e-2
    for _ in range(100):
        jac = np.empty((len(f), len(free)))
        for col, j in enumerate(free):
            h = 1e-6 * max(1.0, abs(x[j]))
            h = -h if x[j] + h > high[j] else h  # stay inside the bounds
            probe = x.copy()
            probe[j] += h
            jac[:, col] = (terms(probe) - f) / h
        a, g = jac.T @ jac, jac.T @ f
        trial = x.copy()
        trial[free] += np.linalg.solve(a + damping * np.diag(np.diag(a) + 1e-12), -g)
        trial = np.clip(trial, low, high)
        f_trial = terms(trial)
        if f_trial @ f_trial < cost:
            gain = cost - f_trial @ f_trial
            x, f, cost, damping = trial, f_trial, f_trial @ f_trial, damping / 3
            if gain < 1e-9 * cost:
                break
        else:
            damping *= 5
            if damping > 1e8:
                break
    return x, float(cost)


def fit(rows: list[dict] | None = None, params: int | None = None) -> scale.Fitted:
    """The constants minimizing the soft-L1 loss on the training subset of `rows`. `hidden` is
    where the loss has several local minima (the max() of the exposed reduction), so it is
    first scanned on a grid of 11 values with the other two fitted at each, then all three are
    refined from the best."""
    if rows is None:
        rows = scale.published_results()
    if params is None:
        from bert.model.config import ModelConfig
        from bert.plan.memory import parameter_count

        params = parameter_count(ModelConfig())

    def terms(x: np.ndarray) -> np.ndarray:
        return _soft(residuals(scale.Fitted(*x), rows, params))

    scans = [_least_squares(terms, np.array([*START[:2], h]), [0, 1]) for h in HIDDEN_GRID]
    best = min(scans, key=lambda found: found[1])[0]
    x, _ = _least_squares(terms, best, [0, 1, 2])
    return scale.Fitted(*(float(v) for v in x))


def disagreements(pinned: scale.Fitted, fitted: scale.Fitted) -> list[str]:
    """Names of the constants where `pinned` (three significant figures) is not `fitted`:
    further apart than 0.5% of the pinned value, or 0.001 for a value pinned at 0."""
    return [
        name
        for name in NAMES
        if abs(getattr(pinned, name) - getattr(fitted, name))
        > max(5e-3 * abs(getattr(pinned, name)), 1e-3)
    ]


def main(argv: list[str] | None = None) -> int:
    p = command_parser("python -m bert.plan.fit", __doc__)
    p.add_argument("--list", action="store_true", help="list the split, do not fit")
    args = p.parse_args(argv)
    rows = scale.published_results()
    if args.list:
        for kind, row_id in calibration_ids(rows).items():
            print(f"calibration {kind}: {row_id}")
        for r in training_rows(rows):
            print(f"training {r['gpu']} x{r['gpus']}: {scale.row_id(r)}")
        return 0
    k = fit(rows)
    for name in NAMES:
        print(f"{name} = {getattr(k, name):.6g}")
    from bert.model.config import ModelConfig
    from bert.plan.memory import parameter_count

    res = residuals(k, rows, parameter_count(ModelConfig()))
    print(
        f"{len(training_rows(rows))} training results, {len(res)} residuals; median "
        f"|log error| {statistics.median(abs(res)):.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
